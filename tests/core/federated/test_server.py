"""The family-neutral server: every bad update is rejected with a logged reason and the run goes on."""

from __future__ import annotations

import dataclasses
import logging
from typing import ClassVar

import numpy as np
import pytest
import torch

from fedtopic_pipelines.core import persist
from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.families import get_family
from fedtopic_pipelines.core.federated.client import FamilyClient
from fedtopic_pipelines.core.federated.engine import InProcessEngine
from fedtopic_pipelines.core.federated.messages import Instruction, Update, UpdateKind
from fedtopic_pipelines.core.federated.server import (
    FederatedServer,
    NoUsableUpdates,
    RoundRecord,
    StoppingRule,
    diverged_hint,
    round_postfix,
)
from tests.conftest import poisson_matrices

V = 50
CPU = torch.device("cpu")
FAMILY = get_family("prodlda")
CONFIG = TrainConfig.from_params(
    {"model": {"n_topics": 3, "hidden_sizes": [8]}, "batch_size": 8, "max_steps": 1, "seed": 0, "device": "cpu"}
)
CAPACITY = {"good": 9, "other": 9, "poisoned": 9}


def _client(cid: str, seed: int, validation=None) -> FamilyClient:
    matrix = poisson_matrices((20,), V, seed=seed)[0]
    model = FAMILY.create_model(V, CONFIG, CPU)
    return FamilyClient(cid, FAMILY, model, FAMILY.stream(matrix, CONFIG, seed, CPU), validation)


def _server(rounds: int = 1, tolerance: float = 0.0, capacity=CAPACITY):
    model = FAMILY.create_model(V, CONFIG, CPU)
    server = FederatedServer(FAMILY.strategy(model, CONFIG), StoppingRule(rounds, tolerance), capacity=capacity)
    return server, model


class Poisoned:
    """A client that answers like a real one, then changes its update."""

    def __init__(self, inner: FamilyClient, corrupt, client_id: str = "poisoned") -> None:
        self.client_id = self.name = client_id
        self.inner = inner
        self.corrupt = corrupt

    def handle(self, instruction: Instruction) -> Update:
        update = self.inner.handle(instruction)
        return self.corrupt(dataclasses.replace(update, client_id=self.client_id))


def _tensor(name: str, change):
    return lambda u: dataclasses.replace(u, tensors={**u.tensors, name: change(u.tensors[name])})


def _statistic(name: str, change):
    return lambda u: dataclasses.replace(u, statistics={**u.statistics, name: change(u.statistics[name])})


PROBES = {
    "nan": (_tensor("beta", lambda t: t * float("nan")), "contains NaN or Inf"),
    "renamed": (lambda u: dataclasses.replace(u, tensors={**u.tensors, "bogus": u.tensors["beta"]}), "unknown"),
    "reshaped": (_tensor("beta", lambda t: t[:, :-1]), "has shape"),
    "float16": (_tensor("beta", lambda t: t.half()), "dtype torch.float16"),
    "complex64": (_tensor("beta", lambda t: t.to(torch.complex64)), "dtype torch.complex64"),
    "int64": (_tensor("beta", lambda t: t.to(torch.int64)), "dtype torch.int64"),
    "bool": (_tensor("beta", lambda t: t > 0), "dtype torch.bool"),
    "numpy": (_tensor("beta", lambda t: t.numpy()), "not a tensor"),
    "num_examples_true": (lambda u: dataclasses.replace(u, num_examples=True), "must be an integer"),
    "num_examples_huge": (lambda u: dataclasses.replace(u, num_examples=10**9), "exceeds the 9"),
    "mean_1e30": (_statistic("mu_bn.mean", lambda t: torch.full_like(t, 1e30)), "exceeds 1e+06 in magnitude"),
    "variance_0": (_statistic("beta_bn.var", torch.zeros_like), "variance <= 0"),
    "negative_variance": (_statistic("beta_bn.var", lambda t: -t - 1), "variance <= 0"),
    "string_metric": (lambda u: dataclasses.replace(u, metrics={**u.metrics, "loss": "low"}), "metric 'loss' is a str"),
    "wrong_kind": (lambda u: dataclasses.replace(u, kind=UpdateKind.WEIGHTS), "expects 'gradients'"),
    "sparse_rows_on_dense": (
        lambda u: dataclasses.replace(u, row_indices={"beta": torch.tensor([0])}),
        "only for 'sparse_rows'",
    ),
}


