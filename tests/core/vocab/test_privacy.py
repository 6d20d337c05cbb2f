"""Attack (d) on the vocabulary stage and its defence: k-anonymous keyed proposals, count noise."""

from __future__ import annotations

import pandas as pd
import pytest
import scipy.sparse as sp

from fedtopic_pipelines.core.config import ConsensusConfig, PreprocessConfig, PrivacyConfig
from fedtopic_pipelines.core.federated.engine import FederationError, InProcessEngine
from fedtopic_pipelines.core.federation import agree_vocabulary
from fedtopic_pipelines.core.site import MemoryEndpoint
from fedtopic_pipelines.core.vocab.consensus import (
    EmptyVocabularyError,
    complete_vocabulary,
    exchange_vocabulary,
    offer_vocabulary,
    reveal_vocabulary,
    select_vocabulary,
)
from fedtopic_pipelines.core.vocab.privacy import (
    KEY_ENV,
    VocabularyPrivacyError,
    noise_seed,
    noisy_counts,
    rare_term_attack,
    term_digest,
    vocabulary_key,
)

KEY = b"k" * 32
# a, b, c share some terms; each also holds terms nobody else has (its rare terms)
PROPOSALS = {
    "a": {"shared": 30, "ab": 20, "ac": 12, "alpha": 9, "amazon": 7},
    "b": {"shared": 25, "ab": 15, "beta": 40, "bolt": 8},
    "c": {"shared": 10, "ac": 11, "gamma": 6},
}
RARE = {"a": {"alpha", "amazon"}, "b": {"beta", "bolt"}, "c": {"gamma"}}
FLOORS = ConsensusConfig(top_n=10, min_count=0, merge="union", min_organisations=1, min_total_count=0)


def privacy(**changes) -> PrivacyConfig:
    return PrivacyConfig(**changes)


def test_without_defence_the_server_reads_every_rare_term() -> None:
    consensus, view = exchange_vocabulary(PROPOSALS, FLOORS, privacy())
    attack = rare_term_attack(view, PROPOSALS)
    assert attack["pooled"] == {"rare_terms": 5, "guesses": 5, "correct": 5, "precision": 1.0, "recall": 1.0}
    assert attack["organisations"]["c"] == {
        "rare_terms": 1,
        "guesses": 1,
        "correct": 1,
        "precision": 1.0,
        "recall": 1.0,
    }
    assert consensus.report["terms_read_by_server"] == 8  # every proposed term, in the clear
    # the floors alone (k = 2 on the merged terms) keep rare terms out of the vocabulary, not out of the view
    floored = FLOORS.replace(min_organisations=2)
    assert rare_term_attack(exchange_vocabulary(PROPOSALS, floored, privacy())[1], PROPOSALS)["pooled"]["recall"] == 1


def test_noise_alone_hides_counts_not_terms() -> None:
    _, view = exchange_vocabulary(PROPOSALS, FLOORS, privacy(vocab_count_noise=3.0), KEY)
    assert rare_term_attack(view, PROPOSALS)["pooled"]["recall"] == 1.0
    assert view["offers"] != PROPOSALS  # the counts moved


def test_keyed_k2_server_never_reads_a_term_held_by_one_organisation() -> None:
    secure = privacy(vocab_k=2)
    consensus, view = exchange_vocabulary(PROPOSALS, FLOORS, secure, KEY)
    every_term = {t for p in PROPOSALS.values() for t in p}
    sent = {token for offer in view["offers"].values() for token in offer}
    assert not sent & every_term  # only digests travelled
    read = {t for opened in view["revealed"].values() for t in opened.values()} | set(view["vocabulary"])
    assert read == {"shared", "ab", "ac"}  # each held by >= 2 organisations
    attack = rare_term_attack(view, PROPOSALS)
    assert attack["pooled"]["recall"] == 0.0 and attack["pooled"]["guesses"] == 0
    assert attack["pooled"]["precision"] is None  # no guess to be right about
    assert consensus.report["terms_read_by_server"] == 3
    # the same vocabulary as the plain consensus with the same floors, frequencies and order included
    plain = exchange_vocabulary(PROPOSALS, FLOORS.replace(min_organisations=2), privacy())[0]
    pd.testing.assert_frame_equal(consensus.vocabulary, plain.vocabulary)
    removed = consensus.report["privacy"]["removed_by_vocab_k"]
    assert removed == {"terms": 5, "proposed_count": 9 + 7 + 40 + 8 + 6}
    assert consensus.report["privacy"]["keyed"] is True


