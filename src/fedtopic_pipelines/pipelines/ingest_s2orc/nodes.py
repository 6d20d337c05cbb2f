"""Nodes of ``ingest_s2orc``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedtopic_pipelines.core.config import IngestS2orcConfig, from_mapping
from fedtopic_pipelines.core.ingest.s2orc import ingest_s2orc, natural_key
from fedtopic_pipelines.core.text.demo import CorpusError
from fedtopic_pipelines.pipelines.naming import ingestion_result


def ingest_records(records: list[Path], pdf_parses: list[Path], work: Path, params: dict[str, Any]) -> dict[str, Any]:
    """Papers of the shards (joined with their pdf_parses when given), split into organisations by field of study.

    The shards are read in natural name order (metadata_2 before metadata_10), whatever order
    the catalog lists them in: that order decides which copy of a duplicate paper id is kept.
    """
    config = from_mapping(IngestS2orcConfig, params, "ingest_s2orc")
    organisations = list(config.organisations)
    if not records:
        raise CorpusError(
            "no S2ORC shard found: put metadata or Semantic Scholar JSONL(.gz) files in the folder of the "
            "'s2orc_records' catalog entry (data/01_raw/s2orc/), 2020 pdf_parses files in data/01_raw/s2orc/pdf_parses/"
        )
    records = sorted(records, key=natural_key)
    shards, report = ingest_s2orc(records, organisations, config, work, pdf_parses=pdf_parses)
    return ingestion_result({org: shards[org] for org in organisations}, report)
