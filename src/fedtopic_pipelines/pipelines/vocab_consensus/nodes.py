"""Nodes of ``vocab_consensus``."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from fedtopic_pipelines.core.config import ConsensusConfig, from_mapping
from fedtopic_pipelines.core.ingest.common import ShardedTable, iter_frames
from fedtopic_pipelines.core.vocab.consensus import BowCorpus, build_vocabulary, vectorize

logger = logging.getLogger(__name__)


def merge_vocabulary(params: dict[str, Any], **term_counts: dict[str, int]) -> pd.DataFrame:
    """Server: merge the organisations' top-N proposals (keyword arguments, one per organisation)."""
    config = from_mapping(ConsensusConfig, params, "vocab_consensus")
    return build_vocabulary(term_counts, config)


def vectorize_documents(
    tokens: pd.DataFrame | ShardedTable, vocabulary: pd.DataFrame
) -> tuple[BowCorpus, dict[str, Any]]:
    """Client: its documents as a sparse bag-of-words matrix over the common vocabulary.

    Token shards are read one at a time (the matrix, which training needs, is the only
    thing held whole). Documents left without any term of the common vocabulary (likely
    with ``intersection``) are dropped and counted per split in the report.
    """
    terms = vocabulary["term"].tolist()
    parts: list[BowCorpus] = []
    org = "?"
    for frame in iter_frames(tokens):
        if len(frame):
            org = str(frame["organisation"].iloc[0])
        parts.append(
            vectorize(
                [t.split() for t in frame["tokens"]],
                terms,
                frame["doc_id"].to_numpy(),
                frame["label"].to_numpy(),
                frame["split"].to_numpy(),
            )
        )
    parts = parts or [vectorize([], terms, [], [], [])]
    bow = BowCorpus(
        sp.vstack([p.matrix for p in parts], format="csr"),
        np.concatenate([p.doc_ids for p in parts]),
        np.concatenate([p.labels for p in parts]),
        np.concatenate([p.split for p in parts]),
    )
    bow, dropped = bow.without_empty_documents()
    if dropped:
        logger.warning("organisation %s: dropped %s documents with no term of the common vocabulary", org, dropped)
    kept = {s: int((bow.split == s).sum()) for s in ("train", "test")}
    return bow, {"organisation": org, "documents": kept, "dropped_no_vocabulary_term": dropped}
