import re

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from fedtopic_pipelines.core.config import ConfigError, ConsensusConfig, from_mapping
from fedtopic_pipelines.core.vocab.consensus import (
    EmptyVocabularyError,
    agree_on_vocabulary,
    merge_vocabularies,
    propose_terms,
    vectorize,
    vectorize_frames,
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


# Vocabulary floors --------------------------------------------------------------------
FLOOR_PROPOSALS = {
    "a": {"common": 30, "pair": 4, "loud": 60, "junk": 7},
    "b": {"common": 20, "pair": 3, "mine": 8},
    "c": {"common": 10, "other": 9},
}


def _agree(**floors):
    return agree_on_vocabulary(FLOOR_PROPOSALS, ConsensusConfig(top_n=10, min_count=0, **floors))


def test_floors_off_by_default_keep_the_whole_union() -> None:
    consensus = _agree()
    assert consensus.vocabulary.equals(merge_vocabularies(FLOOR_PROPOSALS, "union"))
    assert consensus.report["removed_by_floors"]["total"] == {"terms": 0, "proposed_count": 0}
    assert consensus.report["merged_terms_by_organisations"] == {"1": 4, "2": 1, "3": 1}


def test_min_organisations_removes_terms_few_organisations_proposed_and_reports_them() -> None:
    consensus = _agree(min_organisations=2)
    assert sorted(consensus.vocabulary["term"]) == ["common", "pair"]
    removed = consensus.report["removed_by_floors"]
    assert removed["min_organisations"] == {"terms": 4, "proposed_count": 60 + 7 + 8 + 9}
    assert removed["min_total_count"] == {"terms": 0, "proposed_count": 0}
    assert consensus.report["vocabulary_size"] == 2 and consensus.report["vocabulary_proposed_count"] == 67


def test_min_total_count_removes_rare_terms_and_both_floors_must_be_met() -> None:
    only_m = _agree(min_total_count=9)
    assert sorted(only_m.vocabulary["term"]) == ["common", "loud", "other"]  # pair (7), junk (7), mine (8) out
    both = _agree(min_organisations=2, min_total_count=9)
    assert both.vocabulary["term"].tolist() == ["common"]  # pair has 2 organisations but a count of 7
    removed = both.report["removed_by_floors"]
    assert removed["min_organisations"]["terms"] == 4 and removed["min_total_count"]["terms"] == 3
    assert removed["both"] == {"terms": 2, "proposed_count": 15}  # junk, mine
    assert removed["total"] == {"terms": 5, "proposed_count": 60 + 7 + 7 + 8 + 9}


def test_floors_that_empty_the_vocabulary_name_both_parameters() -> None:
    with pytest.raises(EmptyVocabularyError, match="min_organisations.*min_total_count"):
        _agree(min_organisations=3, min_total_count=100)
    with pytest.raises(EmptyVocabularyError, match="'vocab_consensus.min_organisations' is 4 but only 3"):
        _agree(min_organisations=4)


LOUD_ALONE = {"a": {"loud": 100, "x": 3}, "b": {"x": 2}}


@pytest.mark.parametrize(
    ("proposals", "floors", "suggested"),
    [
        (FLOOR_PROPOSALS, {"min_organisations": 3, "min_total_count": 100}, {"min_total_count": 60}),
        (FLOOR_PROPOSALS, {"min_organisations": 2, "min_total_count": 70}, {"min_total_count": 7}),
        (LOUD_ALONE, {"min_organisations": 2, "min_total_count": 50}, {"min_total_count": 5, "min_organisations": 1}),
    ],
)
def test_an_empty_vocabulary_error_gives_each_floor_a_value_that_keeps_terms(proposals, floors, suggested) -> None:
    def agree(**values):
        return agree_on_vocabulary(proposals, ConsensusConfig(top_n=10, min_count=0, **values))

    with pytest.raises(EmptyVocabularyError) as caught:
        agree(**floors)
    found = dict(re.findall(r"'vocab_consensus\.(\w+)' = (\d+) keeps", str(caught.value)))
    assert {k: int(v) for k, v in found.items()} == suggested
    for name, value in suggested.items():  # each suggestion alone, the other floor as it was, keeps terms
        assert len(agree(**{**floors, name: value}).vocabulary) > 0


def test_a_share_as_min_total_count_scales_with_the_summed_proposed_counts() -> None:
    share = _agree(min_total_count=0.05)  # 5 % of the 151 proposed: 8
    assert share.report["floors"]["min_total_count_as_count"] == 8
    assert sorted(share.vocabulary["term"]) == ["common", "loud", "mine", "other"]
    doubled = {org: {t: 2 * n for t, n in p.items()} for org, p in FLOOR_PROPOSALS.items()}
    scaled = agree_on_vocabulary(doubled, ConsensusConfig(top_n=10, min_count=0, min_total_count=0.05))
    assert scaled.report["floors"]["min_total_count_as_count"] == 16  # the same share of a corpus twice the size
    assert scaled.vocabulary["term"].tolist() == share.vocabulary["term"].tolist()
    with pytest.raises(EmptyVocabularyError, match=r"'vocab_consensus.min_total_count' = 0.9 \(136 of the summed"):
        _agree(min_total_count=0.9)


def test_the_report_says_what_the_floors_took_from_each_organisation() -> None:
    per_org = _agree(min_organisations=2).report["per_organisation"]
    assert per_org["a"] == {"proposed_terms": 4, "kept_terms": 2, "removed_terms": 2, "removed_proposed_count": 67}
    assert per_org["c"] == {"proposed_terms": 2, "kept_terms": 1, "removed_terms": 1, "removed_proposed_count": 9}


@pytest.mark.parametrize(
    ("block", "where"),
    [
        ({"min_organisations": 0}, "vocab_consensus.min_organisations"),
        ({"min_total_count": -1}, "min_total_count"),
        ({"min_total_count": 1.5}, "min_total_count"),
        ({"min_terms": -1}, "vocab_consensus.min_terms"),
        ({"min_terms": 0.5}, "vocab_consensus.min_terms"),
    ],
)
def test_floor_parameters_are_validated(block, where) -> None:
    with pytest.raises(ConfigError, match=where):
        from_mapping(ConsensusConfig, block, "vocab_consensus")


def test_the_federation_vocabulary_stage_applies_the_same_floors() -> None:
    """The Flower path (run_federation's vocabulary stage) and the Kedro node share the function."""
    from fedtopic_pipelines.core.config import PreprocessConfig
    from fedtopic_pipelines.core.federated.engine import InProcessEngine
    from fedtopic_pipelines.core.federation import agree_vocabulary
    from fedtopic_pipelines.core.site import MemoryEndpoint

    config = ConsensusConfig(top_n=10, min_count=0, min_organisations=2, min_total_count=5)
    endpoints = [MemoryEndpoint(org, sp.csr_matrix((1, 1)), counts) for org, counts in FLOOR_PROPOSALS.items()]
    served = agree_vocabulary(InProcessEngine(endpoints), list(FLOOR_PROPOSALS), PreprocessConfig(), config)
    assert served.equals(agree_on_vocabulary(FLOOR_PROPOSALS, config).vocabulary)
    assert served["term"].tolist() == ["common", "pair"]


def test_vectorise_report_counts_tokens_outside_the_vocabulary_and_of_own_terms_left_out() -> None:
    frame = pd.DataFrame(
        {
            "doc_id": ["d1", "d2", "d3"],
            "organisation": ["a"] * 3,
            "label": [""] * 3,
            "split": ["train", "train", "test"],
            "tokens": ["common junk junk zzz", "loud", "common junk"],
        }
    )
    _, report = vectorize_frames([frame], ["common", "pair"], proposal=FLOOR_PROPOSALS["a"])
    assert report["tokens"]["train"] == {
        "total": 5,
        "in_vocabulary": 1,
        "outside_vocabulary": 4,
        "of_proposed_terms_left_out": 3,  # junk twice, loud; zzz was never proposed
    }
    assert report["tokens"]["test"]["of_proposed_terms_left_out"] == 1
    assert report["proposed_terms_left_out"] == 2 and report["dropped_no_vocabulary_term"] == {"train": 1}


# privacy.vocab_k / vocab_min_count with the floors (docs/vocabulary.md) ------------------------------

PRIVATE = {
    "a": {"shared": 30, "ab": 20, "solo_big": 60, "solo_small": 3},
    "b": {"shared": 25, "ab": 2, "bsolo": 9},
    "c": {"shared": 10},
}


def _privacy(**changes):
    from fedtopic_pipelines.core.config import PrivacyConfig

    return PrivacyConfig(**changes)


def test_vocab_k_removes_terms_of_fewer_organisations_and_reports_them() -> None:
    config = ConsensusConfig(top_n=10, min_count=0, merge="union")
    consensus = agree_on_vocabulary(PRIVATE, config, _privacy(vocab_k=2))
    assert consensus.vocabulary["term"].tolist() == ["shared", "ab"]
    privacy = consensus.report["privacy"]
    assert privacy["removed_by_vocab_k"] == {"terms": 3, "proposed_count": 60 + 3 + 9}
    assert privacy["removed_by_vocab_k_only"] == privacy["removed_by_vocab_k"]  # no floor set
    assert privacy["vocab_k"] == 2 and privacy["keyed"] is True
    assert consensus.report["removed_by_floors"]["total"]["terms"] == 0


def test_vocab_min_count_is_a_second_way_in_and_the_floors_still_apply() -> None:
    config = ConsensusConfig(top_n=10, min_count=0, merge="union")
    # k = 2 OR a summed count >= 50: the frequent one-organisation term passes
    either = agree_on_vocabulary(PRIVATE, config, _privacy(vocab_k=2, vocab_min_count=50))
    assert set(either.vocabulary["term"]) == {"shared", "ab", "solo_big"}
    # the consensus floors are still required on top (both): min_total_count 25 drops ab (22)
    both = agree_on_vocabulary(PRIVATE, config.replace(min_total_count=25), _privacy(vocab_k=2, vocab_min_count=50))
    assert set(both.vocabulary["term"]) == {"shared", "solo_big"}
    # a floor stricter than k: privacy removes nothing the floors keep
    floors = agree_on_vocabulary(PRIVATE, config.replace(min_organisations=3), _privacy(vocab_k=2))
    assert floors.vocabulary["term"].tolist() == ["shared"]
    assert floors.report["privacy"]["removed_by_vocab_k_only"]["terms"] == 0


def test_vocab_k_above_the_organisations_and_empty_results_name_privacy_vocab_k() -> None:
    config = ConsensusConfig(top_n=10, min_count=0, merge="union")
    with pytest.raises(EmptyVocabularyError, match=r"'privacy.vocab_k' is 4 but only 3"):
        agree_on_vocabulary(PRIVATE, config, _privacy(vocab_k=4))
    disjoint = {"a": {"x": 5}, "b": {"y": 5}}
    with pytest.raises(EmptyVocabularyError, match=r"fewer than 'privacy.vocab_k' = 2"):
        agree_on_vocabulary(disjoint, config, _privacy(vocab_k=2))


def test_without_privacy_the_report_says_nothing_was_removed_by_it() -> None:
    consensus = agree_on_vocabulary(PRIVATE, ConsensusConfig(top_n=10, min_count=0, merge="union"))
    assert len(consensus.vocabulary) == 5
    assert consensus.report["privacy"]["removed_by_vocab_k"] == {"terms": 0, "proposed_count": 0}


def test_min_terms_lowers_the_summed_count_floor_to_keep_that_many_terms(caplog) -> None:
    # merged: common 60, loud 60, other 9, mine 8, pair 7, junk 7; m = 61 alone keeps nothing
    with caplog.at_level("INFO", logger="fedtopic_pipelines.core.vocab.consensus"):
        consensus = _agree(min_total_count=61, min_terms=3)
    assert sorted(consensus.vocabulary["term"]) == ["common", "loud", "other"]
    floors = consensus.report["floors"]
    assert floors["min_total_count_as_count"] == 9 and floors["min_total_count_lowered_from"] == 61
    assert "'vocab_consensus.min_terms' = 3: lowered to 9, which keeps 3" in caplog.text


def test_min_terms_counts_only_terms_the_other_floor_and_privacy_keep() -> None:
    # with k = 2 only common (60) and pair (7) can pass: the floor falls to 7 and keeps both
    consensus = _agree(min_organisations=2, min_total_count=61, min_terms=3)
    assert sorted(consensus.vocabulary["term"]) == ["common", "pair"]
    assert consensus.report["floors"]["min_total_count_as_count"] == 7
    private = agree_on_vocabulary(
        FLOOR_PROPOSALS,
        ConsensusConfig(top_n=10, min_count=0, min_total_count=61, min_terms=3),
        _privacy(vocab_k=2),
    )
    assert sorted(private.vocabulary["term"]) == ["common", "pair"]


def test_min_terms_never_raises_the_floor_nor_turns_it_on() -> None:
    enough = _agree(min_total_count=9, min_terms=3)  # 9 already keeps 3 terms
    assert enough.report["floors"]["min_total_count_as_count"] == 9
    assert enough.report["floors"]["min_total_count_lowered_from"] is None
    off = _agree(min_total_count=0, min_terms=100)
    assert len(off.vocabulary) == 6 and off.report["floors"]["min_total_count_as_count"] == 0
