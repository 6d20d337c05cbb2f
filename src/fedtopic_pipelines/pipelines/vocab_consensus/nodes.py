"""Nodes of ``vocab_consensus``: each organisation offers, the server selects, each reveals (keyed),
the server publishes, each vectorises; an audit node (not a party) scores attack (d).

The exchange and its privacy (``params:privacy``: ``vocab_k``, ``vocab_min_count``,
``vocab_keyed``, ``vocab_count_noise``) are core's (``core/vocab/consensus.py``,
``core/vocab/privacy.py``, docs/vocabulary.md); these nodes only carry its messages. In
one Kedro process every party is this process, so the keyed digests show the protocol and
let the attack be measured on the server's view; they protect only across processes (Flower).
"""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from fedtopic_pipelines.core.config import ConsensusConfig, PrivacyConfig, from_mapping
from fedtopic_pipelines.core.lineage import vocabulary_fingerprint
from fedtopic_pipelines.core.shards import ShardedTable
from fedtopic_pipelines.core.site import Site
from fedtopic_pipelines.core.vocab.consensus import (
    BowCorpus,
    complete_vocabulary,
    keyed,
    propose_terms,
    select_vocabulary,
    view_of,
)
from fedtopic_pipelines.core.vocab.privacy import rare_term_attack, vocabulary_key

logger = logging.getLogger(__name__)

PROPOSAL, REVEAL = "vocabulary_proposal__", "vocabulary_reveal__"  # what crosses to the server, per organisation


def _configs(consensus: dict[str, Any], privacy: dict[str, Any]) -> tuple[ConsensusConfig, PrivacyConfig]:
    return from_mapping(ConsensusConfig, consensus, "vocab_consensus"), from_mapping(PrivacyConfig, privacy, "privacy")


def _key(privacy: PrivacyConfig) -> bytes | None:
    """The organisations' key (``FEDTOPIC_VOCAB_KEY``; in one process a public one if unset), if needed."""
    return vocabulary_key() if keyed(privacy) or privacy.vocab_count_noise > 0 else None


def propose_vocabulary(
    term_counts: dict[str, int], consensus: dict[str, Any], privacy: dict[str, Any]
) -> dict[str, int]:
    """Client: what leaves it for the vocabulary: its top-N terms that occur more than T times,
    with their counts (noised with ``privacy.vocab_count_noise``; as keyed digests with
    ``privacy.vocab_k`` > 1 and ``vocab_keyed``). Its full term counts stay; a Flower node sends
    the same, from the same ``Site`` step."""
    consensus_config, privacy_config = _configs(consensus, privacy)
    key = _key(privacy_config)
    return Site().offer(term_counts, consensus_config, privacy_config, key, key)


def request_vocabulary(consensus: dict[str, Any], privacy: dict[str, Any], **proposals: dict[str, int]) -> list[str]:
    """Server, keyed exchange: the digests that pass the privacy rule and the floors, which every
    organisation is asked to reveal (empty when the proposals are plain terms)."""
    consensus_config, privacy_config = _configs(consensus, privacy)
    return select_vocabulary(proposals, consensus_config, privacy_config).request


def reveal_vocabulary(
    term_counts: dict[str, int], request: list[str], consensus: dict[str, Any], privacy: dict[str, Any]
) -> dict[str, list[str]]:
    """Client: for each requested digest of one of its own terms, the term and its opening."""
    consensus_config, privacy_config = _configs(consensus, privacy)
    if not keyed(privacy_config):
        return {}
    return Site().reveal(term_counts, consensus_config, request, vocabulary_key())


def merge_vocabulary(
    consensus: dict[str, Any], privacy: dict[str, Any], **messages: dict[str, Any]
) -> tuple[pd.DataFrame, dict[str, Any], dict[str, Any]]:
    """Server: from the organisations' proposals (``vocabulary_proposal__<org>``) and, keyed, their
    reveals (``vocabulary_reveal__<org>``, each checked), the common vocabulary, the report (what
    each floor and ``privacy.vocab_k`` removed) and the server's view of the exchange (what
    attack (d) reads). The same functions as a Flower federation's vocabulary stage."""
    consensus_config, privacy_config = _configs(consensus, privacy)
    proposals = {k.removeprefix(PROPOSAL): v for k, v in messages.items() if k.startswith(PROPOSAL)}
    reveals = {k.removeprefix(REVEAL): v for k, v in messages.items() if k.startswith(REVEAL)}
    for org, proposal in proposals.items():
        logger.info("organisation %s proposes %d terms", org, len(proposal))
    selection = select_vocabulary(proposals, consensus_config, privacy_config)
    result = complete_vocabulary(selection, proposals, reveals)
    logger.info("common vocabulary (%s): %d terms", consensus_config.merge, len(result.vocabulary))
    # the report names the vocabulary it describes: the privacy audit reads it beside the models
    report = {**result.report, "lineage": {"vocabulary": vocabulary_fingerprint(result.vocabulary["term"].tolist())}}
    return result.vocabulary, report, view_of(selection, proposals, reveals, result)


def score_vocabulary_attack(
    report: dict[str, Any], view: dict[str, Any], consensus: dict[str, Any], **term_counts: dict[str, int]
) -> dict[str, Any]:
    """Audit (not a party: it reads every organisation's counts, the attack's ground truth): the
    consensus report with attack (d)'s score on the server's view under ``privacy.rare_term_attack``."""
    config = from_mapping(ConsensusConfig, consensus, "vocab_consensus")
    truth = {org: propose_terms(counts, config.top_n, config.min_count) for org, counts in term_counts.items()}
    attack = rare_term_attack(view, truth)
    pooled = attack["pooled"]
    logger.info(
        "attack (d) on the server's view: %d of %d rare terms guessed (precision %s, recall %s)",
        pooled["correct"],
        pooled["rare_terms"],
        pooled["precision"],
        pooled["recall"],
    )
    return {**report, "privacy": {**report["privacy"], "rare_term_attack": attack}}


def vectorize_documents(
    tokens: pd.DataFrame | ShardedTable,
    vocabulary: pd.DataFrame,
    term_counts: dict[str, int],
    consensus: dict[str, Any],
) -> tuple[BowCorpus, dict[str, Any]]:
    """Client: its documents as a sparse bag-of-words matrix over the common vocabulary.

    Token shards are read one at a time; documents left without any term of the common
    vocabulary are dropped and counted per split in the report, with the tokens outside the
    vocabulary and those of its own proposed terms (recomputed from its counts: what it sent
    may be digests) that the consensus left out.
    """
    config = from_mapping(ConsensusConfig, consensus, "vocab_consensus")
    proposal = propose_terms(term_counts, config.top_n, config.min_count)
    return Site().vectorise(tokens, vocabulary["term"].tolist(), proposal)
