"""Nodes of ``ingest_table``."""

from __future__ import annotations

from typing import Any

from fedtopic_pipelines.core.config import IngestTableConfig, from_mapping
from fedtopic_pipelines.core.text.corpus import SourceTable, partition_corpus, table_to_raw
from fedtopic_pipelines.pipelines.naming import ingestion_result


def partition_table(table: SourceTable, organisations: list[str], params: dict[str, Any]) -> dict[str, Any]:
    """Split a user's table by its organisation column; rows of unlisted organisations are counted."""
    config = from_mapping(IngestTableConfig, params, "ingest_table")
    raw = table_to_raw(
        table,
        text_column=config.text_column,
        organisation_column=config.organisation_column,
        label_column=config.label_column,
        split_column=config.split_column,
        test_fraction=config.test_fraction,
        seed=config.seed,
    )
    tables, report = partition_corpus(
        raw, raw.documents["organisation"], organisations, table.path, config.max_documents, config.seed
    )
    report["corpus"] = "table"
    return ingestion_result({org: tables[org] for org in organisations}, report)