def test_vocab_min_count_lets_frequent_single_organisation_terms_through_and_the_attack_sees_them() -> None:
    consensus, view = exchange_vocabulary(PROPOSALS, FLOORS, privacy(vocab_k=2, vocab_min_count=30), KEY)
    assert set(consensus.vocabulary["term"]) == {"shared", "ab", "ac", "beta"}  # beta: 40 >= 30, one holder
    attack = rare_term_attack(view, PROPOSALS)
    assert attack["organisations"]["b"]["correct"] == 1 and attack["pooled"]["recall"] == pytest.approx(1 / 5)


def test_noise_is_deterministic_under_its_seed() -> None:
    counts = {"x": 10, "y": 20, "z": 30}
    assert noisy_counts(counts, 2.0, seed=5) == noisy_counts(counts, 2.0, seed=5)
    assert noisy_counts(counts, 2.0, seed=5) != noisy_counts(counts, 2.0, seed=6)
    assert noisy_counts(counts, 0.0, seed=5) == counts
    assert all(c >= 0 for c in noisy_counts({"x": 0}, 50.0, seed=1).values())
    assert noise_seed(KEY, counts) == noise_seed(KEY, dict(counts))
    assert noise_seed(KEY, counts) != noise_seed(b"other" * 8, counts)
    noisy = privacy(vocab_count_noise=2.0)
    assert offer_vocabulary(counts, noisy, KEY) == offer_vocabulary(counts, noisy, KEY)


def test_k_above_the_organisations_names_the_parameter() -> None:
    with pytest.raises(EmptyVocabularyError, match=r"'privacy.vocab_k' is 4 but only 3 organisations"):
        exchange_vocabulary(PROPOSALS, FLOORS, privacy(vocab_k=4), KEY)


def test_a_reveal_that_lies_about_a_digest_is_refused_naming_the_organisation() -> None:
    secure = privacy(vocab_k=2)
    offers = {org: offer_vocabulary(p, secure, KEY) for org, p in PROPOSALS.items()}
    selection = select_vocabulary(offers, FLOORS, secure)
    reveals = {org: reveal_vocabulary(p, selection.request, KEY) for org, p in PROPOSALS.items()}
    lie = {d: ["mallory", opening] for d, (_, opening) in reveals["b"].items()}
    with pytest.raises(VocabularyPrivacyError, match="organisation 'b' revealed a term that does not match"):
        complete_vocabulary(selection, offers, {**reveals, "b": lie})
    silent = {**reveals, "c": {}}
    with pytest.raises(VocabularyPrivacyError, match=r"organisation 'c' revealed 0 digests; 2 were asked of it"):
        complete_vocabulary(selection, offers, silent)
    assert term_digest(KEY, "shared") in selection.request


def test_the_key_comes_from_the_environment() -> None:
    with pytest.raises(VocabularyPrivacyError, match=KEY_ENV):
        vocabulary_key({}, required=True)
    with pytest.raises(VocabularyPrivacyError, match="at least 16"):
        vocabulary_key({KEY_ENV: "short"})
    assert vocabulary_key({KEY_ENV: "x" * 16}) == b"x" * 16
    assert vocabulary_key({}) != vocabulary_key({KEY_ENV: "x" * 16})  # the public in-process key


def _engine(counts=PROPOSALS, endpoint=MemoryEndpoint) -> InProcessEngine:
    return InProcessEngine([endpoint(org, sp.csr_matrix((2, 1)), c) for org, c in counts.items()])


def test_the_federation_stage_runs_the_same_exchange_through_the_vocabulary_query(monkeypatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY.decode())
    pre, secure = PreprocessConfig(), privacy(vocab_k=2)
    expected = exchange_vocabulary(PROPOSALS, FLOORS, secure, KEY)[0].vocabulary
    vocabulary = agree_vocabulary(_engine(), list(PROPOSALS), pre, FLOORS, secure)
    pd.testing.assert_frame_equal(vocabulary, expected)
    plain = agree_vocabulary(_engine(), list(PROPOSALS), pre, FLOORS.replace(min_organisations=2))
    pd.testing.assert_frame_equal(vocabulary, plain)
    noisy = agree_vocabulary(_engine(), list(PROPOSALS), pre, FLOORS, privacy(vocab_count_noise=1.0))
    assert set(noisy["term"]) == {t for p in PROPOSALS.values() for t in p}


def test_the_federation_stage_names_an_organisation_whose_reveal_lies(monkeypatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY.decode())

    class Liar(MemoryEndpoint):
        def vocabulary(self, payload):
            answer = super().vocabulary(payload)
            if payload.get("step") == "reveal" and self.name == "a":
                answer["terms"] = ["mallory" for _ in answer["terms"]]
            return answer

    with pytest.raises(FederationError, match="organisation 'a' revealed a term that does not match"):
        agree_vocabulary(_engine(endpoint=Liar), list(PROPOSALS), PreprocessConfig(), FLOORS, privacy(vocab_k=2))
