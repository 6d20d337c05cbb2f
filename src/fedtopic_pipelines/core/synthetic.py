"""LDA-generated organisations with shared and private topics (gFedNTM sec. 4.1.1).

K topics over V artificial terms (``term0`` ... ``term{V-1}``) are drawn from Dir(eta).
The first K' topics are shared by every organisation; the remaining K - K' are split
into L blocks of (K - K') / L private topics, one block per organisation. A document of
organisation l draws its topic mixture theta from a Dirichlet over l's active topics
(shared + its private block), a length uniform in [min, max], its topic counts from
Multinomial(length, theta) and, for each topic, that many words from beta_k.

Everything is vectorised: one multinomial call for the topic counts of all documents,
then one inverse-CDF lookup per topic for all the words that topic emits. No loop runs
over documents or words.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from fedtopic_pipelines.core.config import SyntheticGeneratorConfig

logger = logging.getLogger(__name__)


@dataclass
class SyntheticOrganisation:
    """One organisation's generated documents and their ground truth."""

    name: str
    active_topics: np.ndarray  # indices into the K topics: shared then private
    private_topics: np.ndarray
    train: sp.csr_matrix  # n_train x V term counts
    validation: sp.csr_matrix  # n_val x V term counts
    theta_train: np.ndarray  # n_train x K true mixtures (zero outside active topics unless inactive_alpha > 0)
    theta_validation: np.ndarray


@dataclass
class SyntheticCorpus:
    """The ground-truth model and every organisation's documents."""

    config: SyntheticGeneratorConfig
    vocabulary: list[str]
    beta: np.ndarray  # K x V true topic-word distributions
    organisations: dict[str, SyntheticOrganisation]


def organisation_names(n: int) -> list[str]:
    """``org1`` ... ``orgL``: the synthetic organisations' names."""
    return [f"org{i + 1}" for i in range(n)]


def sample_documents(
    rng: np.random.Generator, theta: np.ndarray, lengths: np.ndarray, cdf: np.ndarray
) -> sp.csr_matrix:
    """Term counts of documents with mixtures ``theta`` and ``lengths`` words (LDA sampling).

    ``cdf`` holds each topic's cumulative word distribution (K x V).
    """
    n_docs, k = theta.shape
    topic_counts = rng.multinomial(lengths, theta)  # n_docs x K, rows sum to lengths
    docs, words = [], []
    for topic in range(k):  # K inverse-CDF lookups; each covers every word the topic emits
        per_doc = topic_counts[:, topic]
        total = int(per_doc.sum())
        if total == 0:
            continue
        docs.append(np.repeat(np.arange(n_docs), per_doc))
        drawn = np.searchsorted(cdf[topic], rng.random(total), side="right")
        words.append(np.minimum(drawn, cdf.shape[1] - 1))  # guard against a cdf ending below 1.0
    rows = np.concatenate(docs) if docs else np.zeros(0, dtype=np.int64)
    cols = np.concatenate(words) if words else np.zeros(0, dtype=np.int64)
    matrix = sp.csr_matrix(
        (np.ones(rows.size, dtype=np.float32), (rows, cols)), shape=(n_docs, cdf.shape[1]), dtype=np.float32
    )
    matrix.sum_duplicates()
    return matrix


def document_prior(config: SyntheticGeneratorConfig, active: np.ndarray) -> np.ndarray:
    """The Dirichlet parameter of one organisation's documents over all K topics.

    ``alpha`` on the active topics; ``alpha * inactive_ratio`` elsewhere (0 means the
    organisation's documents never use another organisation's private topics).
    """
    prior = np.full(config.n_topics, config.document_prior * config.inactive_ratio)
    prior[active] = config.document_prior
    return prior


def _sample_theta(rng: np.random.Generator, prior: np.ndarray, n: int) -> np.ndarray:
    support = prior > 0
    theta = np.zeros((n, prior.size))
    theta[:, support] = rng.dirichlet(prior[support], size=n)
    return theta


def generate(config: SyntheticGeneratorConfig) -> SyntheticCorpus:
    """Draw the true topics and every organisation's training and validation documents.

    Independent random streams (``SeedSequence(seed).spawn``) for the topics and for each
    organisation, so one organisation's documents do not depend on how many others exist.
    """
    root = np.random.SeedSequence(config.seed)
    topic_seq, *org_seqs = root.spawn(1 + config.n_organisations)
    beta = np.random.default_rng(topic_seq).dirichlet(np.full(config.vocab_size, config.eta), size=config.n_topics)
    cdf = np.cumsum(beta, axis=1)
    n_private = config.n_private
    shared = np.arange(config.n_shared)
    organisations: dict[str, SyntheticOrganisation] = {}
    for index, (name, seq) in enumerate(zip(organisation_names(config.n_organisations), org_seqs, strict=True)):
        rng = np.random.default_rng(seq)
        private = np.arange(config.n_shared + index * n_private, config.n_shared + (index + 1) * n_private)
        active = np.concatenate([shared, private])
        n = config.n_train + config.n_validation
        theta = _sample_theta(rng, document_prior(config, active), n)
        lo, hi = config.doc_length
        lengths = rng.integers(lo, hi + 1, size=n)
        counts = sample_documents(rng, theta, lengths, cdf)
        organisations[name] = SyntheticOrganisation(
            name=name,
            active_topics=active,
            private_topics=private,
            train=counts[: config.n_train],
            validation=counts[config.n_train :],
            theta_train=theta[: config.n_train],
            theta_validation=theta[config.n_train :],
        )
    logger.info(
        "generated %d organisations x (%d train + %d validation) documents, V=%d, K=%d (K'=%d shared), eta=%g",
        config.n_organisations,
        config.n_train,
        config.n_validation,
        config.vocab_size,
        config.n_topics,
        config.n_shared,
        config.eta,
    )
    vocabulary = [f"term{i}" for i in range(config.vocab_size)]
    return SyntheticCorpus(config, vocabulary, beta, organisations)
