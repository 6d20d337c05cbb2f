"""Client-level DP and robust rules through the engine (issue 19, docs/privacy.md): clipping and
noise where the parameters say, the plain run recovered without noise, the privacy spent recorded,
the same model on the Flower grid, and a -1000x organisation logged and out-voted."""

from __future__ import annotations

import dataclasses
import logging
import math

import numpy as np
import pandas as pd
import pytest
import torch

from fedtopic_pipelines.core.config import ConfigError, TrainConfig
from fedtopic_pipelines.core.federated.engine import InProcessEngine
from fedtopic_pipelines.core.federated.messages import Update, UpdateKind
from fedtopic_pipelines.core.federated.privacy import Reducer
from fedtopic_pipelines.core.federation import run_federation
from fedtopic_pipelines.core.privacy.accountant import gaussian_privacy
from fedtopic_pipelines.core.privacy.defences import DPPlan, clip, flat_norm, noise_generator, privatize
from fedtopic_pipelines.core.site import MemoryEndpoint
from fedtopic_pipelines.parameters import check_run, validate_parameters, with_privacy
from tests.conftest import poisson_matrices

VOCAB = 30


def _config(privacy: dict | None = None, **changes) -> TrainConfig:
    base = {
        "model": {"family": "prodlda", "n_topics": 3, "hidden_sizes": [8], "normalization": "layer"},
        "optimizer": {"name": "adam", "lr": 0.01},
        "batch_size": 8,
        "max_steps": 6,
        "seed": 5,
        "device": "cpu",
    }
    config = TrainConfig.from_params({**base, **changes})
    return with_privacy(config, privacy) if privacy is not None else config


def _vocabulary() -> pd.DataFrame:
    return pd.DataFrame({"term": [f"w{j}" for j in range(VOCAB)]})


def _run(config: TrainConfig, endpoints=None, sizes=(16, 16, 16)):
    data = dict(zip("abc", poisson_matrices(sizes, VOCAB), strict=False))
    endpoints = endpoints or [MemoryEndpoint(o, d) for o, d in data.items()]
    return run_federation(InProcessEngine(endpoints), list(data), config, vocabulary=_vocabulary(), progress=False)


def test_clip_bounds_the_whole_update_and_keeps_a_small_one() -> None:
    big = {"a": torch.full((3,), 4.0), "b": torch.full((2, 2), 3.0)}
    clipped, norm = clip(big, 2.0)
    assert norm == pytest.approx(math.sqrt(3 * 16 + 4 * 9))
    assert flat_norm(clipped) == pytest.approx(2.0)
    small, _ = clip({"a": torch.tensor([0.1, 0.2])}, 2.0)
    assert torch.equal(small["a"], torch.tensor([0.1, 0.2]))


def test_privatize_noise_share_has_the_planned_std_and_is_seeded() -> None:
    zeros = {"w": torch.zeros(20000, dtype=torch.float64)}
    noisy = privatize(zeros, None, 1.0, 0.5, noise_generator(1, "a", 3))
    again = privatize(zeros, None, 1.0, 0.5, noise_generator(1, "a", 3))
    other = privatize(zeros, None, 1.0, 0.5, noise_generator(1, "b", 3))
    assert torch.equal(noisy["w"], again["w"])
    assert not torch.equal(noisy["w"], other["w"])
    assert float(noisy["w"].std()) == pytest.approx(0.5, rel=0.03)


def test_privatize_weights_clips_their_difference_from_the_broadcast() -> None:
    reference = {"w": torch.ones(4)}
    sent = privatize({"w": torch.tensor([1.0, 1.0, 4.0, 5.0])}, reference, 1.0, 0.0, noise_generator(0, "a", 0))
    assert flat_norm({"w": sent["w"] - reference["w"]}) == pytest.approx(1.0)
    assert torch.allclose(sent["w"], torch.tensor([1.0, 1.0, 1.6, 1.8]))


