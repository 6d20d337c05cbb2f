"""Exact federated topic coherence: counts at the organisations, gensim's measures at the server.

gensim's coherence measures (``c_npmi``, ``c_v``, ``u_mass``, ``c_uci``) read a reference
corpus only through three counts: the number of contexts (documents, or sliding windows),
how many contexts each word occurs in, and how many contexts each pair of words of a
topic co-occurs in. These counts add up over disjoint corpora, so the coherence on the
*virtual pooled corpus* (every organisation's texts concatenated) is computed exactly from
per-organisation counts, without any text leaving an organisation:

1. the server lists the candidate words (the top words of every topic of every model) and
   the pairs of candidates that share a topic (:class:`CoherenceCandidates`);
2. each organisation counts, for these words and pairs only, one pass per context kind
   (:func:`count_cooccurrences`, a :class:`CooccurrenceCounts` per kind);
3. the server sums the counts (:func:`sum_counts`) and runs gensim's own segmentation,
   confirmation and aggregation on them (:func:`coherence_by_model`).

Sliding windows follow gensim's ``WordOccurrenceAccumulator`` exactly, including how it
updates a window's word set as the window slides (a word leaves the set when one of its
occurrences leaves the window, even if it occurs again inside; it comes back when a later
occurrence enters), so that the result equals ``CoherenceModel`` on the concatenated texts
(tests/core/metrics/test_coherence.py).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from gensim.models.coherencemodel import COHERENCE_MEASURES, SLIDING_WINDOW_SIZES
from gensim.topic_coherence.text_analysis import BaseAnalyzer

logger = logging.getLogger(__name__)

DOCUMENT = "boolean_document"
_CHUNK_ENTRIES = 4_000_000
Progress = Callable[[Sequence[np.ndarray], str], Iterable[np.ndarray]]


class CoherenceError(ValueError):
    """Counts that cannot be combined or do not match the candidates they claim to count."""


def context_of(measure: str) -> str:
    """The context kind gensim uses for ``measure``: whole documents, or sliding windows of its default size."""
    if measure not in COHERENCE_MEASURES or measure == "c_w2v":
        raise CoherenceError(f"unsupported coherence measure {measure!r}")
    size = SLIDING_WINDOW_SIZES.get(measure)
    return DOCUMENT if size is None else f"sliding_window_{size}"


def _window_size(context: str) -> int | None:
    if context == DOCUMENT:
        return None
    prefix = "sliding_window_"
    if not context.startswith(prefix) or not context[len(prefix) :].isdigit() or int(context[len(prefix) :]) < 1:
        raise CoherenceError(f"unknown co-occurrence context {context!r}")
    return int(context[len(prefix) :])


@dataclass(frozen=True)
class CoherenceCandidates:
    """Words an organisation counts, and the pairs of them (indices, i < j) that share a topic.

    Only within-topic pairs are needed: every gensim measure compares a topic's words with
    each other (C_V's context vectors too), never with another topic's words.
    """

    words: tuple[str, ...]
    pairs: np.ndarray  # (n_pairs, 2) int64, rows sorted, i < j

    @classmethod
    def from_topics(cls, topics: Iterable[Sequence[str]]) -> CoherenceCandidates:
        topics = [list(t) for t in topics]
        words = tuple(sorted({w for t in topics for w in t}))
        index = {w: i for i, w in enumerate(words)}
        pairs: set[tuple[int, int]] = set()
        for topic in topics:
            ids = sorted({index[w] for w in topic})
            pairs.update((a, b) for n, a in enumerate(ids) for b in ids[n + 1 :])
        array = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)
        return cls(words, array)

    def to_dict(self) -> dict[str, Any]:
        return {"words": list(self.words), "pairs": self.pairs.tolist()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CoherenceCandidates:
        words = tuple(str(w) for w in data["words"])
        pairs = np.asarray(data["pairs"], dtype=np.int64).reshape(-1, 2)
        if len(set(words)) != len(words):
            raise CoherenceError("coherence candidates: duplicate words")
        if len(pairs) and (pairs.min() < 0 or pairs.max() >= len(words) or np.any(pairs[:, 0] >= pairs[:, 1])):
            raise CoherenceError("coherence candidates: pairs must be word indices i < j")
        return cls(words, pairs)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, CoherenceCandidates)
            and self.words == other.words
            and np.array_equal(self.pairs, other.pairs)
        )

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class CooccurrenceCounts:
    """What one context kind of one corpus contributes: number of contexts, per-word and per-pair context counts."""

    n_contexts: int
    occurrences: np.ndarray  # (n_words,) int64, aligned with CoherenceCandidates.words
    co_occurrences: np.ndarray  # (n_pairs,) int64, aligned with CoherenceCandidates.pairs

    def __add__(self, other: CooccurrenceCounts) -> CooccurrenceCounts:
        if self.occurrences.shape != other.occurrences.shape or self.co_occurrences.shape != other.co_occurrences.shape:
            raise CoherenceError("co-occurrence counts of different candidate lists cannot be summed")
        return CooccurrenceCounts(
            self.n_contexts + other.n_contexts,
            self.occurrences + other.occurrences,
            self.co_occurrences + other.co_occurrences,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_contexts": int(self.n_contexts),
            "occurrences": self.occurrences.tolist(),
            "co_occurrences": self.co_occurrences.tolist(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CooccurrenceCounts:
        counts = cls(
            int(data["n_contexts"]),
            np.asarray(data["occurrences"], dtype=np.int64),
            np.asarray(data["co_occurrences"], dtype=np.int64),
        )
        if counts.n_contexts < 0 or (counts.occurrences < 0).any() or (counts.co_occurrences < 0).any():
            raise CoherenceError("co-occurrence counts must be non-negative")
        if (counts.occurrences > counts.n_contexts).any():
            raise CoherenceError("a word occurs in more contexts than there are")
        return counts


def counts_to_dict(counts: Mapping[str, CooccurrenceCounts]) -> dict[str, dict[str, Any]]:
    """JSON-ready form of one organisation's counts, context kind -> counts."""
    return {context: c.to_dict() for context, c in counts.items()}


def counts_from_dict(
    data: Mapping[str, Mapping[str, Any]], candidates: CoherenceCandidates
) -> dict[str, CooccurrenceCounts]:
    """Read counts back, checking they are aligned with ``candidates``."""
    out = {}
    for context, raw in data.items():
        _window_size(context)
        counts = CooccurrenceCounts.from_dict(raw)
        if len(counts.occurrences) != len(candidates.words) or len(counts.co_occurrences) != len(candidates.pairs):
            raise CoherenceError(
                f"{context} counts cover {len(counts.occurrences)} words and {len(counts.co_occurrences)} pairs, "
                f"the candidates {len(candidates.words)} and {len(candidates.pairs)}"
            )
        out[context] = counts
    return out


def sum_counts(per_organisation: Iterable[Mapping[str, CooccurrenceCounts]]) -> dict[str, CooccurrenceCounts]:
    """Counts of the virtual pooled corpus: the sum over organisations, per context kind."""
    total: dict[str, CooccurrenceCounts] = {}
    for counts in per_organisation:
        if total and set(counts) != set(total):
            raise CoherenceError(f"organisations counted different contexts: {sorted(counts)} vs {sorted(total)}")
        for context, c in counts.items():
            total[context] = total[context] + c if context in total else c
    return total


# Counting at an organisation ----------------------------------------------------------------
def _encode(texts: Sequence[Sequence[str]], index: Mapping[str, int]) -> list[np.ndarray]:
    """Each text as candidate indices, -1 for every other token (positions are kept: windows need them)."""
    return [np.fromiter((index.get(w, -1) for w in text), dtype=np.int64, count=len(text)) for text in texts]


def _presence_rows(encoded: Sequence[np.ndarray], n_words: int) -> sp.csr_matrix:
    """Binary (text x candidate) matrix: which candidates occur in each text."""
    rows = [np.unique(ids[ids >= 0]) for ids in encoded]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in rows])])
    indices = np.concatenate(rows) if rows else np.array([], dtype=np.int64)
    data = np.ones(len(indices), dtype=np.int64)
    return sp.csr_matrix((data, indices, indptr), shape=(len(encoded), n_words))


