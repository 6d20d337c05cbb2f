"""PC-TD (seed 002): topic discovery over semantic units by federated EM with Gaussian noise.

The generative model: a document d picks, for each of its semantic units s (consecutive
words that share one topic), a topic z ~ p(z|d), and every word of the unit from p(w|z).
EM (eq. 3-11): a party's E-step computes each unit's topic posterior r (eq. 5) from word
counts perturbed with N(0, sigma^2) noise (eq. 4, sensitivity 1), updates its documents'
p(z|d) (eq. 7), which never leave it, and sends M_t(w, z) = sum N^_jw r^_jk (eq. 10); the
server sums the parties' M_t and normalises them into p(w|z) (eq. 11), then pulls p(w|z)
toward words similar by embeddings (eq. 13, ``semantic_consistency``).

The noise. Eq. 4 perturbs every entry of the unit-by-vocabulary count matrix, the absent
words' zeros included (an adjacent dataset may hold a word where this one has none): that is
units x V Gaussian draws per iteration, about 7 billion on the demo corpus. The noise reaches the
released M_t only through two products, E = Omega L (L = log p(w|z), V x K: the noise in each
unit's log-likelihood) and Omega^T r. ``noise="projected"`` draws exactly that pair's joint
distribution in O((units + V) K^2): E's rows from N(0, sigma^2 L^T L), then Omega's
component along L's columns from E (its conditional mean, L G^+ E^T per unit) and the component
orthogonal to them, independent of E, as sigma P Y B^T with Y standard normal (V x K),
P the projector off L's columns and B B^T = r^T r. ``noise="per_entry"`` draws Omega itself,
as the paper writes it; tests check that both give the same distribution and that the
decomposition is an identity. Either way each iteration is one Gaussian mechanism of noise
multiplier sigma on the count matrix: the released M_t is computed from N^ and public or
local values only (post-processing).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from fedtopic_pipelines.core.config import ConfigError
from fedtopic_pipelines.core.config.pctd import NO_VECTORS
from fedtopic_pipelines.core.text.word_vectors import WordVectorsError, load_word_vectors

logger = logging.getLogger(__name__)

MIN_PROBABILITY = 1e-10  # floor of p(w|z) after clipping: log p must stay finite (eq. 5's exponent)
NOISE_MODES = ("projected", "per_entry")


@dataclass(frozen=True)
class SemanticUnits:
    """A party's documents cut into semantic units: ``counts`` (units x V) holds N_jw, the count
    of word w in unit j, and ``doc_of_unit`` the document each unit belongs to."""

    counts: sp.csr_matrix
    doc_of_unit: np.ndarray
    n_docs: int

    @classmethod
    def from_token_ids(cls, docs: Sequence[Sequence[int]], vocab_size: int, unit_length: int = 3) -> SemanticUnits:
        """Each document's word ids cut into consecutive units of ``unit_length`` (its last
        unit may be shorter); a document with no word has no unit (its p(z|d) stays uniform)."""
        if unit_length < 1:
            raise ValueError(f"parameter 'unit_length' is {unit_length}; a semantic unit holds at least one word")
        rows: list[int] = []
        cols: list[int] = []
        owner: list[int] = []
        unit = 0
        for d, doc in enumerate(docs):
            ids = np.asarray(doc, dtype=np.int64)
            if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
                raise ValueError(f"document {d} has a word id outside the vocabulary of {vocab_size}")
            for start in range(0, ids.size, unit_length):
                chunk = ids[start : start + unit_length]
                rows.extend([unit] * chunk.size)
                cols.extend(chunk.tolist())
                owner.append(d)
                unit += 1
        counts = sp.csr_matrix(
            (np.ones(len(rows)), (np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64))),
            shape=(unit, vocab_size),
        )
        counts.sum_duplicates()
        return cls(counts, np.asarray(owner, dtype=np.int64), len(docs))

    @classmethod
    def from_sequences(
        cls, tokens: np.ndarray, offsets: np.ndarray, vocab_size: int, unit_length: int = 3
    ) -> SemanticUnits:
        """:meth:`from_token_ids` for documents stored end to end (document d is
        ``tokens[offsets[d]:offsets[d + 1]]``), without a Python loop over units."""
        if unit_length < 1:
            raise ValueError(f"parameter 'unit_length' is {unit_length}; a semantic unit holds at least one word")
        tokens = np.asarray(tokens, dtype=np.int64)
        offsets = np.asarray(offsets, dtype=np.int64)
        if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
            raise ValueError(f"a word id lies outside the vocabulary of {vocab_size}")
        lengths = np.diff(offsets)
        per_doc = -(-lengths // unit_length)  # ceil: a document's units
        first_unit = np.concatenate([[0], np.cumsum(per_doc)])
        doc_of_token = np.repeat(np.arange(len(lengths)), lengths)
        position = np.arange(tokens.size) - offsets[:-1][doc_of_token]
        unit_of_token = first_unit[:-1][doc_of_token] + position // unit_length
        n_units = int(first_unit[-1])
        counts = sp.csr_matrix((np.ones(tokens.size), (unit_of_token, tokens)), shape=(n_units, vocab_size))
        counts.sum_duplicates()
        return cls(counts, np.repeat(np.arange(len(lengths)), per_doc), len(lengths))

    @classmethod
    def from_tokens(
        cls, docs: Sequence[Sequence[str]], vocabulary: Mapping[str, int] | Sequence[str], unit_length: int = 3
    ) -> SemanticUnits:
        """Units over the words of ``vocabulary`` (others are dropped before cutting, as the
        paper cuts sentences after removing stop words)."""
        index = vocabulary if isinstance(vocabulary, Mapping) else {w: i for i, w in enumerate(vocabulary)}
        ids = [[index[t] for t in doc if t in index] for doc in docs]
        return cls.from_token_ids(ids, len(index), unit_length)

    @property
    def n_units(self) -> int:
        return self.counts.shape[0]

    @property
    def vocab_size(self) -> int:
        return self.counts.shape[1]

    def document_counts(self) -> sp.csr_matrix:
        """The documents' bag of words (D x V): the units of each document summed."""
        owner = sp.csr_matrix(
            (np.ones(self.n_units), (self.doc_of_unit, np.arange(self.n_units))), shape=(self.n_docs, self.n_units)
        )
        return (owner @ self.counts).tocsr()


