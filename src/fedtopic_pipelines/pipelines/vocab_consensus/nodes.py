"""Nodes of ``vocab_consensus``."""

from __future__ import annotations

from typing import Any

import pandas as pd

from fedtopic_pipelines.core.config import ConsensusConfig, from_mapping
from fedtopic_pipelines.core.ingest.common import ShardedTable, iter_frames
from fedtopic_pipelines.core.vocab.consensus import BowCorpus, build_vocabulary, vectorize_frames


def merge_vocabulary(params: dict[str, Any], **term_counts: dict[str, int]) -> pd.DataFrame:
    """Server: merge the organisations' top-N proposals (keyword arguments, one per organisation)."""
    config = from_mapping(ConsensusConfig, params, "vocab_consensus")
    return build_vocabulary(term_counts, config)


def vectorize_documents(
    tokens: pd.DataFrame | ShardedTable, vocabulary: pd.DataFrame
) -> tuple[BowCorpus, dict[str, Any]]:
    """Client: its documents as a sparse bag-of-words matrix over the common vocabulary.

    Token shards are read one at a time; documents left without any term of the common
    vocabulary are dropped and counted per split in the report (``vectorize_frames``).
    """
    return vectorize_frames(iter_frames(tokens), vocabulary["term"].tolist())
