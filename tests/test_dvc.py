"""Real DVC on a temporary copy of the project: ``dvc repro`` of the chain and of the synthetic sweep.

Apart from ``test_end_to_end.py`` so that the test workers (pytest-xdist, one file per
worker at a time) share the long end-to-end runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from tests.test_end_to_end import BIN, _copy_project, _run, _run_failing

pytestmark = pytest.mark.slow


def test_dvc_repro_runs_everything_then_nothing_then_only_train_and_evaluate(tmp_path: Path) -> None:
    project = _copy_project(tmp_path)
    _run(["git", "init", "-q"], project)
    dvc = str(BIN / "dvc")
    first = _run([dvc, "repro"], project, KEDRO_ENV="smoke")
    for stage in ("ingest", "preprocess", "vocab_consensus", "embed", "train", "evaluate"):
        assert f"Running stage '{stage}'" in first.stdout
    assert (project / "data/08_reporting/metrics.json").is_file()
    second = _run([dvc, "repro"], project, KEDRO_ENV="smoke")
    assert "Running stage" not in second.stdout
    params = project / "conf/base/parameters_train.yml"
    before = params.read_text()
    changed = re.sub(r"(?m)^(    lr: )[0-9.]+", r"\g<1>0.00123", before, count=1)
    assert changed != before  # the learning rate really changed: whatever the shipped value is
    params.write_text(changed)
    third = _run([dvc, "repro"], project, KEDRO_ENV="smoke")
    ran = {
        s
        for s in ("ingest", "preprocess", "vocab_consensus", "embed", "train", "evaluate")
        if f"Running stage '{s}'" in third.stdout
    }
    assert ran == {"train", "evaluate"}
    shown = _run([dvc, "metrics", "show"], project)
    assert "failed to load" not in shown.stderr  # no metrics file of a stage never run (the sweeps)
    rows = [line.split()[0] for line in shown.stdout.splitlines()[1:] if line.strip()]
    assert all(row.startswith("data/08_reporting/headline/") for row in rows), rows  # one row per scenario
    assert {"federated", "centralized", "non_collaborative_local_mean"} <= {Path(row).stem for row in rows}
    # readable in a terminal (metrics.json as the DVC metric made one row of ~19,000 columns)
    assert max(len(line) for line in shown.stdout.splitlines()) < 200


def test_smoke_synthetic_sweep_through_dvc_with_nested_mlflow_runs(tmp_path: Path) -> None:
    project = _copy_project(tmp_path)
    _run(["git", "init", "-q"], project)
    dvc = str(BIN / "dvc")
    first = _run([dvc, "repro", "experiments/synthetic/dvc.yaml:A"], project, KEDRO_ENV="smoke")
    assert "Running stage 'experiments/synthetic/dvc.yaml:A'" in first.stdout
    out = project / "data/08_reporting/synthetic"
    runs = pd.read_csv(out / "runs_A.csv")
    assert sorted(runs["value"].unique()) == [2, 4]
    assert set(runs["model"]) == {"federated", "centralized", "local__org1", "local__org2"}
    assert (out / "fig3_A.png").stat().st_size > 10_000
    metrics = json.loads((out / "metrics_A.json").read_text())
    assert set(metrics["points"]) == {"2", "4"}
    second = _run([dvc, "repro", "experiments/synthetic/dvc.yaml:A"], project, KEDRO_ENV="smoke")
    assert "Running stage" not in second.stdout

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("fedtopic_pipelines")
    all_runs = client.search_runs([experiment.experiment_id])
    parent = next(r for r in all_runs if r.info.run_name.startswith("synthetic@smoke "))
    children = [r for r in all_runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.info.run_name for r in children) == ["sweep A: n_shared=2 rep 0", "sweep A: n_shared=4 rep 0"]
    assert parent.data.params["synthetic.generator.n_topics"] == "6"
    assert "dss.scenario.federated" in children[0].data.metrics

    output = _run_failing([str(BIN / "kedro"), "run", "--pipelines=synthetic", "--params=synthetic.sweep=C"], project)
    assert "parameter 'synthetic.sweep' is 'C'" in output
