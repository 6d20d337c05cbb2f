"""Nodes of ``preprocess``: they run inside one organisation."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from fedtopic_pipelines.core.config import PreprocessConfig, from_mapping
from fedtopic_pipelines.core.federated.site import Site
from fedtopic_pipelines.core.ingest.common import ShardedTable

logger = logging.getLogger(__name__)


def clean_documents(
    raw: pd.DataFrame | ShardedTable, params: dict[str, Any]
) -> tuple[pd.DataFrame | ShardedTable, dict[str, int], dict[str, Any]]:
    """Tokenise an organisation's documents; return its tokens and term counts (both stay
    inside the organisation) and a report (which leaves it).

    Shard by shard over several processes (memory bounded by a shard). Document-frequency
    limits are computed on the training split only, so held-out documents never shape
    the vocabulary; term counts are training-split counts. Documents left without tokens
    are dropped and counted. A table in gives a table out (tests, small corpora). The same
    ``Site`` step runs on a Flower node.
    """
    config = from_mapping(PreprocessConfig, params, "preprocess")
    result = Site().preprocess(raw, config)
    tokens: pd.DataFrame | ShardedTable = result.tokens
    if isinstance(raw, pd.DataFrame):
        tokens = result.tokens.to_frame()
        result.tokens.discard()
    return tokens, result.term_counts, result.report
