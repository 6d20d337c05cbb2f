"""Core messages survive the trip through Flower records bit for bit; malformed replies are named."""

from __future__ import annotations

import dataclasses
import io

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from fedtopic_pipelines.core.federated.messages import Instruction, Update, UpdateKind
from fedtopic_pipelines.flower.records import (
    MalformedRecord,
    instruction_to_record,
    record_to_instruction,
    record_to_update,
    update_to_record,
)


def test_instruction_and_update_round_trip_exactly() -> None:
    state = {"w": torch.randn(3, 4), "b": torch.ones(4), "same_as_b": torch.ones(4), "count": torch.tensor(7)}
    back = record_to_instruction(instruction_to_record(Instruction(5, state, {"action": "gradients"})))
    assert back.round == 5 and back.config == {"action": "gradients"}
    assert all(torch.equal(back.state[k], state[k]) and back.state[k].dtype == state[k].dtype for k in state)
    update = Update(
        "ignored",
        UpdateKind.GRADIENTS,
        {"w": torch.randn(3, 4), "z1": torch.zeros(2), "z2": torch.zeros(2)},
        12,
        row_indices={"rows": torch.tensor([1, 5], dtype=torch.int64)},
        statistics={"bn.mean": torch.rand(4)},
        metrics={"loss": 1.5},
    )
    got = record_to_update(update_to_record(update), "alpha")
    assert got.client_id == "alpha"  # the engine's name for the node, never the record's
    assert (got.kind, got.num_examples, got.metrics) == (update.kind, 12, {"loss": 1.5})
    for mine, theirs in ((got.tensors, update.tensors), (got.statistics, update.statistics)):
        assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in theirs)
    assert torch.equal(got.row_indices["rows"], update.row_indices["rows"])
    metrics_only = record_to_update(update_to_record(Update("x", UpdateKind.METRICS, {}, 3, metrics={"v": 2.0})), "a")
    assert metrics_only.tensors == {} and metrics_only.metrics == {"v": 2.0}


def test_an_update_carries_its_round_and_the_server_refuses_another_round() -> None:
    """On Flower as in process: the round an update answers travels with it; a record without
    one arrives as None, which the server refuses like a replay of an earlier round."""
    from fedtopic_pipelines.core.federated.server import _wrong_round

    sent = Update("x", UpdateKind.GRADIENTS, {"w": torch.ones(2)}, 3, round=7)
    assert record_to_update(update_to_record(sent), "a").round == 7
    unnamed = record_to_update(update_to_record(Update("x", UpdateKind.GRADIENTS, {"w": torch.ones(2)}, 3)), "a")
    assert unnamed.round is None
    assert "names no round" in _wrong_round(unnamed, 7)
    assert "a replay or a stale update" in _wrong_round(dataclasses.replace(sent, round=6), 7)
    record = update_to_record(sent)
    record.config_records["meta"]["round"] = "7"
    with pytest.raises(MalformedRecord, match="round must be the instruction's round"):
        record_to_update(record, "a")


def test_word2vec_sparse_rows_travel_as_rows_not_as_the_dense_table() -> None:
    """A Word2Vec update on Flower: the touched rows and their indices, a 1000 x 8 table never."""
    from fedtopic_pipelines.core.config import TrainConfig
    from fedtopic_pipelines.core.families import get_family
    from fedtopic_pipelines.core.families.word2vec import Sentences

    family = get_family("word2vec")
    config = TrainConfig.from_params(
        {"model": {"family": "word2vec", "dimension": 8, "window": 2, "negatives": 3}, "batch_size": 16}
    )
    rng = np.random.default_rng(0)
    data = Sentences(rng.integers(0, 1000, 400), np.arange(0, 401, 20), np.ones(1000))
    model = family.create_model(1000, config, torch.device("cpu"))
    step = family.local_step(model, family.stream(data, config, 0, torch.device("cpu")))
    update = Update("x", family.update_kind, step.tensors, step.num_examples, row_indices=step.row_indices)
    record = update_to_record(update)
    values = sum(int(np.prod(a.shape)) for a in record.array_records["arrays"].values())
    touched = sum(int(r.numel()) for r in update.row_indices.values())
    assert values == touched * 8 + touched  # the rows' values and one index per row
    assert values < 2 * 1000 * 8 / 10
    got = record_to_update(record, "alpha")
    assert all(torch.equal(got.tensors[k], update.tensors[k]) for k in update.tensors)
    assert all(torch.equal(got.row_indices[k], update.row_indices[k]) for k in update.row_indices)


