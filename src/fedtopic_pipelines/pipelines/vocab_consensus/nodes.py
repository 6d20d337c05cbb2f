"""Nodes of ``vocab_consensus``."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from fedtopic_pipelines.core.config import ConsensusConfig, from_mapping
from fedtopic_pipelines.core.vocab.consensus import BowCorpus, build_vocabulary, vectorize

logger = logging.getLogger(__name__)


def merge_vocabulary(params: dict[str, Any], **term_counts: dict[str, int]) -> pd.DataFrame:
    """Server: merge the organisations' top-N proposals (keyword arguments, one per organisation)."""
    config = from_mapping(ConsensusConfig, params, "vocab_consensus")
    return build_vocabulary(term_counts, config)


def vectorize_documents(tokens: pd.DataFrame, vocabulary: pd.DataFrame) -> tuple[BowCorpus, dict[str, Any]]:
    """Client: its documents as a sparse bag-of-words matrix over the common vocabulary.

    Documents left without any term of the common vocabulary (likely with ``intersection``)
    are dropped and counted per split in the report.
    """
    bow = vectorize(
        [t.split() for t in tokens["tokens"]],
        vocabulary["term"].tolist(),
        tokens["doc_id"].to_numpy(),
        tokens["label"].to_numpy(),
        tokens["split"].to_numpy(),
    )
    bow, dropped = bow.without_empty_documents()
    org = str(tokens["organisation"].iloc[0]) if len(tokens) else "?"
    if dropped:
        logger.warning("organisation %s: dropped %s documents with no term of the common vocabulary", org, dropped)
    kept = {s: int((bow.split == s).sum()) for s in ("train", "test")}
    return bow, {"organisation": org, "documents": kept, "dropped_no_vocabulary_term": dropped}
