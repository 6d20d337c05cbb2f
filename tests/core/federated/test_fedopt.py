"""The weights rules' server steps against Flower 1.42's own strategies on the same arrays.

Tests may import flwr (core may not): our ``FedOpt`` and Flower's ``FedAvg`` / ``FedAdagrad`` /
``FedYogi`` / ``FedAdam`` (``flwr.serverapp.strategy``) aggregate the same clients' weights
for three rounds from the same current weights; the results agree to 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAdagrad, FedAdam, FedAvg, FedYogi
from torch import nn

from fedtopic_pipelines.core.config import AggregationConfig, ConfigError, TrainConfig
from fedtopic_pipelines.core.federated.local import client_sample, participants_per_round
from fedtopic_pipelines.core.federated.messages import Update, UpdateKind
from fedtopic_pipelines.core.federated.strategies import FedOpt
from tests.flower.local_grid import set_task_identity

FLOWER = {"fedavg": FedAvg, "fedadagrad": FedAdagrad, "fedyogi": FedYogi, "fedadam": FedAdam}


class Two(nn.Module):
    def __init__(self, rng: np.random.Generator) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.from_numpy(rng.normal(size=(4, 3))))
        self.b = nn.Parameter(torch.from_numpy(rng.normal(size=5)))


def _reply(arrays: dict[str, np.ndarray], n: int, request: Message) -> Message:
    content = RecordDict(
        {
            "arrays": ArrayRecord({k: Array(v) for k, v in arrays.items()}),
            "metrics": MetricRecord({"num-examples": n}),
        }
    )
    return Message(content, reply_to=request)


@pytest.mark.parametrize("rule", list(FLOWER))
def test_three_rounds_of_each_server_step_equal_flowers(rule: str) -> None:
    set_task_identity()
    rng = np.random.default_rng(0)
    model = ours_model = Two(rng)
    ours = FedOpt(ours_model, AggregationConfig(rule=rule), rule)
    theirs = FLOWER[rule]()  # Flower's defaults, as ours (eta, beta_1, beta_2, tau)
    current = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    request = Message(RecordDict(), dst_node_id=1, message_type="train")
    sizes = [7, 3, 12]
    for round_ in range(1, 4):
        clients = [{k: v + rng.normal(scale=0.3, size=v.shape) for k, v in current.items()} for _ in sizes]
        updates = [
            Update(f"c{i}", UpdateKind.WEIGHTS, {k: torch.from_numpy(v) for k, v in c.items()}, n)
            for i, (c, n) in enumerate(zip(clients, sizes, strict=True))
        ]
        ours.aggregate(updates, measure=False)
        if rule != "fedavg":
            theirs.current_arrays = {k: v.copy() for k, v in current.items()}  # what configure_train keeps
        arrays, _ = theirs.aggregate_train(round_, [_reply(c, n, request) for c, n in zip(clients, sizes, strict=True)])
        current = {k: arrays[k].numpy() for k in current}
        for name, value in ours.parameters().items():
            assert np.allclose(value.numpy(), current[name], rtol=0, atol=1e-6), (rule, round_, name)
        assert max(float(np.abs(value.numpy() - current[name]).max()) for name, value in ours.parameters().items()) > 0


def test_the_defaults_are_flowers_and_fedadagrad_has_no_momentum() -> None:
    model = Two(np.random.default_rng(1))
    for rule, cls in (("fedadagrad", FedAdagrad), ("fedyogi", FedYogi), ("fedadam", FedAdam)):
        ours, theirs = FedOpt(model, AggregationConfig(rule=rule), rule), cls()
        assert (ours.eta, ours.beta_1, ours.tau) == (theirs.eta, theirs.beta_1, theirs.tau)
        if rule != "fedadagrad":  # FedAdagrad reads no beta_2
            assert ours.beta_2 == theirs.beta_2
    with pytest.raises(ConfigError, match="beta_1.*FedAdagrad has no momentum"):
        FedOpt(model, AggregationConfig(rule="fedadagrad", beta_1=0.9), "fedadagrad")


def test_the_moments_survive_a_checkpoint() -> None:
    rng = np.random.default_rng(2)
    a, b = Two(rng), Two(np.random.default_rng(2))
    b.load_state_dict(a.state_dict())
    first, second = (FedOpt(m, AggregationConfig(rule="fedyogi"), "fedyogi") for m in (a, b))

    def update(seed: int) -> list[Update]:
        g = np.random.default_rng(seed)
        return [
            Update(
                c,
                UpdateKind.WEIGHTS,
                {k: v.detach() + torch.from_numpy(g.normal(size=v.shape)) for k, v in a.state_dict().items()},
                3,
            )
            for c in ("x", "y")
        ]

    first.aggregate(update(5), False)
    second.load_state_dict(first.state_dict())
    rounds = [update(6), update(7)]
    for u in rounds:
        first.aggregate(u, False)
        second.aggregate(u, False)
    assert all(torch.equal(first.parameters()[k], second.parameters()[k]) for k in first.parameters())


def test_client_sampling_draws_floor_c_k_by_seed_and_round() -> None:
    orgs = [f"o{i}" for i in range(10)]
    sample = client_sample(orgs, 0.2, seed=3)
    rounds = [sample(r) for r in range(40)]
    assert all(len(s) == 2 and len(set(s)) == 2 and set(s) <= set(orgs) for s in rounds)
    assert rounds == [client_sample(orgs, 0.2, seed=3)(r) for r in range(40)]  # a resumed server draws the same
    assert rounds != [client_sample(orgs, 0.2, seed=4)(r) for r in range(40)]
    assert len({o for s in rounds for o in s}) == 10  # every organisation gets its turns
    assert client_sample(orgs, 1.0, seed=3) is None and client_sample(["solo"], 0.2, seed=3) is None
    assert participants_per_round(10, 0.25) == 2 and participants_per_round(3, 0.5) == 1


def test_a_fraction_that_samples_no_organisation_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"client_fraction' is 0.05: with 10 organisations floor\(C K\) = 0"):
        client_sample([f"o{i}" for i in range(10)], 0.05, seed=0)
    with pytest.raises(ConfigError, match="client_fraction"):
        TrainConfig.from_params({"aggregation": {"client_fraction": 0.0}})


def test_rules_that_do_not_fit_the_family_are_refused_naming_the_parameter() -> None:
    nmf = {"family": "nmf"}
    with pytest.raises(ConfigError, match="'train.aggregation.rule' is 'fedsgd', but NMF"):
        TrainConfig.from_params({"model": nmf, "optimizer": {"name": "sgd"}, "aggregation": {"rule": "fedsgd"}})
    with pytest.raises(ConfigError, match="NMF's local optimiser is projected SGD"):
        TrainConfig.from_params({"model": nmf})
    with pytest.raises(ConfigError, match="word2vec sends sparse gradient rows"):
        TrainConfig.from_params(
            {"model": {"family": "word2vec"}, "optimizer": {"name": "sgd"}, "aggregation": {"rule": "fedavg"}}
        )
    with pytest.raises(ConfigError, match="BatchNorm's running statistics"):
        TrainConfig.from_params({"model": {"normalization": "batch"}, "aggregation": {"rule": "fedadam"}})
    with pytest.raises(ConfigError, match="local_epochs' is 3, but FedSGD"):
        TrainConfig.from_params({"aggregation": {"local_epochs": 3}})
    with pytest.raises(ConfigError, match="local_steps' is 20, but 'fedsgd' sends one mini-batch"):
        TrainConfig.from_params({"aggregation": {"local_steps": 20}})
    with pytest.raises(ConfigError, match="local update runs whole epochs: set 'train.aggregation.local_epochs'"):
        TrainConfig.from_params({"model": nmf, "optimizer": {"name": "sgd"}, "aggregation": {"local_steps": 20}})
    layer = {"model": {"normalization": "layer"}, "aggregation": {"rule": "fedavg", "local_steps": 20}}
    assert TrainConfig.from_params(layer).aggregation.local_steps == 20
    with pytest.raises(ConfigError, match="train.aggregation.rule"):
        TrainConfig.from_params({"aggregation": {"rule": "fedprox"}})
    assert TrainConfig.from_params({"model": nmf, "optimizer": {"name": "sgd"}}).rule == "fedavg"
    assert TrainConfig.from_params({}).rule == "fedsgd"
