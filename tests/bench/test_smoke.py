"""Every benchmark runs in its smoke mode, so none can rot unnoticed (``make bench`` once failed for
weeks on a renamed parameter). Each is a real subprocess run of the script, as a user runs it."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import DEMO_WHEEL, PROJECT

BENCH = PROJECT / "bench"


def run_bench(script: str, *args: str, timeout: float = 300) -> str:
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1", "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
    env.pop("KEDRO_ENV", None)
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done.stdout


def test_every_benchmark_script_has_a_smoke_test() -> None:
    # helpers, not benchmarks: ctm_runner.py runs inside the reference's venv, through bench_quality.py
    scripts = {p.name for p in BENCH.glob("*.py") if p.name not in {"common.py", "dumpgen.py", "ctm_runner.py"}}
    tested = {"bench_training.py", "bench_synthetic.py", "bench_ingest.py", "diagnose_batchnorm_grouping.py"}
    tested |= {"bench_flower.py", "bench_quality.py", "bench_learning_curve.py", "bench_vocab_floors.py"}
    tested |= {"screen_normalisation.py", "demo_pooled_coherence.py", "bench_long_document.py", "bench_embeddings.py"}
    tested |= {"bench_word2vec.py", "bench_nmf.py", "bench_pctd.py", "bench_privacy.py", "bench_secagg.py"}
    tested |= {"bench_attacks.py", "make_small_corpora.py", "bench_small_corpora.py", "bench_pooled.py"}
    tested |= {"bench_scale.py", "bench_nmf_exact.py", "bench_evaluation.py"}
    assert scripts == tested, scripts ^ tested


def test_bench_long_document_smoke() -> None:
    src = str(PROJECT / "src")
    out = run_bench("bench_long_document.py", "--before", src, "--after", src, "--sizes-mb", "0.3")
    rows = [line for line in out.splitlines() if line.startswith("| 0.3 MB |")]
    assert len(rows) == 4 and all(row.endswith("|  |") for row in rows), out  # logged, then tabled; no error


def test_bench_training_smoke() -> None:
    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    out = run_bench("bench_training.py", "--smoke")
    assert "| centralized |" in out and "| federated (in-process) |" in out and "ratio federated / centralized" in out


@pytest.mark.slow  # over 30 s on two cores
def test_bench_training_layouts_and_threads_policy_smoke() -> None:
    out = run_bench("bench_training.py", "--layouts", "--smoke")
    assert "| dense (before) |" in out and "| sparse CSR (now) |" in out and "speed-up sparse / dense" in out
    out = run_bench("bench_training.py", "--threads-policy", "--smoke")
    assert "| 1 thread | 1 |" in out and "OMP_WAIT_POLICY=PASSIVE" in out


def test_bench_quality_smoke() -> None:
    """Our two scenarios always run; the reference only where its venv exists (the smoke mode
    never creates it), and its absence is then said, not hidden."""
    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    out = run_bench("bench_quality.py", "--smoke")
    assert "| ours, centralized |" in out and "| ours, federated (5 organisations) |" in out
    assert "| largest topic overlap | inverted RBO |" in out
    reference = next(line for line in out.splitlines() if line.startswith("| CTM 2.6.1 ProdLDA (reference) |"))
    assert "| skipped |" in reference or reference.endswith("| 1.00x |"), reference


def test_bench_quality_sync_scenario_smoke() -> None:
    """Synchronised BatchNorm (the federated streams, one normalised batch per step) is scored
    like the other systems; the scenarios not asked for say so."""
    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    out = run_bench("bench_quality.py", "--smoke", "--no-reference", "--scenarios", "sync")
    row = next(
        line for line in out.splitlines() if line.startswith("| ours, synchronised BatchNorm (5 organisations) |")
    )
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert all(float(c) == float(c) for c in cells[1:8]), row  # NPMI .. documents / CPU-s: numbers, none NaN
    assert "| ours, federated (5 organisations) | skipped" in out and "| ours, centralized | skipped" in out


@pytest.mark.slow  # a kedro bootstrap to write the corpus, then the bench: over 30 s on two busy cores
def test_bench_quality_reads_the_organisations_raw_tables(tmp_path: Path) -> None:
    """``--raw``: a user's corpus (each organisation's Parquet folder), not the demo, is the bag of
    words every system is compared on."""
    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    write = (
        "import sys; from pathlib import Path; sys.path.insert(0, 'bench'); "
        "from common import demo_tables, project_config; params, _ = project_config('smoke'); "
        f"root = Path({str(tmp_path)!r}); "
        "[((root / org).mkdir(), table.head(60).to_parquet(root / org / 'part-00000.parquet')) "
        "for org, table in demo_tables(params).items()]"
    )
    done = subprocess.run([sys.executable, "-c", write], cwd=PROJECT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = run_bench("bench_quality.py", "--smoke", "--no-reference", "--raw", str(tmp_path))
    assert "| ours, federated (5 organisations) |" in out
    corpus = next(line for line in out.splitlines() if line.startswith(f"raw tables under {tmp_path}"))
    assert int(corpus.split(" organisations, ")[1].split(" training")[0]) <= 300, corpus  # 60 per organisation


@pytest.mark.slow  # two kedro bootstraps and four short trainings: over 30 s on two busy cores
def test_bench_pooled_smoke(tmp_path: Path) -> None:
    """Pooled BatchNorm's cost against layer and batch, and its spread of honest values per exchange."""
    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    run_bench("bench_pooled.py", "cost", "--smoke", "--json", str(tmp_path / "cost.json"))
    run_bench("bench_pooled.py", "spread", "--smoke", "--json", str(tmp_path / "spread.json"))
    cost = json.loads((tmp_path / "cost.json").read_text())["cost"]
    assert set(cost["cpu_s_per_step"]) == {"layer", "batch", "pooled_batch"}
    assert [cost["last_step"][k]["messages"] for k in ("layer", "batch", "pooled_batch")] == [1, 1, 5]
    spread = json.loads((tmp_path / "spread.json").read_text())["spread"]
    assert {"sums 1", "sums 2", "derivatives 2", "derivatives 1", "gradient"} <= set(spread), spread
    assert all(v["percentiles"]["50"] >= 1.0 for k, v in spread.items() if k != "steps")