@pytest.mark.parametrize("probe", list(PROBES))
def test_a_bad_update_is_rejected_logged_and_never_touches_the_model(probe, caplog) -> None:
    corrupt, reason = PROBES[probe]
    clean, clean_model = _server(rounds=3)
    clean.run(InProcessEngine([_client("good", 1)]), progress=False)
    mixed, mixed_model = _server(rounds=3)
    history = mixed.run(InProcessEngine([_client("good", 1), Poisoned(_client("bad", 2), corrupt)]), progress=False)
    assert len(history) == 3  # the run went on
    assert all(reason in record.rejected["poisoned"] for record in history), history[0].rejected
    assert any("rejected" in m and "poisoned" in m for m in caplog.messages)
    assert all(torch.equal(clean_model.state_dict()[k], mixed_model.state_dict()[k]) for k in clean_model.state_dict())


class Duplicating(InProcessEngine):
    """An engine that delivers one organisation's update twice (what a faulty transport could do)."""

    def broadcast(self, instruction):
        replies = super().broadcast(instruction)
        return dataclasses.replace(replies, updates=[*replies.updates, replies.updates[0]])


def test_the_same_client_twice_in_a_round_is_left_out_entirely() -> None:
    clean, clean_model = _server(rounds=2)
    clean.run(InProcessEngine([_client("other", 3)]), progress=False)
    server, model = _server(rounds=2)
    history = server.run(Duplicating([_client("good", 1), _client("other", 3)]), progress=False)
    assert all("2 updates in one round" in r.rejected["good"] for r in history)
    assert all(torch.equal(clean_model.state_dict()[k], model.state_dict()[k]) for k in model.state_dict())


def test_an_update_is_attributed_to_the_organisation_that_sent_it_not_the_name_it_claims() -> None:
    server, _ = _server(rounds=1)
    impostor = Poisoned(_client("x", 2), lambda u: u, client_id="good")
    impostor.name = "stranger"  # its updates claim to be 'good'; the engine knows who sent them
    record = server.run(InProcessEngine([_client("good", 1), impostor]), progress=False)[0]
    assert "good" in record.client_loss and "not a client of this federation" in record.rejected["stranger"]


def test_metrics_the_family_does_not_declare_are_rejected() -> None:
    server, _ = _server(rounds=1)
    extra = Poisoned(_client("bad", 2), lambda u: dataclasses.replace(u, metrics={**u.metrics, "scenario": 1.0}))
    record = server.run(InProcessEngine([_client("good", 1), extra]), progress=False)[0]
    assert "metric 'scenario' is not one of" in record.rejected["poisoned"]


def test_an_unknown_client_is_rejected() -> None:
    server, _ = _server()
    record = server.run(InProcessEngine([_client("good", 1), _client("stranger", 2)]), progress=False)[0]
    assert "not a client of this federation" in record.rejected["stranger"]


class Crashing:
    client_id = name = "crashing"

    def handle(self, instruction: Instruction) -> Update:
        raise RuntimeError("disk full")


def test_a_client_that_raises_is_a_failure_of_the_round_not_of_the_run(caplog) -> None:
    server, _ = _server(rounds=2)
    history = server.run(InProcessEngine([_client("good", 1), Crashing()]), progress=False)
    assert len(history) == 2 and all("disk full" in r.failed["crashing"] for r in history)


def test_a_long_federation_reports_who_answered_how_fast_and_the_time_left(caplog) -> None:
    """Each round records every organisation's time to answer and its own seconds; the log gets a
    progress line (at the first round, then every ``report_every_s``: here every round) with the
    round, the time left, who answered and who failed."""
    server, _ = _server(rounds=3)
    server.report_every_s = 0.0
    with caplog.at_level(logging.INFO, logger="fedtopic_pipelines.core.federated.server"):
        history = server.run(InProcessEngine([_client("good", 1), _client("other", 2), Crashing()]), progress=False)
    assert all(set(r.client_seconds) == {"good", "other"} and min(r.client_seconds.values()) > 0 for r in history)
    assert all(r.seconds >= sum(r.client_seconds.values()) for r in history)
    lines = [m for m in caplog.messages if "s per round, about" in m]
    assert len(lines) == 3 and lines[0].startswith("federated: round 1 of 3,")
    assert "2 organisation(s) answered (slowest '" in lines[0] and lines[0].endswith("failed: ['crashing']")
    assert " about 0 s left;" in lines[-1]


