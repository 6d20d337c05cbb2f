"""The batched metrics history logs what kedro-mlflow's logs, value for value, into a real store."""

from __future__ import annotations

import mlflow
import pytest
from kedro_mlflow.io.metrics import MlflowMetricsHistoryDataset

from fedtopic_pipelines.mlflow_metrics import BatchedMetricsHistoryDataset


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_experiment("metrics")
    yield mlflow.tracking.MlflowClient()
    mlflow.set_tracking_uri(None)


def _logged(client, run_id: str, keys) -> dict:
    return {k: sorted((m.step, m.value) for m in client.get_metric_history(run_id, k)) for k in keys}


def test_batches_log_the_same_history_as_one_call_per_value(store) -> None:
    history = {
        "loss": [{"step": s, "value": 1.0 / (s + 1)} for s in range(1203)],  # more than one batch of 1,000
        "seconds": {"step": 0, "value": 2.5},
    }
    runs = {}
    for name, cls in (("one", MlflowMetricsHistoryDataset), ("batch", BatchedMetricsHistoryDataset)):
        with mlflow.start_run() as run:
            cls(prefix="train").save(history)
            runs[name] = run.info.run_id
    keys = ("train.loss", "train.seconds")
    assert _logged(store, runs["batch"], keys) == _logged(store, runs["one"], keys)
    assert len(_logged(store, runs["batch"], keys)["train.loss"]) == 1203


def test_switched_off_it_logs_nothing(store) -> None:
    dataset = BatchedMetricsHistoryDataset()
    dataset._logging_activated = False
    with mlflow.start_run() as run:
        dataset.save({"loss": {"step": 0, "value": 1.0}})
    assert store.get_metric_history(run.info.run_id, "loss") == []
