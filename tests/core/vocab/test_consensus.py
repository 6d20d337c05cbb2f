import numpy as np
import pytest

from fedtopic_pipelines.core.config import ConsensusConfig
from fedtopic_pipelines.core.vocab.consensus import (
    EmptyVocabularyError,
    merge_vocabularies,
    propose_terms,
    vectorize,
)


def build_vocabulary(counts, config):
    """Each organisation's proposal, then the server's merge (what the pipelines chain)."""
    proposals = {org: propose_terms(c, config.top_n, config.min_count) for org, c in counts.items()}
    return merge_vocabularies(proposals, config.merge)


COUNTS = {
    "a": {"shared": 10, "alpha": 8, "rare": 2, "tie1": 5, "tie2": 5},
    "b": {"shared": 4, "beta": 9, "rare": 1},
}


def test_top_n_above_threshold_with_deterministic_ties() -> None:
    assert propose_terms(COUNTS["a"], top_n=3, min_count=2) == {"shared": 10, "alpha": 8, "tie1": 5}
    assert "rare" not in propose_terms(COUNTS["a"], top_n=10, min_count=2)  # count must exceed T


def test_union_keeps_every_term_with_summed_frequency() -> None:
    vocab = build_vocabulary(COUNTS, ConsensusConfig(top_n=10, min_count=0, merge="union"))
    table = dict(zip(vocab["term"], vocab["frequency"], strict=True))
    assert table["shared"] == 14 and table["beta"] == 9 and table["alpha"] == 8
    assert vocab["term"].tolist()[0] == "shared"  # sorted by merged frequency
    assert dict(zip(vocab["term"], vocab["n_organisations"], strict=True))["shared"] == 2


def test_intersection_keeps_common_terms_only() -> None:
    vocab = build_vocabulary(COUNTS, ConsensusConfig(top_n=10, min_count=0, merge="intersection"))
    assert sorted(vocab["term"]) == ["rare", "shared"]


def test_empty_intersection_names_the_parameters() -> None:
    with pytest.raises(EmptyVocabularyError, match="vocab_consensus.top_n"):
        build_vocabulary(COUNTS, ConsensusConfig(top_n=1, min_count=0, merge="intersection"))


def test_unknown_merge() -> None:
    with pytest.raises(ValueError, match="vocab_consensus.merge"):
        merge_vocabularies({"a": {"x": 1}}, "xor")


def test_vectorize_counts_in_vocabulary_tokens() -> None:
    bow = vectorize([["b", "a", "b", "zzz"], []], ["a", "b"], ["d1", "d2"], ["l1", "l2"], ["train", "test"])
    np.testing.assert_array_equal(bow.matrix.toarray(), [[1, 2], [0, 0]])
    assert len(bow.subset("test")) == 1


def test_documents_without_a_vocabulary_term_are_dropped_and_counted() -> None:
    bow = vectorize(
        [["a"], ["zzz"], [], ["b"]], ["a", "b"], ["d1", "d2", "d3", "d4"], [""] * 4, ["train", "train", "test", "test"]
    )
    kept, dropped = bow.without_empty_documents()
    assert kept.doc_ids.tolist() == ["d1", "d4"]
    assert dropped == {"train": 1, "test": 1}
