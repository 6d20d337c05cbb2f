"""Fingerprints that tie artefacts to their inputs, and the check that compares them."""

import pytest
import torch

from fedtopic_pipelines.core.config import ProdLDAConfig, TrainConfig
from fedtopic_pipelines.core.lineage import (
    LineageError,
    candidates_fingerprint,
    models_fingerprint,
    require_same,
    vocabulary_fingerprint,
)
from fedtopic_pipelines.core.model_store import TrainedModel


def _model(beta: torch.Tensor, vocabulary: str = "v") -> TrainedModel:
    config = TrainConfig(model=ProdLDAConfig(n_topics=2, hidden_sizes=(4,)))
    return TrainedModel("m", "federated", ["a"], beta.shape[1], config, {"beta": beta}, vocabulary=vocabulary)


def test_fingerprints_follow_content_and_order() -> None:
    assert vocabulary_fingerprint(["a", "b"]) == vocabulary_fingerprint(("a", "b"))
    assert vocabulary_fingerprint(["a", "b"]) != vocabulary_fingerprint(["b", "a"])  # the order is the index
    beta = torch.zeros(2, 3)
    changed = beta.clone()
    changed[1, 2] = 1e-7
    assert models_fingerprint({"m": _model(beta)}) == models_fingerprint({"m": _model(beta.clone())})
    assert models_fingerprint({"m": _model(beta)}) != models_fingerprint({"m": _model(changed)})
    assert models_fingerprint({"m": _model(beta)}) != models_fingerprint({"m": _model(beta, "w")})
    words = {"words": ["x", "y", "z"], "pairs": [[0, 1]]}
    assert candidates_fingerprint(words) == candidates_fingerprint({**words, "lineage": {"models": "q"}})
    assert candidates_fingerprint(words) != candidates_fingerprint({**words, "pairs": [[0, 2]]})


def test_require_same_names_each_disagreeing_artefact_and_skips_unrecorded_ones() -> None:
    require_same("vocabulary", "aa", {"x": "aa", "old": None}, "rerun")
    with pytest.raises(LineageError) as caught:
        require_same(
            "vocabulary", "aa", {"x": "aa", "y": "bb", "z": "cc", "w": "bb"}, "Run it again.", built_from="trained on"
        )
    message = str(caught.value)
    assert "y, w were trained on vocabulary bb; z was trained on vocabulary cc" in message
    assert "current vocabulary is aa" in message and message.endswith("Run it again.") and "x was" not in message


def test_tokens_fingerprint_follows_every_document_not_the_shards() -> None:
    import pandas as pd

    from fedtopic_pipelines.core.lineage import tokens_fingerprint

    table = pd.DataFrame(
        {
            "doc_id": ["a:0", "a:1", "a:2"],
            "organisation": "a",
            "tokens": ["orbit moon", "puck goal", "disk file"],
            "label": ["space", "hockey", "computer"],
            "split": ["train", "train", "test"],
        }
    )
    whole = tokens_fingerprint([table])
    assert whole == tokens_fingerprint([table.iloc[:1], table.iloc[1:0], table.iloc[1:]])  # shards do not matter
    assert whole == tokens_fingerprint([table.drop(columns="organisation")])  # only what a bag of words reads
    for column, value in (("tokens", "puck"), ("doc_id", "a:9"), ("label", "space"), ("split", "test")):
        changed = table.copy()
        changed.loc[1, column] = value
        assert tokens_fingerprint([changed]) != whole, column
    assert tokens_fingerprint([table.iloc[[1, 0, 2]]]) != whole  # the order is the rows' index
