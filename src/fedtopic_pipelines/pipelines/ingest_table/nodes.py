"""Nodes of ``ingest_table``."""

from __future__ import annotations

from typing import Any

from fedtopic_pipelines.core.text.corpus import SourceTable, partition_corpus, table_to_raw


def partition_table(table: SourceTable, organisations: list[str], params: dict[str, Any]) -> dict[str, Any]:
    """Split a user's table by its organisation column; rows of unlisted organisations are counted."""
    raw = table_to_raw(
        table,
        text_column=params["text_column"],
        organisation_column=params["organisation_column"],
        label_column=params.get("label_column"),
        split_column=params.get("split_column"),
        test_fraction=params.get("test_fraction", 0.2),
        seed=params.get("seed", 42),
    )
    tables, report = partition_corpus(
        raw,
        raw.documents["organisation"],
        organisations,
        table.path,
        params.get("max_documents"),
        params.get("seed", 42),
    )
    report["corpus"] = "table"
    return {**{f"raw__{org}": tables[org] for org in organisations}, "report": report}