@dataclass(frozen=True)
class EStep:
    """One party's E-step: ``statistics`` M_t (K x V, eq. 10, noisy when sigma > 0), its
    documents' new ``doc_topic`` p(z|d) (D x K, eq. 7; it stays with the party), and the
    units' noise-free log-likelihood under the model it started from (for monitoring)."""

    statistics: np.ndarray
    doc_topic: np.ndarray
    log_likelihood: float


def random_distributions(rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """``rows`` random distributions over ``cols`` outcomes (Algorithm 1, line 2), each row
    uniform(0.5, 1.5) weights normalised: random, and far from a vertex."""
    weights = rng.uniform(0.5, 1.5, size=(rows, cols))
    return weights / weights.sum(axis=1, keepdims=True)


def _log_softmax_rows(logits: np.ndarray) -> np.ndarray:
    top = logits.max(axis=1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))


def _psd_factor(gram: np.ndarray) -> np.ndarray:
    """A with A A^T = gram (symmetric positive semi-definite), by eigendecomposition: the
    Cholesky factor fails on the singular Gram matrices of an all-zero r column."""
    values, vectors = np.linalg.eigh((gram + gram.T) / 2)
    return vectors * np.sqrt(np.clip(values, 0.0, None))


def e_step(
    units: SemanticUnits,
    topic_word: np.ndarray,
    doc_topic: np.ndarray,
    sigma: float,
    rng: np.random.Generator,
    noise: str = "projected",
) -> EStep:
    """Eq. 4-5, 7 and 10 on one party's units: the noisy posterior r^ of every unit, the
    documents' p(z|d) from it, and M_t = sum_j N^_j r^_j^T (K x V)."""
    if sigma < 0:
        raise ValueError(f"parameter 'sigma' is {sigma}; the noise's standard deviation must be >= 0")
    if noise not in NOISE_MODES:
        raise ValueError(f"parameter 'noise' is {noise!r}; expected one of {list(NOISE_MODES)}")
    k, v = topic_word.shape
    if v != units.vocab_size or doc_topic.shape != (units.n_docs, k):
        raise ValueError(
            f"shapes disagree: p(w|z) {topic_word.shape}, p(z|d) {doc_topic.shape}, "
            f"{units.n_docs} documents over {units.vocab_size} words"
        )
    log_phi = np.log(np.maximum(topic_word, MIN_PROBABILITY)).T  # L: V x K
    exact = np.asarray(units.counts @ log_phi)  # sum_w N_jw log p(w|z_k): units x K
    joint = np.log(np.maximum(doc_topic, MIN_PROBABILITY))[units.doc_of_unit] + exact  # log p(z|d) p(s|z)
    log_likelihood = float(np.logaddexp.reduce(joint, axis=1).sum()) if units.n_units else 0.0
    omega = None
    if sigma == 0 or units.n_units == 0:
        log_r = _log_softmax_rows(joint)
    elif noise == "per_entry":
        omega = rng.normal(0.0, sigma, size=(units.n_units, v))
        log_r = _log_softmax_rows(joint + omega @ log_phi)
    else:
        gram = log_phi.T @ log_phi
        shock = rng.standard_normal((units.n_units, k)) @ _psd_factor(gram).T * sigma  # E = Omega L
        log_r = _log_softmax_rows(joint + shock)
    r = np.exp(log_r)
    statistics = np.asarray(units.counts.T @ r).T  # K x V, the noise-free part of eq. 10
    if omega is not None:
        statistics += (omega.T @ r).T
    elif sigma > 0 and units.n_units:
        pinv = np.linalg.pinv(gram)
        along = log_phi @ (pinv @ (shock.T @ r))  # Omega's component along L's columns, given E
        y = rng.standard_normal((v, k))
        orthogonal = sigma * (y - log_phi @ (pinv @ (log_phi.T @ y))) @ _psd_factor(r.T @ r).T
        statistics += (along + orthogonal).T
    new_theta = np.full((units.n_docs, k), 1.0 / k)
    sums = np.zeros((units.n_docs, k))
    np.add.at(sums, units.doc_of_unit, r)
    has_units = np.bincount(units.doc_of_unit, minlength=units.n_docs) > 0
    new_theta[has_units] = sums[has_units] / sums[has_units].sum(axis=1, keepdims=True)
    return EStep(statistics, new_theta, log_likelihood)


