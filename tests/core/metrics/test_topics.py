"""Topic redundancy: rank-biased overlap, the largest top-word overlap, duplicate pairs."""

from __future__ import annotations

import pytest

from fedtopic_pipelines.core.metrics.topics import rbo_ext, redundancy


def test_rbo_ext_is_one_for_identical_and_zero_for_disjoint_rankings() -> None:
    words = list("abcdefghij")
    assert rbo_ext(words, words, 0.9) == pytest.approx(1.0)
    assert rbo_ext(words, list("klmnopqrst"), 0.9) == 0.0


def test_rbo_ext_matches_the_reference_package_and_weights_the_top() -> None:
    # 0.63: PyPI ``rbo`` 0.1.3's RankingSimilarity(a, b).rbo_ext(p=0.9), the measure OCTIS's
    # InvertedRBO averages; five random pairs of 10-word lists agreed to 1e-15 when this was written
    assert rbo_ext(["a", "b", "c"], ["b", "a", "d"], 0.9) == pytest.approx(0.63)
    # hand computation: X_1 = 0, X_2 = 2, X_3 = 2 -> (2/3) 0.9^3 + (0.1/0.9)(0 + 0.81 + (2/3) 0.729)
    assert rbo_ext(["a", "b", "c"], ["b", "a", "d"], 0.9) == pytest.approx(
        2 / 3 * 0.9**3 + 0.1 / 0.9 * (0.81 + 2 / 3 * 0.729)
    )
    # the same two shared words count more at the top of the lists than at the bottom
    top = rbo_ext(["a", "b", "x1", "x2"], ["a", "b", "y1", "y2"], 0.9)
    bottom = rbo_ext(["x1", "x2", "a", "b"], ["y1", "y2", "a", "b"], 0.9)
    assert top > bottom > 0


def test_rbo_ext_refuses_unequal_depths_and_a_persistence_outside_the_open_interval() -> None:
    with pytest.raises(ValueError, match="same depth"):
        rbo_ext(["a"], ["a", "b"], 0.9)
    with pytest.raises(ValueError, match="persistence"):
        rbo_ext(["a"], ["a"], 1.0)


def test_redundancy_finds_the_closest_pair_its_words_and_every_duplicate_pair() -> None:
    topics = [
        ["drive", "scsi", "dos", "card", "ide", "controller"],
        ["god", "jesus", "bible", "church", "faith", "christ"],
        ["scsi", "drive", "ide", "card", "meg", "disk"],
        ["space", "nasa", "orbit", "moon", "launch", "shuttle"],
        ["jesus", "god", "people", "believe", "say", "think"],
    ]
    found = redundancy(topics, duplicate_at=3)
    assert found.largest_overlap == 4 and found.pair == (0, 2)
    assert found.shared == ("drive", "scsi", "card", "ide")
    assert found.duplicate_pairs == ((0, 2, 4),)  # topics 1 and 4 share 2: below the threshold
    assert 0.0 < found.inverted_rbo < 1.0
    assert redundancy(topics, duplicate_at=2).duplicate_pairs == ((0, 2, 4), (1, 4, 2))
    as_json = found.as_dict()
    assert as_json["largest_topic_overlap"] == 4 and as_json["duplicate_topic_pairs"] == 1
    assert as_json["largest_topic_overlap_pair"] == {"topics": [0, 2], "shared": ["drive", "scsi", "card", "ide"]}


def test_inverted_rbo_is_one_without_shared_words_and_zero_for_identical_topics() -> None:
    assert redundancy([["a", "b"], ["c", "d"], ["e", "f"]], duplicate_at=1).inverted_rbo == 1.0
    same = redundancy([["a", "b", "c"]] * 3, duplicate_at=3)
    assert same.inverted_rbo == pytest.approx(0.0) and len(same.duplicate_pairs) == 3


def test_redundancy_needs_two_topics() -> None:
    with pytest.raises(ValueError, match="at least 2 topics"):
        redundancy([["a", "b"]], duplicate_at=1)