def test_no_usable_update_stops_training() -> None:
    server, _ = _server()
    with pytest.raises(NoUsableUpdates, match="round 0") as raised:
        server.run(InProcessEngine([Poisoned(_client("bad", 2), PROBES["nan"][0])]), progress=False)
    assert "training diverged. Lower the learning rate: train.optimizer.lr" in str(raised.value)


def test_the_divergence_hint_is_given_only_when_every_refusal_is_for_values_that_are_not_finite() -> None:
    assert "diverged" in diverged_hint({"a": "metric 'loss' is not finite", "b": "tensor 'w' contains NaN or Inf"}, {})
    assert diverged_hint({"a": "metric 'loss' is not finite", "b": "wrong shape"}, {}) == ""
    assert diverged_hint({"a": "metric 'loss' is not finite"}, {"b": "timeout"}) == ""
    assert diverged_hint({}, {"b": "timeout"}) == ""


def test_round_records_carry_the_family_metrics_and_the_convergence_measure_only_when_asked() -> None:
    server, _ = _server(rounds=50, tolerance=1.0)
    history = server.run(InProcessEngine([_client("good", 1)]), progress=False)
    assert len(history) == 1 and server.stopped_early
    assert set(history[0].metrics) == {"loss", "kl", "reconstruction", "relative_change"}
    assert 0 < history[0].metrics["relative_change"] < 1.0
    plain, _ = _server(rounds=1)
    assert "relative_change" not in plain.run(InProcessEngine([_client("good", 1)]), progress=False)[0].metrics


def test_duplicate_organisation_names_are_refused_by_the_engine() -> None:
    with pytest.raises(ValueError, match="unique"):
        InProcessEngine([_client("same", 1), _client("same", 2)])


class ScriptedValidation:
    """A real training client whose validation answers follow a script (and are recorded)."""

    def __init__(self, inner: FamilyClient, losses: list[float]) -> None:
        self.client_id = self.name = inner.client_id
        self.inner = inner
        self.losses = list(losses)
        self.validated_states: list[dict[str, torch.Tensor]] = []

    def handle(self, instruction: Instruction) -> Update:
        if instruction.config.get("action") == "evaluate":
            self.validated_states.append({k: v.clone() for k, v in instruction.state.items()})
            return Update(
                self.client_id,
                UpdateKind.METRICS,
                {},
                10,
                metrics={"validation_loss": self.losses.pop(0)},
                round=instruction.round,
            )
        return self.inner.handle(instruction)


def test_early_stopping_waits_patience_validations_and_restores_the_best_weights() -> None:
    model = FAMILY.create_model(V, CONFIG, CPU)
    rule = StoppingRule(max_rounds=100, validation_every=2, patience=3)
    server = FederatedServer(FAMILY.strategy(model, CONFIG), rule)
    client = ScriptedValidation(_client("a", 1), [5.0, 4.0, 3.0, 3.5, 3.0, 3.9, 1.0])
    history = server.run(InProcessEngine([client]), progress=False)
    assert len(history) == 12  # 6 validations: the best is the 3rd, then 3 without a lower loss
    assert server.stopped_early and server.best_round == 5
    assert [r.validation_loss for r in history if r.validation_loss is not None] == [5.0, 4.0, 3.0, 3.5, 3.0, 3.9]
    best = client.validated_states[2]
    assert all(torch.equal(model.state_dict()[k], best[k]) for k in best)
    assert "mu_bn.running_mean" in best  # validation sees the BatchNorm running statistics too


def test_validation_loss_is_weighted_by_documents_and_skips_clients_without_any() -> None:
    model = FAMILY.create_model(V, CONFIG, CPU)
    server = FederatedServer(FAMILY.strategy(model, CONFIG), StoppingRule(1), validation_capacity={"a": 30, "b": 12})
    matrices = poisson_matrices((20, 30, 12), V, seed=3)
    clients = [_client("a", 1, matrices[1]), _client("b", 2, matrices[2]), _client("c", 3)]
    replies = [c.handle(server.strategy.evaluation_instruction(0)) for c in clients]
    assert [r.num_examples for r in replies] == [30, 12, 0]
    assert all(r.kind == UpdateKind.METRICS and not r.tensors for r in replies)
    expected = (replies[0].metrics["validation_loss"] * 30 + replies[1].metrics["validation_loss"] * 12) / 42
    server.validation_capacity["c"] = 0
    assert server.validate(InProcessEngine(clients), 0) == pytest.approx(expected)
    # the same seed gives the same noise, so the same weights give the same loss
    assert clients[0].handle(server.strategy.evaluation_instruction(0)).metrics == replies[0].metrics
    # a client claiming more validation documents than it declared is left out
    server.validation_capacity["b"] = 11
    assert server.validate(InProcessEngine(clients), 0) == pytest.approx(replies[0].metrics["validation_loss"])


