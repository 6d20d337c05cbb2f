"""Topic descriptions, topic diversity and topic redundancy (duplicate topics)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def top_words(topic_word: np.ndarray, vocabulary: Sequence[str], n: int) -> list[list[str]]:
    """The ``n`` highest-weight terms of every topic (rows of a K x V matrix)."""
    order = np.argsort(-topic_word, axis=1, kind="stable")[:, :n]
    return [[vocabulary[j] for j in row] for row in order]


def topic_diversity(topics: Sequence[Sequence[str]]) -> float:
    """Share of unique words among all topics' top words (Dieng et al., 2020); 1 = no overlap."""
    words = [w for topic in topics for w in topic]
    if not words:
        raise ValueError("topic diversity needs at least one word")
    return len(set(words)) / len(words)


def rbo_ext(first: Sequence[str], second: Sequence[str], p: float) -> float:
    """Extrapolated rank-biased overlap of two rankings of equal depth k (Webber, Moffat and
    Zobel, 2010, eq. 32): (X_k / k) p^k + (1 - p) / p * sum_{d<=k} (X_d / d) p^d, where X_d is
    the number of items the two top-d prefixes share. 1 for identical rankings, 0 for disjoint."""
    if len(first) != len(second) or not first:
        raise ValueError(
            f"rank-biased overlap needs two rankings of the same depth, got {len(first)} and {len(second)}"
        )
    if not 0.0 < p < 1.0:
        raise ValueError(f"rank-biased overlap's persistence p must lie in (0, 1), got {p}")
    seen_a: set[str] = set()
    seen_b: set[str] = set()
    shared, total = 0, 0.0
    for depth, (a, b) in enumerate(zip(first, second, strict=True), start=1):
        if a == b:
            shared += 1
        else:
            shared += (a in seen_b) + (b in seen_a)
        seen_a.add(a)
        seen_b.add(b)
        total += shared / depth * p**depth
    k = len(first)
    return shared / k * p**k + (1.0 - p) / p * total


# Two topics sharing this many of their top words are a duplicate pair (``evaluate.duplicate_shared_words``)
DUPLICATE_SHARED_WORDS = 5


@dataclass(frozen=True)
class Redundancy:
    """How far a model's topics repeat each other, from their top-n word lists.

    ``largest_overlap``: the words the most similar pair of topics shares (``pair``: their
    indices; ``shared``: the words, in the first topic's order). ``duplicate_pairs``: every
    pair sharing at least the duplicate threshold, as (i, j, shared count). ``inverted_rbo``:
    1 minus the mean extrapolated rank-biased overlap over all pairs (OCTIS's InvertedRBO):
    1 = no two topics share a word, 0 = every topic the same ranking.
    """

    largest_overlap: int
    pair: tuple[int, int]
    shared: tuple[str, ...]
    duplicate_pairs: tuple[tuple[int, int, int], ...]
    inverted_rbo: float
    duplicate_at: int = DUPLICATE_SHARED_WORDS

    def as_dict(self) -> dict[str, object]:
        """The JSON form metrics.json carries."""
        return {
            "largest_topic_overlap": self.largest_overlap,
            "largest_topic_overlap_pair": {"topics": list(self.pair), "shared": list(self.shared)},
            "duplicate_topic_pairs": len(self.duplicate_pairs),
            "inverted_rbo": self.inverted_rbo,
        }


def redundancy(
    topics: Sequence[Sequence[str]], duplicate_at: int = DUPLICATE_SHARED_WORDS, p: float = 0.9
) -> Redundancy:
    """Largest pairwise top-word overlap, the pairs at or above ``duplicate_at`` shared words, and
    inverted RBO with persistence ``p`` (OCTIS's default 0.9) of equal-length topic lists."""
    if len(topics) < 2:
        raise ValueError(f"topic redundancy needs at least 2 topics, got {len(topics)}")
    best: tuple[int, tuple[int, int]] = (-1, (0, 1))
    duplicates: list[tuple[int, int, int]] = []
    rbos: list[float] = []
    for i, j in itertools.combinations(range(len(topics)), 2):
        n_shared = len(set(topics[i]) & set(topics[j]))
        if n_shared > best[0]:
            best = (n_shared, (i, j))
        if n_shared >= duplicate_at:
            duplicates.append((i, j, n_shared))
        rbos.append(rbo_ext(topics[i], topics[j], p))
    i, j = best[1]
    shared = tuple(w for w in topics[i] if w in set(topics[j]))
    return Redundancy(best[0], (i, j), shared, tuple(duplicates), 1.0 - float(np.mean(rbos)), duplicate_at)
