"""The ``synthetic`` pipeline on in-memory data, and its MLflow dataset on a real sqlite store."""

from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from fedtopic_pipelines.datasets import MlflowNestedRunsDataset
from fedtopic_pipelines.pipelines import synthetic
from tests.experiments.test_synthetic import TINY
from tests.pipelines.conftest import run_slice

TWO_POINTS = {**TINY, "sweeps": {"A": {"parameter": "n_shared", "values": [0, 2]}}, "repetitions": 2}


@pytest.fixture(scope="module")
def outputs() -> dict:
    return run_slice(synthetic.create_pipeline(), {"params:synthetic": TWO_POINTS})


def test_sweep_table_has_every_model_of_every_point(outputs: dict) -> None:
    runs = outputs["synthetic_tables"]["runs_A"]
    assert len(runs) == 2 * 2 * 4  # values x repetitions x (federated, centralized, 2 local)
    assert set(runs["value"]) == {0, 2} and set(runs["repetition"]) == {0, 1}
    assert (runs["sweep"] == "A").all() and runs["train_s"].gt(0).all()
    summary = outputs["synthetic_tables"]["summary_A"]
    assert set(summary["scenario"]) == {"federated", "centralized", "non_collaborative"}
    assert (summary["repetitions"] == 2).all()


def test_metrics_figure_and_nested_run_records(outputs: dict) -> None:
    metrics = outputs["synthetic_metrics"]["metrics_A"]
    assert set(metrics["points"]) == {"0", "2"}
    assert set(metrics["points"]["2"]) == {"federated", "centralized", "non_collaborative", "tss_baseline"}
    figure = outputs["synthetic_figures"]["fig3_A"]
    assert len(figure.axes) == 2
    record = outputs["synthetic_mlflow_runs"]
    assert [r["name"] for r in record["runs"]] == [
        "sweep A: n_shared=0 rep 0",
        "sweep A: n_shared=0 rep 1",
        "sweep A: n_shared=2 rep 0",
        "sweep A: n_shared=2 rep 1",
    ]
    assert {"dss.scenario.centralized", "tss.local__org2", "tss_baseline"} <= set(record["runs"][0]["metrics"])
    plt.close("all")


def test_nested_runs_land_under_one_parent_in_a_real_store(
    outputs: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("sweeps", artifact_location=(tmp_path / "artifacts").as_uri())
    try:
        mlflow.set_experiment(experiment_id=experiment)
        MlflowNestedRunsDataset(parent_name="sweep test").save(outputs["synthetic_mlflow_runs"])
    finally:
        mlflow.set_tracking_uri(previous)
    runs = client.search_runs([experiment])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 4
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    assert children[0].data.params["sweep"] == "A"
    artifacts = {a.path for a in client.list_artifacts(parents[0].info.run_id, "synthetic")}
    assert artifacts == {"synthetic/runs_A.csv", "synthetic/summary_A.csv", "synthetic/fig3_A.png"}
    assert mlflow.active_run() is None  # the dataset closed the parent it opened