def _reply(records: dict | None = None, **meta) -> RecordDict:
    """A well-formed gradient reply, with whole records replaced and ``meta`` keys changed."""
    record = update_to_record(Update("x", UpdateKind.GRADIENTS, {"w": torch.ones(2, 2)}, 4, metrics={"loss": 1.0}))
    content = {name: record[name] for name in record}
    content["meta"] = ConfigRecord({**dict(record.config_records["meta"]), **meta})
    content.update(records or {})
    return RecordDict(content)


@pytest.mark.parametrize(
    ("records", "meta", "says"),
    [
        ({"documents": ConfigRecord({"text": "a private sentence"})}, {}, "unknown records ['documents']"),
        ({}, {"kind": "weights?"}, "unknown update kind"),
        ({}, {"num_examples": 4.5}, "num_examples must be an integer"),
        ({}, {"metric_values": ["high"]}, "metrics must be names with float values"),
        ({}, {"metric_names": ["loss", "kl"]}, "metrics must be names with float values"),
        ({"arrays": ArrayRecord({"float32": torch.ones(3)})}, {}, "needs a flat float32 array of 4 values"),
        ({"arrays": ArrayRecord({"float32": torch.ones(5)})}, {}, "needs a flat float32 array of 4 values"),
        ({}, {"layout.dtypes": ["int8"]}, "needs a flat float32 array of 0 values"),
        ({}, {"layout.groups": ["backdoor"]}, "unknown groups ['backdoor']"),
        ({}, {"layout.names": ["w", "v"]}, "1 groups, 2 names"),
    ],
)
def test_malformed_replies_are_named(records, meta, says) -> None:
    with pytest.raises(MalformedRecord, match=says.replace("[", r"\[").replace("]", r"\]").replace("?", r"\?")):
        record_to_update(_reply(records, **meta), "alpha")


def test_a_message_is_two_records_whatever_it_carries() -> None:
    """Each record and array is a Flower object, i.e. one HTTP request on the way (docs/deployment.md)."""
    update = Update(
        "x",
        UpdateKind.GRADIENTS,
        {"w": torch.ones(2, 2), "b": torch.zeros(2)},
        4,
        statistics={"bn.mean": torch.rand(2)},
        metrics={"loss": 1.0},
    )
    record = update_to_record(update)
    assert sorted(record) == ["arrays", "meta"] and list(record.array_records["arrays"]) == ["float32"]
    instruction = instruction_to_record(Instruction(0, {"w": torch.ones(2), "n": torch.tensor(3)}, {}))
    assert sorted(instruction) == ["arrays", "config"] and sorted(instruction.array_records["arrays"]) == [
        "float32",
        "int64",
    ]


def test_query_payloads_and_answers_round_trip_with_nested_blocks_as_json() -> None:
    from fedtopic_pipelines.flower.records import decode_config, encode_config

    values = {
        "train": {"model": {"n_topics": 3}, "scenarios": ["federated"]},
        "terms": ["alpha", "beta"],
        "counts": [3, 1],
        "index": 2,
        "empty": [],
        "name": "gamma",
    }
    record = encode_config(values)
    assert set(record) == {"train.json", "terms", "counts", "index", "empty.json", "name"}
    assert decode_config(record) == values
    with pytest.raises(MalformedRecord, match="'train.json' is not JSON"):
        decode_config(ConfigRecord({"train.json": "{not json"}))


def _npy(values: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, values, allow_pickle=values.dtype == object)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("array", "says"),
    [
        (
            Array(dtype="float32", shape=(4,), stype="numpy.ndarray", data=_npy(np.array(["ab", "cd", "e", "f"]))),
            "holds",
        ),
        (Array(dtype="float32", shape=(4,), stype="numpy.ndarray", data=b"not a npy file"), "cannot be read"),
        (Array(dtype="float32", shape=(4,), stype="torch.Tensor", data=b"xx"), "not a numeric numpy array"),
        (
            Array(dtype="float32", shape=(4,), stype="numpy.ndarray", data=_npy(np.array([object()] * 4))),
            "cannot be read",
        ),
        (Array(dtype="float32", shape=(10**12,), stype="numpy.ndarray", data=b""), "needs a flat float32 array of 4"),
    ],
    ids=["strings", "garbage", "other-stype", "pickled-objects", "huge-declared-shape"],
)
def test_a_crafted_array_is_a_malformed_reply_not_a_crash(array, says) -> None:
    """Any array a node can send is refused as that node's malformed reply, before it is read
    whole: a crash here would end the run for every organisation."""
    with pytest.raises(MalformedRecord, match=says):
        record_to_update(_reply({"arrays": ArrayRecord({"float32": array})}), "alpha")