def test_bench_vocab_floors_smoke() -> None:
    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    out = run_bench("bench_vocab_floors.py", "--smoke")
    rows = [line for line in out.splitlines() if line.startswith("| 1 | 0 |") or line.startswith("| 2 | 5 |")]
    assert len(rows) == 2, out
    no_floor, floors = (int(row.split("|")[3]) for row in rows)
    assert floors < no_floor  # the floors removed terms


def test_bench_synthetic_smoke() -> None:
    out = run_bench("bench_synthetic.py", "--smoke")
    assert "| vectorised" in out and "| total point |" in out and "| federated |" in out


def test_diagnose_batchnorm_grouping_smoke() -> None:
    out = run_bench("diagnose_batchnorm_grouping.py", "--smoke")
    assert "| 0 | mixed (as trained) |" in out and "| 0 | sorted by organisation |" in out


def test_screen_normalisation_smoke() -> None:
    out = run_bench("screen_normalisation.py", "--smoke", "federated:layer", "sync:batch")
    assert "| 0 | ground truth |" in out and "| 0 | federated:layer |" in out and "| 0 | sync:batch |" in out


def test_demo_pooled_coherence_on_a_tiny_data_folder(tmp_path: Path) -> None:
    """The script reads a Kedro data folder: vocabulary, token shards, trained models."""
    import pandas as pd
    import scipy.sparse as sp

    from fedtopic_pipelines.core.config import TrainConfig
    from fedtopic_pipelines.core.model_store import save_models
    from fedtopic_pipelines.core.training import train_scenarios

    terms = [f"w{j}" for j in range(12)]
    (tmp_path / "05_model_input").mkdir()
    pd.DataFrame({"term": terms}).to_parquet(tmp_path / "05_model_input/vocabulary.parquet")
    rng = np.random.default_rng(0)
    for org in ("a", "b"):
        folder = tmp_path / "02_intermediate/tokens" / org
        folder.mkdir(parents=True)
        texts = [" ".join(rng.choice(terms, size=8)) for _ in range(10)]
        pd.DataFrame({"split": ["train"] * 10, "tokens": texts}).to_parquet(folder / "part-00000.parquet")
    matrices = {org: sp.csr_matrix(rng.poisson(1.0, size=(10, 12)).astype(float)) for org in ("a", "b")}
    config = TrainConfig.from_params(
        {"model": {"n_topics": 2, "hidden_sizes": [4]}, "batch_size": 4, "max_steps": 2, "device": "cpu"}
    )
    models = train_scenarios(matrices, config.replace(scenarios=("federated", "centralized")), progress=False)
    save_models(tmp_path / "06_models/trained_models", models)
    out = run_bench("demo_pooled_coherence.py", "--data", str(tmp_path))
    assert "| federated | batch |" in out and "| centralized | batch |" in out


