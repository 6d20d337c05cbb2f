"""Real processes on a temporary copy of the project: kedro run, MLflow store, dvc repro."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedtopic_pipelines.experiments.config import FEDNMF_METHODS
from tests.conftest import DEMO_WHEEL, PROJECT
from tests.forked import run_python

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KEDRO_ENV"}
    env.update(KEDRO_DISABLE_TELEMETRY="1", MPLBACKEND="Agg", PATH=f"{BIN}:{env.get('PATH', '')}", **extra)
    return env


ORGS = ["computers", "recreation", "science", "politics_religion", "misc_forsale"]  # conf/base


def _copy_project(dest: Path) -> Path:
    """The working tree (tracked and new files, not ignored ones), numba's caches of its loops and
    the demo wheel."""
    files = (
        subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=PROJECT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, files):
        if (PROJECT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PROJECT / name, dest / name)
    for cache in (PROJECT / "src").rglob("__pycache__/*.nb[ic]"):  # numba's compiled loops (conftest warms them)
        target = dest / cache.relative_to(PROJECT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(cache, target)
    assert DEMO_WHEEL.is_file(), f"{DEMO_WHEEL} is missing: run 'make install'"
    (dest / ".cache" / "demo").mkdir(parents=True)
    (dest / ".cache" / "demo" / DEMO_WHEEL.name).symlink_to(DEMO_WHEEL)
    return dest


def _command(args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``args`` run in ``cwd``: ``kedro`` forked from the suite's preloaded server (tests/forked.py:
    the same console script and command line, without 5-7 CPU-s of library imports), any other
    program as a subprocess."""
    if args[0] == str(BIN / "kedro"):
        return run_python(args[0], args[1:], cwd, env, timeout)
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    result = _command(args, cwd, _env(**env), 600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result


def _run_failing(args: list[str], cwd: Path) -> str:
    """Run a command that must fail; return what it printed."""
    result = _command(args, cwd, _env(), 300)
    assert result.returncode != 0, result.stdout[-2000:]
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    project = _copy_project(tmp_path_factory.mktemp("smoke"))
    result = _run([str(BIN / "kedro"), "run", "--env=smoke"], project, COLUMNS="300")  # rich: no wrapping
    (project / "run.log").write_text(result.stdout + result.stderr)
    return project


def test_smoke_run_writes_metrics_and_figure(smoke_run: Path) -> None:
    metrics = json.loads((smoke_run / "data/08_reporting/metrics.json").read_text())
    assert set(metrics["scenarios"]) >= {"federated", "centralized", "non_collaborative"}
    for org in ("computers", "recreation", "science", "politics_religion", "misc_forsale"):
        assert metrics["models"]["federated"]["organisations"][org]["perplexity"] > 1
    assert metrics["models"]["federated"]["organisations"]["misc_forsale"]["macro_f1"] is None  # one newsgroup
    assert (smoke_run / "data/08_reporting/scenario_comparison.png").stat().st_size > 10_000
    report = json.loads((smoke_run / "data/08_reporting/ingestion_demo.json").read_text())
    assert report["kept"]["computers"] == {"train": 150, "test": 60}


def test_smoke_run_writes_the_privacy_report(smoke_run: Path) -> None:
    """Issue 19: the defences as set, the membership audit of every ProdLDA model against each
    organisation's held-out documents, and the pooled quality beside it."""
    report = json.loads((smoke_run / "data/08_reporting/privacy.json").read_text())
    assert report["defences"]["robust_rule"] == "mean" and report["defences"]["dp"]["level"] == "off"
    assert report["epsilon"] == {}  # no DP, no epsilon (never a made-up one)
    federated = report["attacks"]["membership"]["federated"]
    assert 0.0 <= federated["pooled"]["auc"] <= 1.0
    assert set(federated["per_organisation"]) == {
        "computers",
        "recreation",
        "science",
        "politics_religion",
        "misc_forsale",
    }
    assert report["quality"]["federated"]["c_npmi"] is not None


def test_smoke_run_is_one_mlflow_run_with_flat_params_metrics_and_artifacts(smoke_run: Path) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{smoke_run / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("fedtopic_pipelines")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1
    run = runs[0]
    # pipeline @ environment (not "__default__"), the family, the hash of what the environment changed
    changed = run.data.tags["params_changed_id"]
    assert run.info.run_name == f"all@smoke prodlda {changed}" and len(changed) == 6
    assert json.loads(run.data.tags["params_changed_from_base"])["train.max_steps"] == 30  # conf/smoke's
    # the configuration files that defined the run, by content (conf/base and conf/smoke)
    files = json.loads(run.data.tags["conf_files"])
    assert "conf/smoke/parameters.yml" in files and "conf/base/parameters_train.yml" in files
    assert len(run.data.tags["conf_fingerprint"]) == 16
    log = (smoke_run / "run.log").read_text()
    for phase in ("setting up MLflow tracking", "checking every parameter block", "building the pipelines"):
        assert phase in log, phase  # what happens before the first node is said
    assert f"MLflow run '{run.info.run_name}' ({run.info.run_id}): corpus 'demo', environment 'smoke'" in log
    # the corpus as the models saw it: the runs table's Dataset column
    (corpus,) = run.inputs.dataset_inputs
    tags = {t.key: t.value for t in corpus.tags}
    counts = {org: json.loads((smoke_run / f"data/08_reporting/vectorize/{org}.json").read_text()) for org in ORGS}
    assert corpus.dataset.name == "demo@smoke" and len(corpus.dataset.digest) == 16
    assert tags["organisations"] == ",".join(ORGS) and tags["mlflow.data.context"] == "training"
    assert int(tags["documents"]) == sum(sum(c["documents"].values()) for c in counts.values())
    assert run.data.params["corpus"] == "demo" and run.data.params["kedro_env"] == "smoke"
    assert run.data.tags["corpus"] == "demo" and "misc_forsale" in run.data.params["organisations"]
    assert run.data.params["train.model.n_topics"] == "5"
    assert run.data.params["vocab_consensus.merge"] == "union"
    assert "eval.scenario.federated.c_npmi" in run.data.metrics
    # the run ends with its seconds by stage, in the log and in MLflow
    assert "run finished after " in log and re.search(r"train_models: [0-9.]+ s \(1 x, longest", log)
    assert run.data.metrics["timing.train_models.seconds"] > 0
    assert "privacy.federated.membership_auc" in run.data.metrics
    assert run.data.params["privacy.robust_rule"] == "mean"
    assert run.data.metrics["ingest.kept.computers.train"] == 150
    history = client.get_metric_history(run.info.run_id, "train.federated.loss")
    assert [m.step for m in history] == [0, 5, 10, 15, 20, 25, 29]
    assert len(client.get_metric_history(run.info.run_id, "train.federated.client.science.loss")) == 7
    answers = client.get_metric_history(run.info.run_id, "train.federated.client.science.answer_seconds")
    assert len(answers) == 7 and all(m.value > 0 for m in answers)  # how fast it answered, at the same rounds
    assert len(client.get_metric_history(run.info.run_id, "train.federated.round_seconds")) == 7
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {
        "scenario_comparison.png",
        "topics.json",
        "metrics.json",
        "training_history.json",
        "ingestion_demo.json",
        "privacy.json",
    } <= artifacts


def test_fednmf_is_one_parent_mlflow_run_with_a_nested_run_per_model(smoke_run: Path) -> None:
    """Issue 17: the sweep's tables, figures and claims on disk; a parent run with one nested run
    per method and number of topics in the real MLflow store."""
    from mlflow.tracking import MlflowClient

    _run([str(BIN / "kedro"), "run", "--env=smoke", "--pipelines=fednmf"], smoke_run)
    report = smoke_run / "data/08_reporting/fednmf"
    metrics = json.loads((report / "metrics.json").read_text())
    assert set(metrics["table4"]) == set(FEDNMF_METHODS) and "claims" in metrics
    assert {p.name for p in (report / "tables").iterdir()} >= {"runs.csv", "table3_coherence.csv"}
    assert {p.name for p in (report / "figures").iterdir()} == {
        "fig2_accuracy_vs_topics.png",
        "fig3_f1_vs_bytes.png",
        "fig4_heterogeneity.png",
    }
    client = MlflowClient(tracking_uri=f"sqlite:///{smoke_run / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("fedtopic_pipelines")
    runs = client.search_runs([experiment.experiment_id])
    parent = next(r for r in runs if r.info.run_name.startswith("fednmf"))
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.info.run_name for r in children) == sorted(f"{m}-{k}" for m in FEDNMF_METHODS for k in (5, 8))
    assert all({"macro_f1", "accuracy", "we_coherence"} <= set(r.data.metrics) for r in children)
    assert "fednmf/table4_classification.csv" in {a.path for a in client.list_artifacts(parent.info.run_id, "fednmf")}


def test_compare_ranks_every_family_in_every_scenario_with_one_evaluator_and_one_set_of_mlflow_names(
    smoke_run: Path,
) -> None:
    """`--pipelines=compare`: every default family x every scenario in one leaderboard (CSV, Markdown,
    PNG, a dvc-metrics file per row), each empty cell with its reason, and one nested MLflow run
    per row whose metric names are the same across families."""
    from mlflow.tracking import MlflowClient

    _run([str(BIN / "kedro"), "run", "--env=smoke", "--pipelines=compare"], smoke_run)
    report = smoke_run / "data/08_reporting/compare"
    families = ["prodlda", "combinedtm", "zeroshottm", "nmf_exact", "nmf", "lda"]
    scenarios = ["federated", "centralized", "non_collaborative"]
    table = pd.read_csv(report / "leaderboard.csv")
    assert list(zip(table["family"], table["scenario"], strict=True)) == [(f, s) for f in families for s in scenarios]
    measures = ["c_npmi", "c_v", "topic_diversity", "largest_topic_overlap", "we_coherence", "macro_f1"]
    assert table[[*measures, "train_seconds"]].notna().all().all()
    # perplexity where the family defines one; bytes for every scenario but the pooled baseline
    assert table["perplexity"].isna().tolist() == [f.startswith("nmf") for f in table["family"]]
    sent = table.set_index(["family", "scenario"])["bytes_sent_per_organisation"]
    assert all(sent[(f, "federated")] > 0 and sent[(f, "non_collaborative")] == 0 for f in families)
    assert sent.xs("centralized", level="scenario").isna().all()
    summary = json.loads((report / "summary.json").read_text())
    assert "no word distribution" in summary["missing"]["nmf_exact.federated"]["perplexity"]
    assert "pools the documents" in summary["missing"]["prodlda.centralized"]["bytes_sent_per_organisation"]
    assert summary["recommendation"].startswith("Among federated models, ")
    assert summary["recommendation"] in (report / "leaderboard.md").read_text()
    assert (report / "leaderboard.png").stat().st_size > 10_000
    assert sorted(p.stem for p in (report / "headline").iterdir()) == sorted(
        f"{f}.{s}" for f in families for s in scenarios
    )
    # the evaluator scored every model inside the organisations: per-organisation scores of each
    metrics = json.loads((report / "metrics.json").read_text())
    assert set(metrics["models"]["nmf.federated"]["organisations"]) == set(metrics["organisations"])
    # a score that cannot be computed says why: misc_forsale holds one newsgroup, NMF no word distribution
    scores = metrics["models"]["nmf.federated"]["organisations"]
    assert scores["misc_forsale"]["macro_f1_undefined"].startswith("1 class with two or more labelled")
    assert "macro_f1_undefined" not in scores["computers"] and scores["computers"]["macro_f1"] is not None
    assert scores["computers"]["perplexity_undefined"] == "the family gives no word distribution per document"
    client = MlflowClient(tracking_uri=f"sqlite:///{smoke_run / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("fedtopic_pipelines").experiment_id])
    parent = max((r for r in runs if r.info.run_name.startswith("compare")), key=lambda r: r.info.start_time)
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.info.run_name for r in children) == sorted(f"{f}/{s}" for f in families for s in scenarios)
    common = {*measures, "train_seconds"}
    assert all(common <= set(r.data.metrics) for r in children)
    assert all({"family", "scenario", "n_topics", "max_steps", "rule"} <= set(r.data.params) for r in children)
    assert {r.info.run_name for r in children if "perplexity" in r.data.metrics} == {
        f"{f}/{s}" for f in families if not f.startswith("nmf") for s in scenarios
    }
    assert "compare/leaderboard.csv" in {a.path for a in client.list_artifacts(parent.info.run_id, "compare")}


def test_pctd_reports_perplexity_coherence_and_epsilon_for_every_scenario_in_mlflow(smoke_run: Path) -> None:
    """Issue 18: every scenario and baseline scored, (epsilon, delta) by RDP and PLD in metrics.json
    and MLflow, the three figures written."""
    from mlflow.tracking import MlflowClient

    from fedtopic_pipelines.core.privacy.accountant import gaussian_privacy

    _run([str(BIN / "kedro"), "run", "--env=smoke", "--pipelines=pctd"], smoke_run)
    report = smoke_run / "data/08_reporting/pctd"
    metrics = json.loads((report / "metrics.json").read_text())
    orgs = ["computers", "recreation", "science", "politics_religion", "misc_forsale"]
    models = metrics["models"]
    expected = {
        "federated",
        "centralized",
        "lda_pooled",
        *(f"local__{o}" for o in orgs),
        *(f"local_dp__{o}" for o in orgs),  # each party alone with the federation's noise (Fig. 3)
        *(f"lda_local__{o}" for o in orgs),
    }
    assert set(models) == expected
    for scores in models.values():
        assert np.isfinite(scores["perplexity"]) and scores["perplexity"] > 1
        assert {"umass", "npmi", "diversity", "largest_topic_overlap", "inverted_rbo"} <= set(scores)
        assert 0.0 <= scores["inverted_rbo"] <= 1.0
    spent = gaussian_privacy(0.25, 6, 1e-5)  # conf/base's sigma, the smoke run's 6 iterations
    assert models["federated"]["epsilon_rdp"] == pytest.approx(spent.epsilon_rdp, rel=1e-9)
    assert models["federated"]["epsilon_pld"] == pytest.approx(spent.epsilon_pld, rel=1e-9)
    assert models["centralized"]["epsilon_rdp"] is None  # no noise: no guarantee, not a number
    assert models["local_dp__science"]["epsilon_rdp"] == pytest.approx(spent.epsilon_rdp, rel=1e-9)
    # a lone party's model: the pooled view in perplexity, its own party's held-out documents named beside
    assert models["local__science"]["own_perplexity"] == models["local__science"]["perplexity.science"]
    assert models["lda_local__computers"]["own_perplexity"] == models["lda_local__computers"]["perplexity.computers"]
    assert "own_perplexity" not in models["federated"]
    assert {"federated_below_every_party_same_noise", "federated_below_every_party_no_noise"} <= set(metrics["claims"])
    assert (report / "fig3_parties.png").is_file()
    assert {p.name for p in (report / "figures").iterdir()} == {
        "fig2_perplexity_epsilon.png",
        "fig4_coherence_topics.png",
    }
    client = MlflowClient(tracking_uri=f"sqlite:///{smoke_run / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("fedtopic_pipelines")
    run = max(client.search_runs([experiment.experiment_id]), key=lambda r: r.info.start_time)
    assert run.data.metrics["pctd.eval.federated.epsilon_rdp"] == pytest.approx(spent.epsilon_rdp, rel=1e-9)
    assert "pctd.eval.federated.epsilon_pld" in run.data.metrics and "pctd.eval.federated.delta" in run.data.metrics
    assert "pctd.eval.lda_pooled.umass" in run.data.metrics
    assert "pctd.eval.local__science.own_perplexity" in run.data.metrics
    curve = client.get_metric_history(run.info.run_id, "pctd.train.federated.epsilon_rdp")
    assert [m.step for m in curve] == list(range(6))
    assert len(client.get_metric_history(run.info.run_id, "pctd.sweep.sigma_1.perplexity")) == 2


@pytest.mark.deployment
def test_engine_switch_trains_prodlda_and_word2vec_on_flower_equal_to_in_process(
    smoke_run: Path, tmp_path: Path
) -> None:
    """`--params=train.engine=flower` and `word2vec.train.engine=flower`: one loopback federation
    (SuperLink and SuperNodes with TLS and node authentication) trains both pipelines' federated
    scenario in one `kedro run`, into the same catalog outputs and MLflow store. The in-process
    reference trains ProdLDA under the Flower schedule's settings (`train.flower.local_steps`: its
    rule, server rate, local steps and optimiser in place of `train.aggregation` and
    `train.optimizer`); Word2Vec's schedule is the in-process one."""
    from fedtopic_pipelines.core.model_store import load_models
    from fedtopic_pipelines.flower.cli import project_parameters
    from fedtopic_pipelines.flower.deployment import LocalFederation

    orgs = ["computers", "recreation", "science", "politics_religion", "misc_forsale"]
    schedule = project_parameters("smoke")["train"]["flower"]["local_steps"]
    rounds = 3  # ProdLDA's (Word2Vec: 2): state carried across rounds; each waits on the SuperNodes' 3 s poll
    same = (
        f"train.max_steps={rounds},train.mlflow_every=1,train.aggregation.rule={schedule['rule']},"
        f"train.aggregation.eta={schedule['eta']},train.aggregation.local_steps={schedule['steps']},"
        f"train.optimizer.name={schedule['optimizer']['name']},train.optimizer.lr={schedule['optimizer']['lr']}"
    )
    wheel = PROJECT / ".cache/benchmarks/hyperhyper-0.3.0-py3-none-any.whl"  # make install's
    steps = (
        "word2vec.train.max_steps=2,word2vec.train.scenarios=[federated],word2vec.reference=none,"
        f"word2vec.evaluate.benchmarks_wheel={wheel}"
    )
    both = ["run", "--env=smoke", "--pipelines=train,word2vec"]
    _run([str(BIN / "kedro"), *both, f"--params={same},{steps}"], smoke_run)
    reference = load_models(smoke_run / "data/06_models/trained_models")["federated"]
    w2v_history = smoke_run / "data/07_model_output/word2vec/training_history.json"
    w2v_reference = load_models(smoke_run / "data/06_models/word2vec_models")["federated"]
    w2v_in_process = json.loads(w2v_history.read_text())["federated"]
    data = {org: smoke_run / "data/01_raw/organisations" / org for org in orgs}
    with LocalFederation(tmp_path / "federation", data) as federation:
        flower = (  # train.max_steps: the in-process scenarios' (Flower's federated takes its schedule's rounds)
            f"train.flower.local_steps.rounds={rounds},train.max_steps={rounds},train.mlflow_every=1,train.engine=flower,"
            f"train.flower.federation_dir={federation.root},{steps},"
            f"word2vec.train.engine=flower,word2vec.train.flower.federation_dir={federation.root}"
        )
        _run([str(BIN / "kedro"), *both, f"--params={flower}"], smoke_run)
    # ProdLDA
    models = load_models(smoke_run / "data/06_models/trained_models")
    worst = max(float((models["federated"].state[k] - reference.state[k]).abs().max()) for k in reference.state)
    assert worst <= 1e-5, f"max abs parameter difference Flower vs in-process: {worst}"
    assert "centralized" in models and any(name.startswith("local__") for name in models)  # still in process
    history = json.loads((smoke_run / "data/07_model_output/training_history.json").read_text())
    assert history["federated"]["engine"] == "flower" and history["centralized"]["engine"] == "in_process"
    assert sorted(history["federated"]["flower_run"]["nodes"]) == sorted(orgs)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{smoke_run / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("fedtopic_pipelines").experiment_id])
    latest = max(runs, key=lambda r: r.info.start_time)
    assert latest.data.params["train.engine"] == "flower"
    assert len(client.get_metric_history(latest.info.run_id, "train.federated.loss")) == rounds
    assert models["federated"].config.rule == schedule["rule"] and models["federated"].config.max_steps == rounds
    # Word2Vec: exactly the in-process model, losses and bytes
    w2v = load_models(smoke_run / "data/06_models/word2vec_models")["federated"]
    assert set(w2v.state) == set(w2v_reference.state) == {"input", "output"}
    worst = max(float((w2v.state[k] - w2v_reference.state[k]).abs().max()) for k in w2v_reference.state)
    assert worst == 0.0, f"max abs difference Flower vs in-process: {worst}"
    w2v_flower = json.loads(w2v_history.read_text())["federated"]
    assert w2v_flower["engine"] == "flower" and w2v_in_process["engine"] == "in_process"
    assert sorted(w2v_flower["flower_run"]["nodes"]) == sorted(orgs)
    assert w2v_flower["loss"] == w2v_in_process["loss"] and len(w2v_flower["loss"]) == 2
    # the server received the same sparse updates as in process, below the dense tables' bytes
    # (barely, at the smoke vocabulary: a batch touches most rows); that the Flower records carry
    # rows and not tables is tests/flower/test_records.py
    assert w2v_flower["bytes_sent"] == w2v_in_process["bytes_sent"]
    assert all(s < d for s, d in zip(w2v_flower["bytes_sent"], w2v_flower["bytes_dense"], strict=True))
