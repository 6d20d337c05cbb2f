"""Secure aggregation with Flower's own SecAgg+ (``privacy.secure_aggregation``).

On the in-process grid (Flower's real ClientApp, ``secaggplus_mod``, ``SecAggPlusWorkflow``
and records): what the server receives in a secure round holds no organisation's update, the
aggregate is the example-weighted mean within the quantisation bound, a node that drops out
mid-round is left out of the sum, and N secure rounds train the plain run's model within the
bound. On loopback (real SuperLink, SuperNodes and executors, TLS): the same within the bound, in
tests/flower/test_deployment.py (its federation, started once for all its tests).
"""

from __future__ import annotations

import copy
import json
import logging
import math

import numpy as np
import pytest
import torch
from flwr.common import bytes_to_ndarray
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key

from fedtopic_pipelines.flower import engine as engine_module
from fedtopic_pipelines.flower import secagg
from fedtopic_pipelines.flower.client_app import app as client_app
from fedtopic_pipelines.flower.federation import run_flower_federation
from fedtopic_pipelines.flower.secagg import SECURE_AGGREGATE, SecAggSettings, floor_variances, quantisation_bound
from tests.flower.local_grid import LocalGrid
from tests.flower.test_federation import TRAIN, job, node_configs, write_sites

logger = logging.getLogger(__name__)
SECURE = {"secure_aggregation": True}
SETTINGS = SecAggSettings()  # privacy.secagg's defaults: Flower 1.42's


class TransportGrid(LocalGrid):
    """The in-process grid, with each message copied as a transport would: SecAgg+'s setup stage sends
    one ConfigRecord to every node, and ``secaggplus_mod`` pops its stage out of what it receives."""

    def push_messages(self, messages):
        return super().push_messages([copy.deepcopy(m) for m in messages])


def secure_train(train: dict, **overrides) -> dict:
    return {**train, "engine": "flower", "privacy": SECURE, **overrides}


def _vector(update) -> np.ndarray:
    return torch.cat([t.double().reshape(-1) for t in (*update.tensors.values(), *update.statistics.values())]).numpy()


