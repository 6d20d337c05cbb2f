"""Topic descriptions and topic diversity."""

from __future__ import annotations

from collections.abc import Sequence

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