def test_non_finite_validation_losses_are_left_out_and_none_left_skips_that_validation(caplog) -> None:
    model = FAMILY.create_model(V, CONFIG, CPU)
    server = FederatedServer(FAMILY.strategy(model, CONFIG), StoppingRule(1))
    good = ScriptedValidation(_client("good", 1), [2.0])
    bad = ScriptedValidation(_client("bad", 2), [float("nan")])
    assert server.validate(InProcessEngine([good, bad]), 0) == 2.0
    assert server.validate(InProcessEngine([ScriptedValidation(_client("bad", 2), [float("inf")])]), 1) is None
    assert any("no client returned a usable validation loss" in m for m in caplog.messages)
    # in a run: the round has no validation loss, training goes on, patience is not spent
    rule = StoppingRule(max_rounds=4, validation_every=2, patience=1)
    run = FederatedServer(FAMILY.strategy(FAMILY.create_model(V, CONFIG, CPU), CONFIG), rule)
    scripted = ScriptedValidation(_client("a", 1), [float("nan"), 3.0])
    history = run.run(InProcessEngine([scripted]), progress=False)
    assert [r.validation_loss for r in history] == [None, None, None, 3.0] and not run.stopped_early


class Stop(Exception):
    """Stands for the server process being killed."""


@pytest.mark.parametrize("validation_every", [None, 3])
def test_a_server_resumed_from_a_stored_checkpoint_ends_where_an_uninterrupted_one_does(
    validation_every, tmp_path
) -> None:
    def server() -> tuple[FederatedServer, InProcessEngine]:
        matrices = poisson_matrices((20, 20), V, seed=9)
        clients = [_client("a", 1, matrices[0][:6]), _client("b", 2, matrices[1][:6])]
        model = FAMILY.create_model(V, CONFIG, CPU)
        rule = StoppingRule(max_rounds=12, validation_every=validation_every, patience=50)
        return FederatedServer(FAMILY.strategy(model, CONFIG), rule), InProcessEngine(clients)

    reference, engine = server()
    reference.run(engine, progress=False)
    path = tmp_path / "checkpoint.safetensors"

    def checkpoint_then_die(s: FederatedServer) -> None:
        if s.next_round % 4 == 0:
            persist.save(path, s.checkpoint(), "test")
        if s.next_round == 7:
            raise Stop

    interrupted, engine = server()
    with pytest.raises(Stop):
        interrupted.run(engine, progress=False, on_round_end=checkpoint_then_die)

    resumed, engine = server()  # fresh clients: they replay their streams when asked for round 4
    state = persist.load(path, "test")
    assert state["next_round"] == 4
    resumed.resume(state)
    resumed.run(engine, progress=False)

    assert [r.round for r in resumed.history] == list(range(12))  # no round lost or repeated
    assert [r.loss for r in resumed.history] == [r.loss for r in reference.history]
    final, expected = resumed.strategy.snapshot(), reference.strategy.snapshot()
    assert all(torch.equal(final[k], expected[k]) for k in expected)


def test_checkpoints_hold_no_pickle(tmp_path) -> None:
    server, _ = _server(rounds=2)
    server.run(InProcessEngine([_client("good", 1)]), progress=False)
    path = tmp_path / "c.safetensors"
    persist.save(path, server.checkpoint(), "test")
    assert b"pickle" not in path.read_bytes()[:2000] and path.read_bytes()[8:9] == b"{"  # a JSON header
    with pytest.raises(persist.PersistError, match="holds 'test', expected a 'other' file"):
        persist.load(path, "other")
    torch.save({"x": np.zeros(2)}, tmp_path / "pickled.pt")
    with pytest.raises(persist.PersistError, match="not a readable safetensors file"):
        persist.load(tmp_path / "pickled.pt", "test")


class RecordingBar:
    """Stands in for tqdm: keeps its settings and the postfix shown at every redraw-capable update."""

    made: ClassVar[list[RecordingBar]] = []

    def __init__(self, **kwargs) -> None:
        self.kwargs = kwargs
        self.postfix: dict[str, str] = {}
        self.shown: list[dict[str, str]] = []
        RecordingBar.made.append(self)

    def set_postfix(self, ordered_dict=None, refresh: bool = True, **kwargs) -> None:
        self.postfix = {**(ordered_dict or {}), **kwargs}

    def update(self, n: int = 1) -> None:
        self.shown.append(dict(self.postfix))

    def close(self) -> None:
        pass