def _numbers(value) -> list[float]:
    """Every number a record value holds (JSON strings opened, bytes read as arrays where they are)."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, list):
        return [x for v in value for x in _numbers(v)]
    if isinstance(value, str) and value[:1] in ("[", "{"):
        parsed = json.loads(value)
        return _numbers(list(parsed.values()) if isinstance(parsed, dict) else parsed)
    if isinstance(value, dict):
        return _numbers(list(value.values()))
    return []


def test_the_server_receives_no_organisations_update_only_their_weighted_mean(
    tiny_raw_tables, tmp_path, monkeypatch
) -> None:
    sent_by_nodes: dict[int, list] = {}  # round -> (organisation, update) as each node computed it
    aggregates: dict[int, object] = {}
    received = []  # every reply the ServerApp received during training

    encode = secagg.update_to_fitres

    def recording_encode(update, reduce, context=None):
        sent_by_nodes.setdefault(current_round[0], []).append((context.node_config["organisation"], update))
        return encode(update, reduce, context)

    secure_round = engine_module.secure_round
    current_round = [0]

    def recording_round(grid, nodes, instruction, *args):
        current_round[0] = instruction.round
        replies, counts = secure_round(grid, nodes, instruction, *args)
        aggregates[instruction.round] = replies
        return replies, counts

    monkeypatch.setattr(secagg, "update_to_fitres", recording_encode)
    monkeypatch.setattr(engine_module, "secure_round", recording_round)
    paths = write_sites(tiny_raw_tables, tmp_path)

    def on_send(node, message, reply) -> None:
        if message.metadata.message_type == "train":
            received.append(reply)

    grid = TransportGrid(client_app, node_configs(paths, tmp_path), on_send=on_send)
    train = secure_train(TRAIN, max_steps=3, validation_fraction=0.25, validation_every=2)
    result, engine = run_flower_federation(grid, job(list(paths), train))

    assert [m["sent"] for m in engine.messages if m["secure"]] == [4 * 3] * 3  # 4 SecAgg+ stages x 3 nodes
    assert len(received) == 4 * 3 * 3
    assert all(set(r.client_loss) == {SECURE_AGGREGATE} for r in result.model.history)
    assert result.model.history[1].validation_loss is not None  # validation stays a plain round
    for round_, replies in aggregates.items():
        (aggregate,) = replies.updates
        clients = sent_by_nodes[round_]
        assert sorted(replies.contributors) == sorted(paths) and not replies.failures
        assert aggregate.client_id == SECURE_AGGREGATE
        assert aggregate.num_examples == sum(u.num_examples for _, u in clients)
        n = np.array([u.num_examples for _, u in clients], dtype=float)
        # the weights as SecAgg+ quantises them (q_ratio / Q): within 0.5 / Q * max_weight of n
        w = np.round(n / SETTINGS.max_weight * SETTINGS.quantization_range) / SETTINGS.quantization_range
        exact = sum(wi * _vector(u) for wi, (_, u) in zip(w, clients, strict=True)) / w.sum()
        bound = quantisation_bound(SETTINGS, len(clients), n.sum(), "mean")
        error = np.abs(_vector(aggregate) - exact).max()
        logger.info("round %d: max |secure - exact weighted mean| %.3g, bound %.3g", round_, error, bound)
        assert error <= bound, (round_, error, bound)
        loss = sum(wi * u.metrics["loss"] for wi, (_, u) in zip(n, clients, strict=True)) / n.sum()
        assert aggregate.metrics["loss"] == pytest.approx(loss, abs=bound * secagg.METRIC_SCALE)

    # Nothing the server received is, or is near, one organisation's update
    updates = [_vector(u) for clients in sent_by_nodes.values() for _, u in clients]
    values = {float(x) for v in updates for x in v if x != 0.0}
    masked_vectors = 0
    for reply in received:
        assert not reply.has_error()
        assert all(len(record) == 0 for record in reply.content.array_records.values())  # the mod emptied them
        for name, record in reply.content.config_records.items():
            for key, value in record.items():
                if name == RECORD_KEY_CONFIGS and key == Key.MASKED_PARAMETERS:
                    masked_vectors += 1
                    _, masked = (bytes_to_ndarray(b).astype(float) for b in value)  # SecAgg+'s weight, ours
                    assert masked.max() > 2**20  # uniform modulo 2**32, not quantised values in [0, 2**22]
                    for vector in updates:
                        v = vector[: masked.size]
                        assert not np.allclose(masked[: v.size], v, atol=1e-3)
                        assert abs(np.corrcoef(masked[: v.size], v)[0, 1]) < 0.5
                else:
                    assert not values & set(_numbers(value)), (name, key)
    assert masked_vectors == 3 * 3


def test_a_node_that_drops_out_mid_round_is_left_out_of_the_sum(tiny_raw_tables, tmp_path, monkeypatch) -> None:
    """SecAgg+ with 3 shares and threshold 2 survives one node lost before it sent its masked vector."""
    paths = write_sites(tiny_raw_tables, tmp_path)
    configs = node_configs(paths, tmp_path)
    gamma = next(node for node, cfg in configs.items() if cfg["organisation"] == "gamma")

    def drop(node, message) -> bool:
        stage = message.content.config_records.get(RECORD_KEY_CONFIGS, {}).get(Key.STAGE)
        return node == gamma and stage == "collect_masked_vectors"

    train = secure_train(TRAIN, max_steps=2, flower={"round_timeout_s": 0.5})
    result, _ = run_flower_federation(TransportGrid(client_app, configs, drop=drop), job(list(paths), train))
    for record in result.model.history:
        assert set(record.failed) == {"gamma"} and "collect masked vectors" in record.failed["gamma"]
        assert record.num_examples == 16  # alpha's and beta's batches of 8


def test_secure_rounds_train_the_plain_runs_model_within_the_quantisation_bound(tiny_raw_tables, tmp_path) -> None:
    """SGD, so that a coordinate's error adds up over the rounds: per round the aggregate gradient is
    off by at most q = k (2 c / Q) max_weight / n (k = 3 organisations, n = 24 documents), the
    weights by at most lr q, the BatchNorm running estimates by at most q (momentum < 1)."""
    rounds, lr = 4, 0.1
    train = {**TRAIN, "max_steps": rounds, "optimizer": {"name": "sgd", "lr": lr}}
    paths = write_sites(tiny_raw_tables, tmp_path)
    plain, _ = run_flower_federation(
        TransportGrid(client_app, node_configs(paths, tmp_path / "plain")), job(list(paths), train)
    )
    secure, engine = run_flower_federation(
        TransportGrid(client_app, node_configs(paths, tmp_path / "secure")), job(list(paths), secure_train(train))
    )
    assert len(engine.messages) == rounds and all(m["secure"] for m in engine.messages)
    assert_within_quantisation_bound(secure.model.state, plain.model.state, rounds, lr)
    assert all(math.isfinite(r.loss) for r in secure.model.history)


def assert_within_quantisation_bound(secure: dict, plain: dict, rounds: int, lr: float) -> dict[str, float]:
    q = quantisation_bound(SETTINGS, 3, 24, "mean")
    buffers = {k for k in plain if "running" in k}
    worst = {
        group: max(float((secure[k] - plain[k]).abs().max()) for k in names)
        for group, names in (("weights", set(plain) - buffers), ("running", buffers))
    }
    assert worst["weights"] <= 2 * rounds * lr * q, (worst, q)  # 2: the gradients are taken at nearby weights
    assert worst["running"] <= 2 * rounds * q, (worst, q)
    assert worst["weights"] > 0  # it did go through the quantiser
    return worst


def test_with_dp_noise_at_the_clients_the_secure_mean_is_unweighted(tiny_raw_tables, tmp_path) -> None:
    """Client-level DP calibrates its noise to the plain mean of the clipped updates: SecAgg+ then
    weighs every organisation the same (weight 1), and the seeded noise makes the runs comparable."""
    rounds, lr = 3, 0.1
    model = {**TRAIN["model"], "normalization": "layer"}  # DP refuses BatchNorm's clear statistics
    dp = {"dp": {"level": "client", "noise_multiplier": 0.5, "clip": 1.0}}
    train = {**TRAIN, "model": model, "max_steps": rounds, "optimizer": {"name": "sgd", "lr": lr}}
    paths = write_sites(tiny_raw_tables, tmp_path)
    plain, _ = run_flower_federation(
        TransportGrid(client_app, node_configs(paths, tmp_path / "plain")),
        job(list(paths), {**train, "privacy": dp}),
    )
    secure, _ = run_flower_federation(
        TransportGrid(client_app, node_configs(paths, tmp_path / "secure")),
        job(list(paths), secure_train(train, privacy={**dp, **SECURE})),
    )
    q = quantisation_bound(SETTINGS, 3, 3, "unweighted")  # weights 1 each: k (2 c / Q) max_weight / k
    worst = max(float((secure.model.state[k] - plain.model.state[k]).abs().max()) for k in plain.model.state)
    assert 0 < worst <= 2 * rounds * lr * q, (worst, q)


def test_a_variance_that_rounding_pushed_to_zero_or_below_is_raised_to_the_bound_and_no_other_value_moves() -> None:
    """A near-zero BatchNorm variance read back at or below 0 would fail the server's check and void
    the round; within the quantisation bound it is rounding, and the bound is as close as the sum tells."""
    q = 1e-4
    statistics = {
        "encoder_bn.var": torch.tensor([-0.5 * q, 0.0, 0.2, -3 * q], dtype=torch.float64),
        "encoder_bn.mean": torch.tensor([-0.5 * q, -1.0], dtype=torch.float64),
    }
    assert floor_variances(statistics, q) == 2
    assert statistics["encoder_bn.var"].tolist() == [q, q, 0.2, -3 * q]  # -3q is no rounding: the check rejects it
    assert statistics["encoder_bn.mean"].tolist() == [-0.5 * q, -1.0]
