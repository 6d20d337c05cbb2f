"""Word2Vec as a federated family: its data, its stream, its sparse updates at the server."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pandas as pd
import pytest
import torch

from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.families import get_family
from fedtopic_pipelines.core.families.word2vec import PairStream, Sentences, sentences_from_frames
from fedtopic_pipelines.core.federated.engine import FederationError, InProcessEngine
from fedtopic_pipelines.core.federated.messages import Instruction, Update
from fedtopic_pipelines.core.federated.server import FederatedServer, StoppingRule
from fedtopic_pipelines.core.federation import run_federation
from fedtopic_pipelines.core.site import MemoryEndpoint
from tests.core.federated.test_family_contract import CASES, word_sequences

CPU = torch.device("cpu")
FAMILY = get_family("word2vec")


def _config(**changes) -> TrainConfig:
    return TrainConfig.from_params({**CASES["word2vec"].train, **changes})


def _vocabulary(n: int = 40) -> pd.DataFrame:
    return pd.DataFrame({"term": [f"w{j}" for j in range(n)]})


def test_token_tables_become_ids_of_the_vocabulary_and_short_documents_are_counted() -> None:
    frame = pd.DataFrame(
        {
            "tokens": ["cat sat mat", "dog unknown", "cat cat dog", "mat"],
            "split": ["train", "train", "train", "test"],
        }
    )
    data, report = sentences_from_frames([frame], ["cat", "dog", "mat", "sat"], [3.0, 2.0, 1.0, 1.0])
    assert data.tokens.tolist() == [0, 3, 2, 0, 0, 1]
    assert data.offsets.tolist() == [0, 3, 6]
    assert report["dropped_fewer_than_two_terms"] == 1  # "dog unknown": one vocabulary token, no pair
    assert report["documents"] == 3 and report["tokens"] == 8 and report["tokens_in_vocabulary"] == 7


def test_an_organisation_without_vocabulary_tokens_is_named() -> None:
    empty = Sentences(np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64), np.ones(40))
    data = {**word_sequences((30, 21, 45), 40), "b": empty}
    endpoints = [MemoryEndpoint(org, d) for org, d in data.items()]
    with pytest.raises(FederationError, match="organisation 'b' has 0 training document"):
        run_federation(InProcessEngine(endpoints), list(data), _config(), vocabulary=_vocabulary(), progress=False)


def test_the_stream_resumes_exactly_from_its_state_and_crosses_epoch_ends() -> None:
    data = word_sequences((12,), 40)["a"]  # a few dozen pairs: a batch of 16 crosses epochs often
    a = PairStream(data, _config(), seed=5, device=CPU)
    for _ in range(7):
        a.next_batches()
    b = PairStream(data, _config(), seed=5, device=CPU)
    b.load_state_dict(a.state_dict())
    for _ in range(5):
        for x, y in zip(a.next_batches(), b.next_batches(), strict=True):
            assert len(x) == 16
            assert torch.equal(x.centers, y.centers) and torch.equal(x.contexts, y.contexts)
            assert torch.equal(x.negatives, y.negatives)
    assert a.epoch >= 2


def test_documents_that_yield_no_pair_stop_the_stream_with_a_reason() -> None:
    data = Sentences(np.array([0, 0, 1, 1]), np.array([0, 2, 4]), np.array([1e6, 1e6, 1.0]))
    config = _config(model={**CASES["word2vec"].train["model"], "subsample": 1e-9})  # drops nearly every token
    stream = PairStream(data, config, seed=0, device=CPU)
    with pytest.raises(ValueError, match="no skip-gram pair"):
        for _ in range(50):
            stream.next_batches()


def _server_and_update():
    config = _config()
    model = FAMILY.create_model(40, config, CPU)
    server = FederatedServer(FAMILY.strategy(model, config), StoppingRule(1), capacity={"a": 16})
    client_model = FAMILY.create_model(40, config, CPU)
    stream = FAMILY.stream(word_sequences((30,), 40)["a"], config, 0, CPU)
    step = FAMILY.local_step(client_model, stream)
    update = Update(
        "a", FAMILY.update_kind, step.tensors, step.num_examples, step.row_indices, metrics=step.losses, round=0
    )
    return server, model, update


class _Fixed:
    def __init__(self, update: Update) -> None:
        self.update = update

    def broadcast(self, instruction: Instruction):
        from fedtopic_pipelines.core.federated.messages import Replies

        return Replies([self.update])


@pytest.mark.parametrize("corruption", ["duplicate", "negative", "beyond", "float_index", "count"])
def test_a_malformed_sparse_update_is_rejected_with_a_logged_reason_and_the_model_untouched(corruption, caplog) -> None:
    server, model, update = _server_and_update()
    rows = update.row_indices["output"]
    changed = {
        "duplicate": {"output": torch.cat([rows[:1], rows[1:].clone()]).index_fill(0, torch.tensor([1]), int(rows[0]))},
        "negative": {"output": rows - int(rows.max()) - 1},
        "beyond": {"output": rows + 40},
        "float_index": {"output": rows.double()},
    }
    if corruption == "count":
        bad = dataclasses.replace(update, num_examples=17)  # more pairs than a batch holds
    else:
        bad = dataclasses.replace(update, row_indices={**update.row_indices, **changed[corruption]})
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with caplog.at_level(logging.WARNING), pytest.raises(Exception, match="no usable update"):
        server.run_round(_Fixed(bad), 0)
    assert "rejected" in caplog.text
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_round_steps_only_the_touched_rows_and_reports_its_bytes() -> None:
    server, model, update = _server_and_update()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    record = server.run_round(_Fixed(update), 0)
    for name in ("input", "output"):
        moved = (model.state_dict()[name] != before[name]).any(dim=1).nonzero().ravel()
        assert set(moved.tolist()) <= set(update.row_indices[name].tolist())
    assert record.client_bytes == {"a": update.nbytes}
    assert record.metrics["bytes_sent"] == update.nbytes
    assert record.metrics["bytes_dense"] == 2 * 40 * 8 * 4  # U and V, float32
    assert record.metrics["bytes_ratio"] == pytest.approx(2 * 40 * 8 * 4 / update.nbytes)


def test_words_per_second_counts_the_passes_the_rounds_pairs_make_over_their_seconds() -> None:
    from fedtopic_pipelines.core.families.word2vec import expected_pairs, words_per_second
    from fedtopic_pipelines.core.federated.server import RoundRecord

    config = _config()
    data = list(word_sequences((30, 20), 40).values())
    per_pass = sum(expected_pairs(d, config.model) for d in data)
    tokens = sum(len(d.tokens) for d in data)
    history = [
        RoundRecord(1, {}, per_pass // 2, seconds=1.5),
        RoundRecord(2, {}, per_pass - per_pass // 2, seconds=0.5),
        RoundRecord(3, {}, 0, seconds=float("nan")),  # an untimed round counts no seconds
    ]
    assert words_per_second(history, data, config.model) == pytest.approx(tokens * 1.0 / 2.0)
    assert words_per_second(history[2:], data, config.model) is None
