"""``vocab_consensus`` under ``params:privacy``: keyed k-anonymous proposals and attack (d) in the report."""

from __future__ import annotations

import pandas as pd
import pytest

from fedtopic_pipelines.core.vocab.privacy import KEY_ENV
from fedtopic_pipelines.pipelines import vocab_consensus
from tests.pipelines.conftest import run_slice

COUNTS = {
    "a": {"shared": 30, "ab": 20, "ac": 12, "alpha": 9, "amazon": 7},
    "b": {"shared": 25, "ab": 15, "beta": 40, "bolt": 8},
    "c": {"shared": 10, "ac": 11, "gamma": 6},
}
VOCAB = {"top_n": 10, "min_count": 0, "merge": "union", "min_organisations": 1, "min_total_count": 0}


def _tokens(org: str) -> pd.DataFrame:
    texts = [" ".join(t for t in COUNTS[org] for _ in range(2)), " ".join(COUNTS[org])]
    return pd.DataFrame(
        {"doc_id": [f"{org}:0", f"{org}:1"], "organisation": org, "tokens": texts, "label": "x", "split": "train"}
    )


def _run(vocab: dict, privacy: dict) -> dict:
    inputs = {
        **{f"clients.{o}.term_counts": c for o, c in COUNTS.items()},
        **{f"clients.{o}.tokens": _tokens(o) for o in COUNTS},
        "params:vocab_consensus": vocab,
        "params:privacy": privacy,
    }
    return run_slice(vocab_consensus.create_pipeline(list(COUNTS)), inputs)


def test_keyed_k2_the_server_reads_no_one_organisation_term_and_gets_the_plain_vocabulary(monkeypatch) -> None:
    monkeypatch.setenv(KEY_ENV, "a secret the server lacks")
    plain = _run(VOCAB, {"vocab_k": 1})
    attack = plain["consensus_report"]["privacy"]["rare_term_attack"]["pooled"]
    assert (attack["precision"], attack["recall"], attack["rare_terms"]) == (1.0, 1.0, 5)

    keyed = _run(VOCAB, {"vocab_k": 2})
    every_term = {t for c in COUNTS.values() for t in c}
    for org in COUNTS:  # what crossed: digests, then the terms of the kept digests only
        assert not set(keyed[f"vocabulary_proposal__{org}"]) & every_term
        revealed = {term for term, _ in keyed[f"vocabulary_reveal__{org}"].values()}
        assert revealed <= {"shared", "ab", "ac"}
    report = keyed["consensus_report"]
    assert report["privacy"]["rare_term_attack"]["pooled"]["recall"] == 0.0
    assert report["privacy"]["removed_by_vocab_k"]["terms"] == 5
    assert report["terms_read_by_server"] == 3
    same_floors = _run({**VOCAB, "min_organisations": 2}, {"vocab_k": 1})["common_vocabulary"]
    pd.testing.assert_frame_equal(keyed["common_vocabulary"], same_floors)
    assert keyed["vectorize_report__a"]["proposed_terms_left_out"] == 2  # alpha, amazon: its own, not sent


def test_k_larger_than_the_organisations_is_named() -> None:
    with pytest.raises(Exception, match=r"'privacy.vocab_k' is 5 but only 3 organisations"):
        _run(VOCAB, {"vocab_k": 5, "vocab_keyed": False})