def test_progress_bar_shows_every_rounds_loss_and_keeps_the_latest_validation_loss(monkeypatch) -> None:
    import fedtopic_pipelines.core.federated.server as server_module

    monkeypatch.setattr(server_module, "tqdm", RecordingBar)
    RecordingBar.made.clear()
    model = FAMILY.create_model(V, CONFIG, CPU)
    rule = StoppingRule(max_rounds=5, validation_every=2, patience=10)
    server = FederatedServer(FAMILY.strategy(model, CONFIG), rule)
    history = server.run(InProcessEngine([ScriptedValidation(_client("a", 1), [7.25, 6.5])]), progress=True)
    (bar,) = RecordingBar.made
    # redrawn by time only (mininterval), never held back by tqdm's adaptive miniters
    assert bar.kwargs["miniters"] == 1 and bar.kwargs["mininterval"] == 1.0
    assert [s["loss"] for s in bar.shown] == [f"{r.loss:.1f}" for r in history]  # this round's loss, each round
    assert [s.get("val") for s in bar.shown] == [None, "7.2", "7.2", "6.5", "6.5"]


class SecureSum(InProcessEngine):
    """What a secure-aggregation engine returns (flower/secagg.py): one example-weighted mean named
    ``secure_aggregate`` and the organisations in it with the counts they declared; ``declared``
    changes those declarations, as a lying node could in SecAgg+'s plaintext FitRes."""

    def __init__(self, endpoints, declared=None) -> None:
        super().__init__(endpoints)
        self.declared = dict(declared or {})
        self.extra = self.declared.pop("claimed extra", 0)  # the aggregate claims that many more examples

    def broadcast(self, instruction, to=None):
        from fedtopic_pipelines.core.federated.aggregation import weighted_mean
        from fedtopic_pipelines.core.federated.messages import SECURE_AGGREGATE, Replies

        replies = super().broadcast(instruction, to)
        counts = {u.client_id: u.num_examples for u in replies.updates}
        counts.update(self.declared)
        mean = weighted_mean([u.tensors for u in replies.updates], [u.num_examples for u in replies.updates])
        first = replies.updates[0]
        aggregate = dataclasses.replace(
            first, client_id=SECURE_AGGREGATE, tensors=mean, num_examples=sum(counts.values()) + self.extra
        )
        return Replies([aggregate], replies.failures, contributors=counts)


@pytest.mark.parametrize(
    ("declared", "says"),
    [
        ({}, None),
        ({"other": 17}, "declare more examples than they hold: {'other': 17} (at most {'other': 9})"),
        ({"stranger": 1}, "sums organisations not of this federation: ['stranger']"),
        ({"claimed extra": 2}, "it claims 18 examples, its organisations declared 16"),
    ],
)
def test_a_secure_aggregate_is_held_to_each_summed_organisations_capacity(declared, says, caplog) -> None:
    """The server cannot see a secure sum's parts, but each organisation in it declares its count in
    the clear: each must be within that organisation's own capacity (not the federation's total),
    and an organisation missing from the sum is logged."""
    server, _ = _server(capacity={"good": 9, "other": 9, "idle": 9})
    engine = SecureSum([_client("good", 1), _client("other", 2)], declared)
    if says is None:
        with caplog.at_level("WARNING", logger="fedtopic_pipelines.core.federated.server"):
            (record,) = server.run(engine, progress=False)
        assert record.rejected == {}
        assert "the secure sum holds 2 of the 3 organisations asked (['idle'] left out)" in caplog.text
        return
    with pytest.raises(NoUsableUpdates) as raised:
        server.run(engine, progress=False)
    assert says in str(raised.value)


def test_the_progress_bar_shows_the_loss_or_else_the_convergence_measure_never_nan() -> None:
    """PC-TD under noise and LDA send no loss: their bar shows how much the topics moved."""
    assert round_postfix(RoundRecord(0, {"loss": 12.34}, 10), "relative_change") == {"loss": "12.3"}
    assert round_postfix(RoundRecord(0, {"relative_change": 0.00123}, 10), "relative_change") == {"change": "1.23e-03"}
    assert round_postfix(RoundRecord(0, {"epsilon_rdp": 2.0}, 10), "relative_change") == {}
    assert round_postfix(RoundRecord(0, {}, 10), None) == {}