@dataclass(frozen=True)
class MStep:
    """The server's eq. 11: p(w|z) from the summed statistics, with what the noise forced on
    it: ``clipped`` negative entries set to 0 and ``empty_topics`` whose column summed to 0
    (reset to uniform)."""

    topic_word: np.ndarray
    clipped: int
    empty_topics: int


def m_step(total: np.ndarray, beta: float = 0.0) -> MStep:
    """Eq. 11 on sum_t M_t (K x V). Noise can make entries negative, which no distribution
    has: they are clipped to 0, ``beta`` is added to every entry (0: eq. 11 as printed; a
    smoothing prior, docs/pctd.md) and each topic renormalised, then floored at
    ``MIN_PROBABILITY`` (eq. 5 takes logs) and renormalised; a topic with no positive mass
    left becomes uniform. The counts go to the history (docs/pctd.md)."""
    if beta < 0:
        raise ValueError(f"parameter 'beta' is {beta}; the smoothing added to the counts must be >= 0")
    if not np.isfinite(total).all():
        raise ValueError("the summed statistics have non-finite entries")
    negative = total < 0
    positive = np.where(negative, 0.0, total) + beta
    mass = positive.sum(axis=1, keepdims=True)
    empty = (mass <= 0).ravel()
    out = np.empty_like(positive)
    out[~empty] = positive[~empty] / mass[~empty]
    out[empty] = 1.0 / total.shape[1]
    out = np.maximum(out, MIN_PROBABILITY)
    out /= out.sum(axis=1, keepdims=True)
    return MStep(out, int(negative.sum()), int(empty.sum()))


def semantic_consistency(topic_word: np.ndarray, similarity: sp.spmatrix, tau: float) -> np.ndarray:
    """Eq. 13: p'(w|z) = p(w|z) + tau p(w|z) (R p(.|z))_w / (p(.|z)^T R p(.|z)), renormalised.
    ``similarity`` is the sparse, symmetric R over the vocabulary (its diagonal 1)."""
    if tau < 0:
        raise ValueError(f"parameter 'tau' is {tau}; eq. 13's trade-off must be >= 0")
    if tau == 0:
        return topic_word
    spread = np.asarray(similarity @ topic_word.T).T  # (R p_k)_w for every topic: K x V
    quadratic = (topic_word * spread).sum(axis=1, keepdims=True)
    adjusted = topic_word + tau * topic_word * spread / quadratic
    return adjusted / adjusted.sum(axis=1, keepdims=True)