def test_server_side_dp_clips_each_update_and_averages_without_weights() -> None:
    plan = DPPlan(
        sigma=0.0, clip=1.0, delta=1e-5, sampling=1.0, per_round=2, rounds=10, noise_at="server", accountant="rdp"
    )
    from fedtopic_pipelines.core.config import PrivacyConfig

    reducer = Reducer(PrivacyConfig(), plan, seed=0)
    updates = [
        Update("a", UpdateKind.GRADIENTS, {"g": torch.tensor([3.0, 4.0])}, 100),
        Update("b", UpdateKind.GRADIENTS, {"g": torch.tensor([0.0, 0.5])}, 1),
    ]
    mean, recorded = reducer(updates, None, 0)
    assert torch.allclose(mean["g"], torch.tensor([0.3, (0.8 + 0.5) / 2]))
    assert recorded["clipped"] == 1.0


def test_dp_without_noise_and_a_clip_nobody_reaches_is_the_plain_run() -> None:
    """Equal organisations weigh the same either way: the DP path (clip, uniform mean, no noise)
    gives the plain model bit for bit; only the loss terms are not sent."""
    plain = _run(_config())
    dp = _run(_config({"dp": {"level": "client", "clip": 1e9, "noise_multiplier": 0.0}}))
    for name, value in plain.model.state.items():
        assert torch.equal(value, dp.model.state[name]), name
    assert all(math.isnan(r.loss) for r in dp.model.history)
    assert all(not math.isnan(r.loss) for r in plain.model.history)


@pytest.mark.parametrize("noise_at", ["clients", "server"])
def test_dp_noise_moves_the_model_is_seeded_and_records_epsilon(noise_at: str) -> None:
    privacy = {"dp": {"level": "client", "clip": 0.5, "noise_multiplier": 1.0, "noise_at": noise_at}}
    first, second = _run(_config(privacy)), _run(_config(privacy))
    plain = _run(_config())
    for name, value in first.model.state.items():
        assert torch.equal(value, second.model.state[name]), name
    assert any(not torch.equal(v, plain.model.state[k]) for k, v in first.model.state.items())
    last = first.model.history[-1].metrics
    spent = gaussian_privacy(1.0, 6, 1e-5)
    assert last["epsilon_rdp"] == pytest.approx(spent.epsilon_rdp)
    assert last["epsilon_pld"] == pytest.approx(spent.epsilon_pld)
    assert last["sigma"] == 1.0


def test_target_epsilon_picks_sigma_with_client_sampling() -> None:
    privacy = {"dp": {"level": "client", "noise_multiplier": None, "target_epsilon": 20.0}}
    result = _run(
        _config(privacy, aggregation={"rule": "fedavg", "client_fraction": 0.67}, optimizer={"name": "sgd", "lr": 0.1})
    )
    last = result.model.history[-1].metrics
    assert last["epsilon_rdp"] == pytest.approx(20.0, rel=1e-3)
    assert 0 < last["sigma"] < 5


class Scaled(MemoryEndpoint):
    """An organisation whose every update is its honest one times ``factor`` (poisoned, but finite)."""

    factor = -1000.0

    def handle(self, instruction):
        update = super().handle(instruction)
        return dataclasses.replace(update, tensors={k: v * self.factor for k, v in update.tensors.items()})


class Replayed(MemoryEndpoint):
    """An organisation that answers every round from the second on with its update of the round before."""

    last = None

    def handle(self, instruction):
        update = super().handle(instruction)
        sent, self.last = (self.last or update), update
        return sent


