"""Word-embedding coherence (seed 004 eq. 4) against a hand computation and on real GloVe."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gensim.models import KeyedVectors

from fedtopic_pipelines.core.metrics.we_coherence import we_coherence


def test_eq4_is_the_mean_pairwise_cosine_and_missing_words_are_counted() -> None:
    kv = KeyedVectors(2)
    kv.add_vectors(["a", "b", "c", "d"], np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [-3.0, 0.0]]))
    result = we_coherence([["a", "b", "c"], ["a", "d", "zzz"], ["c", "zzz"]], kv)
    s = 1 / math.sqrt(2)
    assert result.per_topic[0] == pytest.approx((0.0 + s + s) / 3)  # 2 / (3 * 2) * sum of 3 pairs
    assert result.per_topic[1] == pytest.approx(-1.0)  # zzz has no vector: one pair left
    assert result.per_topic[2] is None and result.undefined_topics == 1
    assert result.mean == pytest.approx(((2 * s) / 3 - 1.0) / 2)
    assert result.coverage == pytest.approx(6 / 8)


def test_related_words_are_more_coherent_than_unrelated_ones_on_glove() -> None:
    from fedtopic_pipelines.core.text.word_vectors import load_word_vectors

    glove = load_word_vectors()
    related = we_coherence([["hockey", "baseball", "team", "game", "season"]], glove).mean
    unrelated = we_coherence([["hockey", "enzyme", "parliament", "guitar", "mortgage"]], glove).mean
    assert related > unrelated + 0.3, (related, unrelated)