def server_step(total: np.ndarray, similarity: sp.spmatrix | None, tau: float, beta: float = 0.0) -> MStep:
    """What the server does with the summed statistics each iteration: eq. 11 (``m_step``,
    smoothed by ``beta``), then eq. 13 with ``similarity`` when one is given and tau > 0."""
    step = m_step(total, beta)
    if similarity is None or tau == 0:
        return step
    return MStep(semantic_consistency(step.topic_word, similarity, tau), step.clipped, step.empty_topics)


def fold_in(units: SemanticUnits, topic_word: np.ndarray, iterations: int = 20, seed: int = 0) -> np.ndarray:
    """p(z|d) of documents the model was not trained on: noise-free E-steps with p(w|z) fixed
    (eq. 5 and 7), from random starting proportions."""
    rng = np.random.default_rng(seed)
    theta = random_distributions(units.n_docs, topic_word.shape[0], rng)
    for _ in range(iterations):
        theta = e_step(units, topic_word, theta, 0.0, rng).doc_topic
    return theta


def per_word_perplexity(bow: sp.spmatrix, topic_word: np.ndarray, doc_topic: np.ndarray) -> float:
    """The paper's perplexity: exp(- sum_d sum_{w in d} ln sum_k p(w|z_k) p(z_k|d) / tokens)."""
    bow = sp.coo_matrix(bow)
    tokens = float(bow.data.sum())
    if tokens == 0:
        return float("nan")
    probs = np.einsum("nk,nk->n", doc_topic[bow.row], topic_word[:, bow.col].T)
    return float(np.exp(-(bow.data * np.log(probs)).sum() / tokens))


def similarity_matrix(
    vocabulary: Sequence[str],
    vectors: Any,
    frequent: int = 5000,
    neighbours: int = 20,
    threshold: float = 0.5,
    chunk: int = 1024,
) -> sp.csr_matrix:
    """Eq. 12's R, sparse: for the ``frequent`` first words of ``vocabulary`` (ordered by
    frequency) that ``vectors`` knows, the cosine similarity to each of its ``neighbours``
    most similar such words above ``threshold``, made symmetric (the larger of R_ab, R_ba);
    the diagonal is 1 for every word. Memory: at most V + 2 frequent neighbours entries."""
    size = len(vocabulary)
    known = [i for i, w in enumerate(vocabulary[:frequent]) if w in vectors]
    rows: list[np.ndarray] = [np.arange(size)]
    cols: list[np.ndarray] = [np.arange(size)]
    vals: list[np.ndarray] = [np.ones(size)]
    if len(known) > 1 and neighbours > 0:
        matrix = np.stack([np.asarray(vectors[vocabulary[i]], dtype=np.float64) for i in known])
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix = matrix / np.where(norms > 0, norms, 1.0)
        ids = np.asarray(known)
        n = min(neighbours, len(known) - 1)
        for start in range(0, len(known), chunk):
            cos = matrix[start : start + chunk] @ matrix.T
            local = np.arange(cos.shape[0])
            cos[local, start + local] = -np.inf  # the diagonal is set apart
            top = np.argpartition(-cos, n - 1, axis=1)[:, :n]
            best = cos[local[:, None], top]
            keep = best > threshold
            rows.append(np.repeat(ids[start + local], n)[keep.ravel()])
            cols.append(ids[top][keep])
            vals.append(best[keep])
    r = sp.coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(size, size))
    r = r.tocsr()  # sums duplicate entries (none: the diagonal and the neighbours are apart)
    return r.maximum(r.T).tocsr()