@pytest.mark.parametrize("factor", [1000.0, -1000.0])
def test_the_default_leaves_a_1000x_organisation_out_and_a_robust_rule_outvotes_it(factor, caplog) -> None:
    """One of five organisations sends its gradient x1000 or x-1000. Under the default (the mean
    after the screen) it is left out of every round by name, and the honest organisations' loss is
    the one they reach without it; with the screen off the mean takes it in and the loss rises;
    median, trimmed mean and Krum keep a sign flip near the honest federation's."""
    from fedtopic_pipelines.core.families import get_family

    sizes = (16, 16, 16, 16, 16)
    data = dict(zip("abcde", poisson_matrices(sizes, VOCAB), strict=False))
    honest_data = [d for o, d in data.items() if o != "c"]
    family = get_family("prodlda")

    def run(privacy=None, bad=True) -> tuple[float, list]:
        chosen = [Scaled(o, d) if o == "c" else MemoryEndpoint(o, d) for o, d in data.items() if bad or o != "c"]
        for endpoint in chosen:
            endpoint.factor = factor
        config = _config(privacy, max_steps=30)
        result = run_federation(
            InProcessEngine(chosen), [e.name for e in chosen], config, vocabulary=_vocabulary(), progress=False
        )
        model = family.create_model(VOCAB, config, torch.device("cpu"))
        model.load_state_dict(result.model.state)
        return float(np.mean([family.validation_loss(model, d, 0)[0] for d in honest_data])), result.model.history

    honest, _ = run(bad=False)
    with caplog.at_level(logging.WARNING, logger="fedtopic_pipelines.core.federated.privacy"):
        defended, history = run()
    assert any("'c'" in r.getMessage() and "left out" in r.getMessage() for r in caplog.records)
    assert all(set(r.rejected) == {"c"} and "privacy.outlier_factor" in r.rejected["c"] for r in history)
    assert defended == pytest.approx(honest, rel=0.05)
    poisoned, _ = run({"outlier_factor": 0.0})
    assert poisoned > honest + 1.0
    if factor > 0:  # the rules' own test below is the sign flip's, as before the screen
        return
    robust = {rule: run({"robust_rule": rule, "outlier_factor": 0.0})[0] for rule in ("median", "trimmed_mean", "krum")}
    for rule, loss in robust.items():
        assert loss < honest + (poisoned - honest) / 4, rule


def test_a_replayed_update_is_refused_as_of_another_round() -> None:
    data = dict(zip("abc", poisson_matrices((16, 16, 16), VOCAB), strict=False))
    endpoints = [Replayed(o, d) if o == "b" else MemoryEndpoint(o, d) for o, d in data.items()]
    result = _run(_config(max_steps=4), endpoints)
    rejected = [r.rejected for r in result.model.history]
    assert rejected[0] == {}
    assert all(set(r) == {"b"} and "answers round" in r["b"] and "replay" in r["b"] for r in rejected[1:])


def _check(params: dict, pipelines=None) -> None:
    check_run(validate_parameters(params), pipelines)


def test_impossible_combinations_are_refused_before_any_node_runs() -> None:
    with pytest.raises(ConfigError, match="secure aggregation shows the server only the sum"):
        _check({"train": {}, "privacy": {"secure_aggregation": True, "robust_rule": "median"}})
    with pytest.raises(ConfigError, match="privacy.dp.noise_multiplier"):
        _check({"train": {}, "privacy": {"dp": {"level": "client"}}})
    dp = {"dp": {"level": "client", "noise_multiplier": 1.0}}
    with pytest.raises(ConfigError, match="word2vec"):
        _check({"train": {}, "word2vec": {}, "privacy": dp}, ["word2vec"])
    layer = {"model": {"normalization": "layer"}}
    _check({"train": layer, "word2vec": {}, "privacy": dp}, ["__default__"])  # word2vec's block is not trained
    with pytest.raises(ConfigError, match="PC-TD's parties add their own"):
        _check({"pctd": {}, "privacy": dp}, ["pctd"])
    with pytest.raises(ConfigError, match="BatchNorm"):
        _check({"train": {"model": {"normalization": "batch"}}, "privacy": dp})
    with pytest.raises(ConfigError, match="privacy.dp.level"):
        _check({"train": {}, "privacy": {"dp": {"level": "record", "noise_multiplier": 1.0}}})
    with pytest.raises(ConfigError, match="train.engine: flower"):
        _check({"train": {}, "privacy": {"secure_aggregation": True}})
    with pytest.raises(ConfigError, match="privacy.robust_rule"):
        _check({"train": {}, "privacy": {"robust_rule": "mode"}})
