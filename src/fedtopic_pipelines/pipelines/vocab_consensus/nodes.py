"""Nodes of ``vocab_consensus``."""

from __future__ import annotations

from typing import Any

import pandas as pd

from fedtopic_pipelines.core.config import ConsensusConfig, from_mapping
from fedtopic_pipelines.core.vocab.consensus import BowCorpus, build_vocabulary, vectorize


def merge_vocabulary(params: dict[str, Any], **term_counts: dict[str, int]) -> pd.DataFrame:
    """Server: merge the organisations' top-N proposals (keyword arguments, one per organisation)."""
    config = from_mapping(ConsensusConfig, params, "vocab_consensus")
    return build_vocabulary(term_counts, config)


def vectorize_documents(tokens: pd.DataFrame, vocabulary: pd.DataFrame) -> BowCorpus:
    """Client: its documents as a sparse bag-of-words matrix over the common vocabulary."""
    return vectorize(
        [t.split() for t in tokens["tokens"]],
        vocabulary["term"].tolist(),
        tokens["doc_id"].to_numpy(),
        tokens["label"].to_numpy(),
        tokens["split"].to_numpy(),
    )