def halves(tokens: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every document's tokens cut in two, in order: the first ceil(n / 2) (to fold in) and
    the rest (to score), as (tokens, offsets) twice; document completion's split."""
    lengths = np.diff(offsets)
    first = -(-lengths // 2)
    doc_of_token = np.repeat(np.arange(len(lengths)), lengths)
    position = np.arange(len(tokens)) - offsets[:-1][doc_of_token]
    head = position < first[doc_of_token]
    return (
        tokens[head],
        np.concatenate([[0], np.cumsum(first)]),
        tokens[~head],
        np.concatenate([[0], np.cumsum(lengths - first)]),
    )


def completion_perplexity(
    tokens: np.ndarray,
    offsets: np.ndarray,
    topic_word: np.ndarray,
    unit_length: int = 3,
    iterations: int = 20,
    seed: int = 0,
) -> tuple[float, int]:
    """Held-out per-word perplexity by document completion: each document's p(z|d) is folded
    in (:func:`fold_in`) on the first half of its words, the second half is scored (eq. 14 on
    words the fold-in never saw). Returns the perplexity and the words scored (documents of
    fewer than two words score none)."""
    vocab = topic_word.shape[1]
    head, head_offsets, tail, tail_offsets = halves(np.asarray(tokens), np.asarray(offsets))
    theta = fold_in(SemanticUnits.from_sequences(head, head_offsets, vocab, unit_length), topic_word, iterations, seed)
    scored = SemanticUnits.from_sequences(tail, tail_offsets, vocab, 1).document_counts()
    return per_word_perplexity(scored, topic_word, theta), len(tail)


VECTORS_PARAMETER = "pctd.train.model.consistency_vectors"  # PC-TD trains in the pctd pipeline only


def consistency_matrix(terms: Sequence[str], frequencies: np.ndarray | None, model: Any) -> sp.csr_matrix | None:
    """Eq. 12's R over ``terms`` from ``consistency_vectors``, the ``consistency_frequent`` most
    frequent terms (by the consensus's counts, else in vocabulary order) given neighbours;
    None with tau 0 or vectors "none"."""
    if model.tau == 0 or model.consistency_vectors == NO_VECTORS:
        return None
    try:
        vectors = load_word_vectors(model.consistency_vectors, VECTORS_PARAMETER, model.trust_pickle)
    except WordVectorsError as exc:  # a configuration problem: the message names the parameter
        raise ConfigError(str(exc)) from exc
    terms = list(terms)
    order = np.argsort(-frequencies, kind="stable") if frequencies is not None else np.arange(len(terms))
    ordered = similarity_matrix(
        [terms[i] for i in order],
        vectors,
        model.consistency_frequent,
        model.consistency_neighbours,
        model.consistency_threshold,
    )
    inverse = np.argsort(order)
    matrix = ordered[inverse][:, inverse].tocsr()
    linked = int(matrix.nnz - len(terms))
    logger.info(
        "PC-TD consistency matrix R: %d terms, %d links between them, %.1f MB",
        len(terms),
        linked,
        (matrix.data.nbytes + matrix.indices.nbytes + matrix.indptr.nbytes) / 1e6,
    )
    return matrix


class PCTDModel(nn.Module):
    """The PC-TD model as the engine holds it: ``phi`` = p(w|z) (K x V, shared, float64 as
    the counts it is normalised from) and, in a party's copy only, ``theta`` = p(z|d) of its
    documents (:meth:`attach_documents`), which never leaves it. The server's copy holds the
    similarity matrix R of eq. 13 (:meth:`set_terms`)."""

    def __init__(self, vocab_size: int, n_topics: int, seed: int, unit_length: int = 3, fold_in_iterations: int = 20):
        super().__init__()
        rng = np.random.default_rng(seed)
        phi = torch.from_numpy(random_distributions(n_topics, vocab_size, rng))
        self.phi = nn.Parameter(phi, requires_grad=False)
        self.register_parameter("theta", None)
        self.unit_length = unit_length
        self.fold_in_iterations = fold_in_iterations
        self.units: SemanticUnits | None = None
        self.similarity: sp.csr_matrix | None = None

    @property
    def n_topics(self) -> int:
        return int(self.phi.shape[0])

    def attach_documents(self, units: SemanticUnits) -> None:
        """A party's copy: its units and p(z|d) for each document, uniform at the start (so that
        every party's first E-step, and the pooled one, depends on p(w|z) alone: docs/pctd.md)."""
        self.units = units
        self.theta = nn.Parameter(
            torch.full((units.n_docs, self.n_topics), 1.0 / self.n_topics, dtype=torch.float64), requires_grad=False
        )

    def topic_word(self) -> torch.Tensor:
        return self.phi.detach()

    def doc_topic(self, data: Any) -> torch.Tensor:
        """p(z|d) of documents given as word-id sequences (``tokens``, ``offsets``), folded in."""
        units = SemanticUnits.from_sequences(data.tokens, data.offsets, self.phi.shape[1], self.unit_length)
        theta = fold_in(units, self.phi.detach().numpy(), self.fold_in_iterations)
        return torch.from_numpy(theta)

    def set_terms(self, terms: Sequence[str], frequencies: np.ndarray | None, config: Any) -> None:
        """The server's copy: eq. 12's R over the vocabulary, as ``config.model`` asks."""
        self.similarity = consistency_matrix(terms, frequencies, config.model)
