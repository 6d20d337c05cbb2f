"""kedro-mlflow's metrics history dataset, logged in batches (its own module: it imports mlflow)."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from kedro.io import DatasetError
from kedro_mlflow.io.metrics import MlflowMetricsHistoryDataset
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient


class BatchedMetricsHistoryDataset(MlflowMetricsHistoryDataset):
    """kedro-mlflow's metrics history, logged in batches (``MlflowClient.log_batch``, at most
    ``BATCH`` metrics a call) instead of one ``log_metric`` call, one SQL commit, per value: a
    run's per-round history is thousands of values (docs/performance.md). Same keys, values
    and steps; every value of one save carries one timestamp."""

    BATCH: ClassVar[int] = 1000  # MLflow's limit on the metrics of one log_batch

    def _save(self, data: dict[str, Any]) -> None:
        try:
            run_id = self.run_id
        except DatasetError:
            run_id = None
        if run_id is None:  # no run to log into: kedro-mlflow's own behaviour (it starts one)
            super()._save(data)
            return
        if not self._logging_activated:
            return
        stamp = int(time.time() * 1000)
        metrics = [
            Metric(key, float(value), stamp, int(step))
            for name, item in data.items()
            for key, value, step in self._build_args_list_from_metric_item(name, item)
        ]
        client = MlflowClient()
        for start in range(0, len(metrics), self.BATCH):
            client.log_batch(run_id, metrics=metrics[start : start + self.BATCH])