@pytest.mark.slow  # over 30 s on two cores
def test_bench_ingest_smoke(tmp_path: Path) -> None:
    run_bench("bench_ingest.py", "--smoke", "--workdir", str(tmp_path), "--skip", "profile")
    assert (tmp_path / "ingest.json").is_file()


@pytest.mark.deployment
@pytest.mark.slow  # over 30 s on two cores
def test_bench_secagg_smoke() -> None:
    """One plain and one secure round on a loopback federation of 3 organisations."""
    out = run_bench("bench_secagg.py", "--rounds", "1", "--organisations", "3", timeout=500)
    assert "secure" in out and "plain" in out


def test_bench_secagg_grid_smoke() -> None:
    """The same rounds on the in-process grid: 4 messages per organisation and secure round, 1 plain."""
    out = run_bench("bench_secagg.py", "--grid", "--rounds", "1", "--organisations", "3", timeout=300)
    rows = {line.split("|")[2].strip(): line.split("|") for line in out.splitlines() if line.startswith("| 3 |")}
    assert float(rows["plain"][3]) == 3 and float(rows["secure"][3]) == 12


@pytest.mark.deployment
@pytest.mark.slow  # over 30 s on two cores
def test_bench_flower_smoke() -> None:
    out = run_bench("bench_flower.py", "--smoke", timeout=400)
    assert "| Flower, warm |" in out and "| in-process |" in out


@pytest.mark.slow  # over 30 s on two cores
def test_bench_scale_smoke(tmp_path: Path) -> None:
    """In process only: N = 3 organisations cut from the smoke demo, a few rounds, every output written.
    (Its Flower part starts a LocalFederation, as bench_flower's smoke does: not run again here.)"""
    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    out = run_bench("bench_scale.py", "--smoke", "--no-flower", "--out", str(tmp_path))
    assert "| 3 | in-process | 6 |" in out, out
    result = json.loads((tmp_path / "scale.json").read_text())["results"][0]
    assert result["rounds"] == 6 and result["reached"]["-1"]["round"] == 3  # the smoke target (-1) is met at once
    up, down = result["uplink_bytes_per_round"], result["downlink_bytes_per_round_computed"]
    assert abs(up - down) < 0.01 * down  # FedSGD: a gradient the model's size up, the model down
    assert 0 < result["rss_before_training_mb"] <= result["peak_rss_mb"]
    rows = list(csv.DictReader((tmp_path / "scale_curve.csv").open()))
    assert [int(r["round"]) for r in rows] == [3, 6] and all(-1 <= float(r["npmi"]) <= 1 for r in rows)
    assert (tmp_path / "scale.png").stat().st_size > 0 and (tmp_path / "scale.csv").is_file()


