"""Nodes of ``preprocess``: a check of every organisation's size, then each cleans its documents."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from fedtopic_pipelines.core.config import EvaluateConfig, PreprocessConfig, TrainConfig, from_mapping
from fedtopic_pipelines.core.shards import ShardedTable
from fedtopic_pipelines.core.site import Site
from fedtopic_pipelines.core.text.preprocess import check_organisations

logger = logging.getLogger(__name__)
PREFIX = "counts_of_"  # keyword of an organisation's counts (an organisation may be called ``train``)


def count_documents(raw: pd.DataFrame | ShardedTable) -> dict[str, int]:
    """Client: its documents per split (what the ingestion report already shows), read from the
    ``split`` column only, so the check costs no text reading."""
    frame = raw[["split"]] if isinstance(raw, pd.DataFrame) else raw.to_frame(columns=["split"])
    counts = frame["split"].value_counts()
    return {split: int(counts.get(split, 0)) for split in ("train", "test")}


def check_document_counts(
    preprocess: dict[str, Any], train: dict[str, Any], evaluate: dict[str, Any], **counts: dict[str, int]
) -> dict[str, dict[str, Any]]:
    """Server: every organisation's document counts against what preprocessing, training and
    evaluation need, before any organisation is preprocessed; an error names each organisation
    too small, its counts and the parameter to change (``check_organisations``)."""
    return check_organisations(
        {key.removeprefix(PREFIX): value for key, value in counts.items()},
        from_mapping(PreprocessConfig, preprocess, "preprocess"),
        TrainConfig.from_params(train),
        from_mapping(EvaluateConfig, evaluate, "evaluate"),
    )


def clean_documents(
    raw: pd.DataFrame | ShardedTable, params: dict[str, Any], checked: dict[str, Any]
) -> tuple[pd.DataFrame | ShardedTable, dict[str, int], dict[str, Any]]:
    """Tokenise an organisation's documents; return its tokens and term counts (both stay
    inside the organisation) and a report (which leaves it).

    Runs after the check of every organisation (``checked``, only an ordering input). Shard by
    shard over several processes (memory bounded by a shard). Document-frequency limits are
    computed on the training split only, so held-out documents never shape the vocabulary;
    ``min_df`` may be a share of the organisation's training documents. Term counts are
    training-split counts. Documents left without tokens are dropped and counted. A table in
    gives a table out (tests, small corpora). The same ``Site`` step runs on a Flower node.
    """
    config = from_mapping(PreprocessConfig, params, "preprocess")
    result = Site().preprocess(raw, config)
    tokens: pd.DataFrame | ShardedTable = result.tokens
    if isinstance(raw, pd.DataFrame):
        tokens = result.tokens.to_frame()
        result.tokens.discard()
    return tokens, result.term_counts, result.report
