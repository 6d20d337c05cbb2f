"""Nodes of ``vocab_consensus``: each organisation proposes, the server merges, each vectorises."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from fedtopic_pipelines.core.config import ConsensusConfig, from_mapping
from fedtopic_pipelines.core.federated.site import Site
from fedtopic_pipelines.core.ingest.common import ShardedTable
from fedtopic_pipelines.core.vocab.consensus import BowCorpus, agree_on_vocabulary

logger = logging.getLogger(__name__)


def propose_vocabulary(term_counts: dict[str, int], params: dict[str, Any]) -> dict[str, int]:
    """Client: its top-N terms that occur more than T times, with their counts.

    This proposal is all that leaves the organisation for the vocabulary, on both engines
    (a Flower node sends the same, from the same ``Site`` step); its full term counts stay.
    """
    config = from_mapping(ConsensusConfig, params, "vocab_consensus")
    return Site().propose(term_counts, config)


def merge_vocabulary(params: dict[str, Any], **proposals: dict[str, int]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Server: merge the organisations' proposals (keyword arguments, one per organisation),
    apply the vocabulary floors, and report what each floor removed (the same function as a
    Flower federation's vocabulary stage)."""
    config = from_mapping(ConsensusConfig, params, "vocab_consensus")
    for org, proposal in proposals.items():
        logger.info("organisation %s proposes %d terms", org, len(proposal))
    consensus = agree_on_vocabulary(proposals, config)
    logger.info("common vocabulary (%s): %d terms", config.merge, len(consensus.vocabulary))
    return consensus.vocabulary, consensus.report


def vectorize_documents(
    tokens: pd.DataFrame | ShardedTable, vocabulary: pd.DataFrame, proposal: dict[str, int]
) -> tuple[BowCorpus, dict[str, Any]]:
    """Client: its documents as a sparse bag-of-words matrix over the common vocabulary.

    Token shards are read one at a time; documents left without any term of the common
    vocabulary are dropped and counted per split in the report, with the tokens outside the
    vocabulary and those of its own proposed terms that the consensus left out.
    """
    return Site().vectorise(tokens, vocabulary["term"].tolist(), proposal)
