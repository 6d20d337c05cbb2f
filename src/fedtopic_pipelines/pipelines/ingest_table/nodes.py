"""Nodes of ``ingest_table``."""

from __future__ import annotations

from typing import Any

from fedtopic_pipelines.core.config import IngestTableConfig, from_mapping
from fedtopic_pipelines.core.ingest.partition import partition_raw_corpus, report_partition
from fedtopic_pipelines.core.text.corpus import SourceTable, partition_corpus, table_to_raw
from fedtopic_pipelines.pipelines.naming import ingestion_result


def partition_table(table: SourceTable, organisations: list[str], params: dict[str, Any]) -> dict[str, Any]:
    """Split a user's table by its organisation column (rows of unlisted organisations are
    counted), or with ``ingest_table.partition`` draw the organisations by label skew."""
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
    partition = None
    if config.partition is not None:
        what = f"table '{table.path}', column {config.label_column!r} (ingest_table.partition)"
        raw, partition = partition_raw_corpus(raw, organisations, config.partition.alpha, config.partition.seed, what)
    tables, report = partition_corpus(
        raw, raw.documents["organisation"], organisations, table.path, config.max_documents, config.seed
    )
    report["corpus"] = "table"
    if partition is not None:
        report_partition(report, partition)
    return ingestion_result({org: tables[org] for org in organisations}, report)