def test_bench_learning_curve_smoke(tmp_path) -> None:
    out, topics_out = tmp_path / "curve.csv", tmp_path / "topics.json"
    local = "aggregation.rule=fedavg,aggregation.local_steps=3"  # a train option by its path
    args = ("--smoke", "--no-progress", "--out", str(out), "--topics-out", str(topics_out), "--variants", "", local)
    run_bench("bench_learning_curve.py", *args, "--penalty", "top_words:10")
    lines = out.read_text().splitlines()
    assert lines[0].startswith("variant,scenario,batch_size,lr,seed,round,passes,npmi,topic_diversity")
    assert len(lines) >= 5  # a row per evaluated pass and variant, header first
    assert {row["variant"] for row in csv.DictReader(lines)} == {"configured", local}
    points = json.loads(topics_out.read_text())
    assert len(points) == len(lines) - 1
    for point in points:  # the redundancy columns agree with the top words they were computed from
        topics = [set(t) for t in point["topics"]]
        assert len(topics) == 5 and all(len(t) == 10 for t in topics)  # smoke: 5 topics, evaluate.top_words 10
        shared = [len(a & b) for i, a in enumerate(topics) for b in topics[i + 1 :]]
        assert point["largest_topic_overlap"] == max(shared)
        assert point["duplicate_topic_pairs"] == sum(n >= 5 for n in shared)
        assert len(point["duplicate_pairs_detail"].split()) == point["duplicate_topic_pairs"]
        assert 0.0 < point["inverted_rbo"] <= 1.0 and -1.0 <= point["npmi"] <= 1.0
        assert 0.0 <= point["macro_f1"] <= 1.0  # defined: the smoke organisations hold several classes


def test_bench_embeddings_smoke() -> None:
    out = run_bench("bench_embeddings.py", "--smoke")
    rows = [line for line in out.splitlines() if line.startswith("| ")][2:]
    assert len(rows) == 5 and rows[0].startswith("| reference: CTM 2.6.1"), out
    assert "| 1.000 / 1.000 |" in rows[1]  # ours at 128 pieces equals the reference's embeddings