def _gensim_window_sets(ids: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Candidate words of each sliding window of one text longer than ``window``, as gensim sees them.

    gensim's accumulator starts from the first window's word set and, at each slide, drops
    the token that left and adds the token that entered (in that order). So a word is in
    window k's set iff its latest event at or before step k is an entry: an occurrence at
    position q enters at step max(0, q - window + 1) and leaves at step q + 1. Events are
    ranked 2 * step (+1 for an entry); the running maximum over steps gives the latest.
    Returns the candidate indices present in the text and a (windows x those) boolean matrix.
    """
    n_windows = len(ids) - window + 1
    positions = np.flatnonzero(ids >= 0)
    words, column = np.unique(ids[positions], return_inverse=True)
    latest = np.full((n_windows, len(words)), -2, dtype=np.int64)
    leave = positions + 1
    inside = leave < n_windows
    latest[leave[inside], column[inside]] = 2 * leave[inside]
    # Entries after leaves: an entry outranks a leave at the same step; repeated cells (step 0) share one value.
    enter = np.maximum(positions - window + 1, 0)
    latest[enter, column] = 2 * enter + 1
    np.maximum.accumulate(latest, axis=0, out=latest)
    return words, (latest & 1).astype(bool)


def _gather(matrix: sp.csr_matrix, pairs: np.ndarray) -> np.ndarray:
    if not len(pairs):
        return np.zeros(0, dtype=np.int64)
    return np.asarray(matrix[pairs[:, 0], pairs[:, 1]], dtype=np.int64).ravel()


def _count_context(
    encoded: Sequence[np.ndarray], candidates: CoherenceCandidates, window: int | None, progress: Progress
) -> CooccurrenceCounts:
    n_words = len(candidates.words)
    # A text no longer than the window is one window holding all its words (gensim: ignore_below_size=False);
    # for documents (u_mass) every text is one context. Both are rows of one presence matrix.
    short = [ids for ids in encoded if window is None or len(ids) <= window]
    long_texts = [] if window is None else [ids for ids in encoded if len(ids) > window]
    blocks = [_presence_rows(short, n_words)]
    n_contexts = len(short)
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    n_rows = n_entries = 0
    for ids in progress(long_texts, f"windows of {window}"):
        n_windows = len(ids) - window + 1
        words, present = _gensim_window_sets(ids, window)
        r, c = np.nonzero(present)
        rows.append(r + n_rows)
        cols.append(words[c])
        n_rows += n_windows
        n_contexts += n_windows
        n_entries += len(r)
        if n_entries > _CHUNK_ENTRIES:  # bound memory: one sparse block per few million entries
            blocks.append(_sparse_rows(rows, cols, n_rows, n_words))
            rows, cols, n_rows, n_entries = [], [], 0, 0
    if rows:
        blocks.append(_sparse_rows(rows, cols, n_rows, n_words))
    occurrences = np.zeros(n_words, dtype=np.int64)
    co_occurrences = np.zeros(len(candidates.pairs), dtype=np.int64)
    for block in blocks:  # window x candidate 0/1 matrices: co-occurrences are one sparse product each
        occurrences += np.asarray(block.sum(axis=0), dtype=np.int64).ravel()
        co_occurrences += _gather((block.T @ block).tocsr(), candidates.pairs)
    return CooccurrenceCounts(n_contexts, occurrences, co_occurrences)


def _sparse_rows(rows: list[np.ndarray], cols: list[np.ndarray], n_rows: int, n_words: int) -> sp.csr_matrix:
    r, c = np.concatenate(rows), np.concatenate(cols)
    return sp.csr_matrix((np.ones(len(r), dtype=np.int64), (r, c)), shape=(n_rows, n_words))


def count_cooccurrences(
    texts: Sequence[Sequence[str]],
    candidates: CoherenceCandidates,
    contexts: Iterable[str],
    progress: Progress | None = None,
) -> dict[str, CooccurrenceCounts]:
    """One organisation's counts of the candidate words and pairs, one pass per context kind.

    ``progress(iterable, description)`` wraps the loop over texts longer than a window (e.g.
    tqdm); tokens that are not candidates are never counted, so only these counts leave.
    """
    index = {w: i for i, w in enumerate(candidates.words)}
    encoded = _encode(texts, index)
    wrap = progress or (lambda items, _description: items)
    return {context: _count_context(encoded, candidates, _window_size(context), wrap) for context in contexts}


# Coherence at the server -------------------------------------------------------------------
class _CountsAccumulator(BaseAnalyzer):
    """A gensim accumulator answering from summed counts (word ids are candidate indices)."""

    def __init__(self, counts: CooccurrenceCounts, candidates: CoherenceCandidates) -> None:
        super().__init__(range(len(candidates.words)))
        self._num_docs = int(counts.n_contexts)
        self._occurrences = counts.occurrences
        self._pairs = {
            (int(a), int(b)): int(c) for (a, b), c in zip(candidates.pairs, counts.co_occurrences, strict=True)
        }

    def _get_occurrences(self, word_id: int) -> int:
        return int(self._occurrences[word_id])

    def _get_co_occurrences(self, word_id1: int, word_id2: int) -> int:
        if word_id1 == word_id2:
            return int(self._occurrences[word_id1])
        key = (min(word_id1, word_id2), max(word_id1, word_id2))
        if key not in self._pairs:
            raise CoherenceError(f"pair {key} was not counted: topics and candidates disagree")
        return self._pairs[key]


@dataclass(frozen=True)
class CoherenceResult:
    """Coherence of one model's topics: per topic (NaN where undefined), the mean over defined topics,
    how many were undefined, and the share of top words the reference corpus contains."""

    per_topic: tuple[float, ...]
    mean: float | None
    undefined_topics: int
    coverage: float


def _gensim_kwargs(measure: str, topics: list[np.ndarray]) -> dict[str, Any]:
    """The arguments ``CoherenceModel.get_coherence_per_topic`` passes to the confirmation measure."""
    if measure == "u_mass":
        return {}
    if measure == "c_v":
        return {"topics": topics, "measure": "nlr", "gamma": 1}
    return {"normalize": measure == "c_npmi"}


def coherence_by_model(
    topics_by_model: Mapping[str, Sequence[Sequence[str]]],
    candidates: CoherenceCandidates,
    counts: Mapping[str, CooccurrenceCounts],
    measure: str,
) -> dict[str, CoherenceResult]:
    """Coherence of every model's topics from counts (one organisation's, or the pooled sum).

    A topic with a word that never occurs in the reference corpus is undefined in gensim
    (infinite NPMI, NaN C_V): it is left out of the mean and counted.
    """
    context = context_of(measure)
    if context not in counts:
        raise CoherenceError(f"{measure} needs {context} counts, got {sorted(counts)}")
    pipeline = COHERENCE_MEASURES[measure]
    accumulator = _CountsAccumulator(counts[context], candidates)
    index = {w: i for i, w in enumerate(candidates.words)}
    seen = counts[context].occurrences > 0
    out: dict[str, CoherenceResult] = {}
    for name, topics in topics_by_model.items():
        missing = [w for t in topics for w in t if w not in index]
        if missing:
            raise CoherenceError(f"{name}: topic words {missing[:5]} are not among the coherence candidates")
        ids = [np.array([index[w] for w in t], dtype=np.int64) for t in topics]
        defined = [i for i, t in enumerate(ids) if len(t) and seen[t].all()]
        values = np.full(len(ids), np.nan)
        if defined:
            kept = [ids[i] for i in defined]
            segmented = pipeline.seg(kept)
            values[defined] = pipeline.conf(segmented, accumulator, **_gensim_kwargs(measure, kept))
        finite = values[np.isfinite(values)]
        coverage = float(np.mean([seen[t].mean() for t in ids])) if ids else math.nan
        out[name] = CoherenceResult(
            per_topic=tuple(float(v) for v in values),
            mean=float(pipeline.aggr(list(finite))) if len(finite) else None,
            undefined_topics=int(len(ids) - len(finite)),
            coverage=coverage,
        )
        if out[name].undefined_topics:  # DEBUG: an organisation's texts often lack a topic's word; metrics.json counts
            # them (<measure>_undefined_topics), and an undefined pooled value earns its own WARNING with advice
            logger.debug(
                "%s: %d of %d topics have no %s coherence", name, out[name].undefined_topics, len(ids), measure
            )
    return out
