"""Nodes of ``ingest_archives``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedtopic_pipelines.core.config import IngestArchivesConfig, from_mapping
from fedtopic_pipelines.core.ingest.archives import archive_corpus, partition_archive_corpus
from fedtopic_pipelines.core.ingest.partition import report_partition
from fedtopic_pipelines.core.text.corpus import partition_corpus
from fedtopic_pipelines.pipelines.naming import ingestion_result


def read_archives(folder: Path, organisations: list[str], params: dict[str, Any]) -> dict[str, Any]:
    """Each source's documents (archives fetched into ``folder`` if absent), split per organisation:
    by each source's ``organisation``, or drawn by label skew with ``partition``."""
    config = from_mapping(IngestArchivesConfig, params, "ingest_archives")
    raw, sources = archive_corpus(folder, config, organisations)
    partition = None
    if config.partition is not None:
        raw, partition = partition_archive_corpus(raw, config, organisations)
    tables, report = partition_corpus(
        raw, raw.documents["organisation"], organisations, "archives", config.max_documents, config.seed
    )
    capped = sum(s["over_max_documents"] for s in sources.values())
    if capped:
        report["dropped"]["over_source_max_documents"] = capped
    report["documents_read"] += capped
    if partition is not None:
        report_partition(report, partition)
    report["corpus"] = "archives"
    report["sources"] = sources
    return ingestion_result({org: tables[org] for org in organisations}, report)
