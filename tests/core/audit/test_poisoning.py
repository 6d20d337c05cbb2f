"""The hostile organisation does what each attack says, on real updates of every family it targets.

Each check compares a hostile endpoint with an honest twin built from the same data and seed
stream (the same organisation), so their honest updates are identical and any difference is
the attack's.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pytest
import torch

from fedtopic_pipelines.core.audit.poisoning import ATTACKS, CLAIMED, Hostile, SilentOrganisation, scaled
from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.families import get_family
from fedtopic_pipelines.core.federated.engine import InProcessEngine
from fedtopic_pipelines.core.federated.family import ServerPreparation
from fedtopic_pipelines.core.federated.messages import EVALUATE, Instruction, Update, UpdateKind
from fedtopic_pipelines.core.federation import run_federation, strategy_of
from fedtopic_pipelines.core.site import MemoryEndpoint
from tests.core.federated.test_family_contract import CASES

FAMILIES = ("prodlda", "nmf", "word2vec", "pctd")  # one of each update kind: gradients, weights, rows, statistics


def _config(family: str, **changes: Any) -> TrainConfig:
    train = dict(CASES[family].train)
    if family == "prodlda":  # BatchNorm: its update carries auxiliary statistics too
        train["model"] = {**train["model"], "normalization": "batch"}
    return TrainConfig.from_params({**train, **changes})


def _vocabulary(family: str, data: dict) -> pd.DataFrame:
    table = pd.DataFrame({"term": [f"w{j}" for j in range(CASES[family].vocab_size)]})
    frequencies = getattr(next(iter(data.values())), "frequencies", None)
    if frequencies is not None:
        table["frequency"] = frequencies
    return table


class Twins:
    """An organisation's honest endpoint and a hostile one over the same data and stream, prepared,
    and the server's strategy that instructs them."""

    def __init__(self, family: str, attack: str, changes: dict[str, Any] | None = None, **hostile: Any) -> None:
        data = CASES[family].data()
        config = _config(family, **(changes or {}))
        vocabulary = _vocabulary(family, data)
        org, matrix = next(iter(data.items()))
        self.honest = MemoryEndpoint(org, matrix)
        self.hostile = Hostile(MemoryEndpoint(org, matrix), attack, **hostile)
        payload = {"train": config.to_params(), "terms": vocabulary["term"].tolist(), "index": 0}
        self.prepared = self.honest.query("prepare", payload), self.hostile.query("prepare", payload)
        fam = get_family(config.model.family)
        model = fam.create_model(len(vocabulary), config, torch.device("cpu"))
        if isinstance(fam, ServerPreparation):
            fam.prepare_server_model(model, vocabulary, {org: self.prepared[0]["train_rows"]}, config)
        self.strategy = strategy_of(fam, model, config)

    def round(self, round_: int) -> tuple[Instruction, Update, Update]:
        instruction = self.strategy.instruction(round_)
        return instruction, self.honest.handle(instruction), self.hostile.handle(instruction)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.allclose(a.double(), b.double(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("attack", ["scale", "sign_flip"])
def test_scale_and_sign_flip_multiply_every_tensor_the_update_carries(family: str, attack: str) -> None:
    twins = Twins(family, attack, factor=1000.0)
    instruction, honest, hostile = twins.round(0)
    factor = 1000.0 if attack == "scale" else -1000.0
    assert hostile.kind == honest.kind and hostile.num_examples == honest.num_examples
    assert hostile.tensors.keys() == honest.tensors.keys() and hostile.metrics == honest.metrics
    assert any(bool(t.abs().sum() > 0) for t in honest.tensors.values())  # a zero update would prove nothing
    for name, value in honest.tensors.items():
        if honest.kind == UpdateKind.WEIGHTS:  # model replacement: the change from the broadcast, scaled
            base = instruction.state[name].to(value.dtype)
            assert _close(hostile.tensors[name], base + (value - base) * factor), name
        else:
            assert _close(hostile.tensors[name], value * factor), name
    for name, index in honest.row_indices.items():  # the rows are kept: only their values change
        assert torch.equal(hostile.row_indices[name], index)
    if family == "prodlda":
        assert honest.statistics, "BatchNorm's statistics travel with the update"
    for name, value in honest.statistics.items():
        assert _close(hostile.statistics[name], value * factor), name
    assert twins.hostile.attacked == 1


def test_capacity_declares_a_billion_documents_and_claims_them_in_every_update() -> None:
    twins = Twins("nmf", "capacity")
    honest_reply, hostile_reply = twins.prepared
    assert honest_reply["train_rows"] < 100 and hostile_reply["train_rows"] == CLAIMED == 10**9
    assert {k: v for k, v in hostile_reply.items() if k != "train_rows"} == {
        k: v for k, v in honest_reply.items() if k != "train_rows"
    }
    for round_ in range(2):
        _, honest, hostile = twins.round(round_)
        assert hostile.num_examples == CLAIMED and honest.num_examples < 100
        assert all(torch.equal(hostile.tensors[k], v) for k, v in honest.tensors.items())


def test_replay_resends_its_first_update_byte_for_byte() -> None:
    twins = Twins("prodlda", "replay")
    _, first, sent = twins.round(0)
    assert all(torch.equal(sent.tensors[k], v) for k, v in first.tensors.items())  # the first round is honest
    for round_ in (1, 2):
        _, honest, sent = twins.round(round_)
        assert not all(torch.equal(honest.tensors[k], v) for k, v in first.tensors.items())  # a new batch
        assert all(torch.equal(sent.tensors[k], v) for k, v in first.tensors.items())
        assert all(torch.equal(sent.statistics[k], v) for k, v in first.statistics.items())
    assert twins.hostile.attacked == 2


def test_validation_passes_through_and_none_changes_nothing() -> None:
    twins = Twins("prodlda", "none")
    _, honest, sent = twins.round(0)
    assert all(torch.equal(sent.tensors[k], v) for k, v in honest.tensors.items()) and twins.hostile.attacked == 0
    claiming = Twins("prodlda", "capacity", {"validation_fraction": 0.2})
    evaluate = claiming.strategy.evaluation_instruction(0)
    assert evaluate.config["action"] == EVALUATE
    honest, sent = claiming.honest.handle(evaluate), claiming.hostile.handle(evaluate)
    assert sent.num_examples == honest.num_examples > 0 and sent.metrics == honest.metrics
    assert claiming.hostile.attacked == 0


def test_a_silent_organisation_prepares_then_fails_every_round_and_the_others_train() -> None:
    data = CASES["prodlda"].data()
    config = _config("prodlda", max_steps=3)
    silent = Hostile(MemoryEndpoint("c", data["c"]), "silent")
    with pytest.raises(SilentOrganisation):
        silent.handle(Instruction(0, {}, {}))
    endpoints = [MemoryEndpoint("a", data["a"]), MemoryEndpoint("b", data["b"]), silent]
    result = run_federation(
        InProcessEngine(endpoints), ["a", "b", "c"], config, vocabulary=_vocabulary("prodlda", data), progress=False
    )
    history = result.model.history
    assert result.prepared["c"]["train_rows"] == data["c"].shape[0]  # it joined honestly
    assert [sorted(r.failed) for r in history] == [["c"]] * 3 and all(not r.rejected for r in history)
    assert all(sorted(r.client_loss) == ["a", "b"] and math.isfinite(r.loss) for r in history)


def test_scaled_leaves_a_weights_update_without_its_reference_as_plain_multiplication() -> None:
    update = Update("a", UpdateKind.WEIGHTS, {"w": torch.tensor([1.0, 2.0])}, 3)
    assert torch.equal(scaled(update, 2.0).tensors["w"], torch.tensor([2.0, 4.0]))
    around = scaled(update, 3.0, {"w": torch.tensor([1.0, 1.0])})
    assert torch.equal(around.tensors["w"], torch.tensor([1.0, 4.0])) and around.num_examples == 3


def test_unknown_attacks_and_bad_claims_are_refused() -> None:
    endpoint = MemoryEndpoint("a", CASES["prodlda"].data()["a"])
    assert set(ATTACKS) == {"none", "silent", "scale", "sign_flip", "capacity", "replay"}
    with pytest.raises(ValueError, match="unknown attack"):
        Hostile(endpoint, "flood")
    with pytest.raises(ValueError, match="positive integer"):
        Hostile(endpoint, "capacity", claimed=1e9)  # type: ignore[arg-type]
