"""Nodes of ``ingest_wikipedia``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedtopic_pipelines.core.config import IngestWikipediaConfig, from_mapping
from fedtopic_pipelines.core.ingest.wikipedia import ingest_wikipedia
from fedtopic_pipelines.pipelines.naming import ingestion_result


def ingest_dumps(dumps: list[Path], work: Path, params: dict[str, Any]) -> dict[str, Any]:
    """Articles of the dumps, split into organisations by their categories.

    Shards are written into the resumable work folder as they are produced, so a run
    killed midway resumes at its last finished unit; the organisations' datasets then
    link to those shards.
    """
    config = from_mapping(IngestWikipediaConfig, params, "ingest_wikipedia")
    organisations = list(config.organisations)
    shards, report = ingest_wikipedia(dumps, organisations, config, work)
    return ingestion_result({org: shards[org] for org in organisations}, report)
