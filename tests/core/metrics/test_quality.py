"""Warnings for a degenerate model name the parameter to change and a value computed from the model."""

from __future__ import annotations

from fedtopic_pipelines.core.metrics.quality import distinct_topic_count, model_warnings
from fedtopic_pipelines.core.metrics.topics import redundancy

PARAMETER = "train.model.n_topics"


def test_merging_duplicate_pairs_counts_connected_topics_once() -> None:
    assert distinct_topic_count(5, []) == 5
    assert distinct_topic_count(5, [(0, 1, 6), (1, 2, 5)]) == 3  # 0-1-2 is one topic
    assert distinct_topic_count(5, [(0, 1, 6), (3, 4, 5)]) == 3


def test_a_healthy_model_earns_no_warning() -> None:
    topics = [["a", "b", "c"], ["d", "e", "f"], ["g", "h", "i"]]
    found = redundancy(topics, duplicate_at=2)
    assert model_warnings("federated", topics, found, 100, {"c_npmi": 0}, PARAMETER) == []


def test_duplicate_topics_name_the_pair_its_words_and_the_topic_count_to_try() -> None:
    topics = [["a", "b", "c"], ["b", "a", "x"], ["d", "e", "f"], ["d", "e", "g"]]
    (warning,) = model_warnings("centralized", topics, redundancy(topics, duplicate_at=2), 100, {}, PARAMETER)
    assert warning.kind == "duplicate_topics" and warning.parameter == PARAMETER and warning.value_to_try == 2
    assert "topics 0 and 1, share 2 (a b)" in warning.message and "'train.model.n_topics' = 2" in warning.message
    # the threshold is said, not the smallest overlap found: two pairs sharing 3 at a threshold of 2
    triple = [["a", "b", "c"], ["a", "b", "c"], ["x", "y", "z"]]
    (same,) = model_warnings("federated", triple, redundancy(triple, duplicate_at=2), 100, {}, PARAMETER)
    assert "1 pair(s) of topics share 2 or more" in same.message


def test_a_vocabulary_too_small_for_distinct_top_words_suggests_a_topic_count_and_the_floors() -> None:
    topics = [["a", "b", "c"], ["d", "e", "f"], ["g", "h", "i"]]
    (warning,) = model_warnings("federated", topics, redundancy(topics, duplicate_at=3), 7, {}, PARAMETER)
    assert warning.kind == "small_vocabulary" and warning.value_to_try == 2
    assert "7 terms" in warning.message and "vocab_consensus.min_total_count" in warning.message
    assert "'vocab_consensus.min_terms' = 22" in warning.message  # 25 terms per topic of 3 top words x 3


def test_undefined_pooled_coherence_is_a_warning_with_its_count() -> None:
    topics = [["a", "b"], ["c", "d"]]
    warnings = model_warnings("federated", topics, redundancy(topics, duplicate_at=2), 50, {"c_npmi": 1}, PARAMETER)
    assert [(w.kind, w.parameter) for w in warnings] == [("undefined_coherence", None)]
    assert "1 of 2 topics have no pooled c_npmi" in warnings[0].message