def test_bench_word2vec_smoke() -> None:
    out = run_bench("bench_word2vec.py", "--smoke")
    rows = [line for line in out.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == 4 and rows[0].startswith("| gensim"), out
    assert "bytes per client and round" in out
    out = run_bench("bench_word2vec.py", "--smoke", "--memory")
    rows = [line for line in out.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == 2, out


def test_bench_nmf_smoke() -> None:
    out = run_bench("bench_nmf.py", "--smoke")
    assert "| scikit-learn max_iter |" in out and "seconds per client" in out


def test_bench_nmf_exact_smoke(tmp_path: Path) -> None:
    """FedNMF exact through the engine stops at scikit-learn's iteration with its H and error."""
    out = run_bench("bench_nmf_exact.py", "--smoke", "--json", str(tmp_path / "exact.json"))
    assert "time to the converged loss" in out
    figures = json.loads((tmp_path / "exact.json").read_text())
    federated, reference = figures["equality"]["iterations"]
    assert federated == reference and figures["equality"]["h_relative"] < 1e-9
    ours, theirs = figures["equality"]["reconstruction_error"]
    assert ours == pytest.approx(theirs)


def test_bench_evaluation_smoke(tmp_path: Path) -> None:
    """Sparse completion perplexity gives the dense number; batched logging logs the same values."""
    out = run_bench("bench_evaluation.py", "--smoke", "--json", str(tmp_path / "evaluation.json"))
    dense, sparse = (float(x) for x in re.search(r"dense ([\d.e+]+), sparse ([\d.e+]+)", out).groups())
    assert sparse == pytest.approx(dense, rel=1e-5)
    assert "logged values read back equal" in out
    rows = json.loads((tmp_path / "evaluation.json").read_text())
    assert {r["what"].split(",")[0] for r in rows} >= {"completion perplexity", "metric logging"}


def test_bench_pctd_smoke() -> None:
    out = run_bench("bench_pctd.py", "--smoke")
    assert "| gensim LdaModel, 1 pass |" in out and "(projected) |" in out and "(per entry) |" in out
    assert "M_t at V = 2000, K = 100: 1.6 MB as sent" in out


def test_bench_attacks_smoke(tmp_path: Path) -> None:
    """A hostile organisation's table under a privacy override: ProdLDA takes the median, Word2Vec
    refuses it; the silent organisation fails every round and the honest run loses none."""
    import json

    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    results = tmp_path / "attacks.json"
    out = run_bench(
        "bench_attacks.py",
        *("--smoke", "--families", "prodlda", "word2vec", "--attacks", "none", "silent", "scale1000"),
        *("--privacy", "robust_rule=median", "--out", str(results)),
    )
    saved = json.loads(results.read_text())
    assert saved["privacy"]["robust_rule"] == "median" and saved["privacy_overrides"] == {"robust_rule": "median"}
    attacker, cells = saved["attacker"], saved["families"]["prodlda"]
    assert cells["silent"]["failed"] == {attacker: 3} and cells["silent"]["rounds"] == 3
    assert cells["none"]["failed"] == cells["none"]["rejected"] == {} and cells["none"]["attacked"] == 0
    assert cells["scale1000"]["attacked"] == 3 and isinstance(cells["scale1000"]["honest_loss"], float)
    assert "robust" in saved["families"]["word2vec"]["refused"]
    assert "| prodlda | scale1000 |" in out and "| word2vec | all | refused" in out, out


def test_bench_privacy_smoke(tmp_path: Path) -> None:
    """The attack table and the DP quality sweep on a tiny demo slice; the baseline leaks hold."""
    import json

    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    results, png = tmp_path / "privacy.json", tmp_path / "privacy.png"
    out = run_bench("bench_privacy.py", "--quick", "--json", str(results), "--png", str(png))
    assert "| prodlda | (a) first layer (exact zeros): P / R / AUC | 1.00 / 1.00 / 1.00 |" in out, out
    assert "| word2vec | (b) U rows = centre words: P / R / AUC | 1.00 / 1.00 / 1.00 |" in out, out
    assert "| client, sigma 1 | 1 |" in out and "| sample, sigma 1 | 1 |" in out and png.is_file()
    saved = json.loads(results.read_text())
    assert set(saved["attacks"]) == {"prodlda", "nmf", "word2vec"}
    assert "a" in saved["attacks"]["prodlda"]["columns"]["dp@sample"]  # DP-SGD ran for ProdLDA
    assert "refused" in out.split("| nmf |", 1)[1].split("\n", 1)[0]  # NMF's local epochs refuse it
    assert [r["level"] for r in saved["synthetic"]] == ["off", "client", "sample"]  # gFedNTM's DSS and TSS
    assert all(np.isfinite(r["dss"]) and r["tss"] > 0 for r in saved["synthetic"])


def test_make_small_corpora_writes_three_user_sized_corpora(tmp_path: Path) -> None:
    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    run_bench("make_small_corpora.py", "--root", str(tmp_path))
    news = (tmp_path / "data/01_raw/small/news500.csv").read_text().splitlines()
    assert news[0] == "text,organisation,label" and len({line.rsplit(",", 2)[1] for line in news[1:]}) == 5
    assert "corpus: table" in (tmp_path / "conf/reuters3k/parameters.yml").read_text()
    records = (tmp_path / "data/01_raw/s2orc/sample.jsonl").read_text().splitlines()
    assert len(records) == 1000 and '"fieldsOfStudy"' in records[0]


@pytest.mark.slow  # two kedro bootstraps and two trainings: over 30 s on two busy cores
def test_bench_small_corpora_smoke(tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    run_bench("bench_small_corpora.py", "vocab", "--settings", "", "min_terms=0", "--out", str(out))
    run_bench("bench_small_corpora.py", "curve", "--passes", "0.5", "--every", "0.25", "--out", str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["setting"] for r in rows[:2]] == ["default", "min_terms=0"] and all(r["terms"] > 0 for r in rows[:2])
    curves = rows[2:]
    assert {r["scenario"] for r in curves} == {"federated", "centralized"}
    assert all({"npmi", "duplicate_pairs", "inverted_rbo"} <= set(r) for r in curves)
