import pytest
import torch

from fedtopic_pipelines.core.config import OptimizerConfig, ProdLDAConfig
from fedtopic_pipelines.core.federated.batching import BatchSource
from fedtopic_pipelines.core.federated.client import GradientClient
from fedtopic_pipelines.core.federated.engine import InProcessEngine
from fedtopic_pipelines.core.federated.messages import Instruction, Update, UpdateKind
from fedtopic_pipelines.core.federated.server import FederatedServer, NoUsableUpdates, StoppingRule
from fedtopic_pipelines.core.federated.strategies import FedSGD
from fedtopic_pipelines.core.models.prodlda import ProdLDA
from tests.conftest import poisson_matrices

V = 50
CONFIG = ProdLDAConfig(n_topics=3, hidden_sizes=(8,))


class Poisoned:
    """A client that answers like a real one, then corrupts its gradient."""

    def __init__(self, inner: GradientClient, corrupt) -> None:
        self.client_id = "poisoned"
        self.inner = inner
        self.corrupt = corrupt

    def handle(self, instruction: Instruction) -> Update:
        update = self.inner.handle(instruction)
        return Update(
            self.client_id,
            update.kind,
            self.corrupt(dict(update.tensors)),
            update.num_examples,
            statistics=update.statistics,
            metrics=update.metrics,
        )


def _client(cid: str, seed: int) -> GradientClient:
    matrix = poisson_matrices((20,), V, seed=seed)[0]
    return GradientClient(cid, ProdLDA.create(V, CONFIG, 0), [BatchSource(matrix, 8, seed, torch.device("cpu"))])


def _server(rounds: int = 1, tolerance: float = 0.0) -> tuple[FederatedServer, ProdLDA]:
    model = ProdLDA.create(V, CONFIG, 0)
    return FederatedServer(FedSGD(model, OptimizerConfig()), StoppingRule(rounds, tolerance)), model


def _nan(t: dict) -> dict:
    t["beta"] = t["beta"] * float("nan")
    return t


def _renamed(t: dict) -> dict:
    t["bogus"] = t.pop("beta")
    return t


def _reshaped(t: dict) -> dict:
    t["beta"] = t["beta"][:, :-1]
    return t


class NegativeVariance(Poisoned):
    def handle(self, instruction: Instruction) -> Update:
        update = self.inner.handle(instruction)
        stats = {**update.statistics, "beta_bn.var": -update.statistics["beta_bn.var"] - 1}
        return Update(
            self.client_id, update.kind, update.tensors, update.num_examples, statistics=stats, metrics=update.metrics
        )


def test_a_negative_variance_is_rejected() -> None:
    server, _ = _server()
    record = server.run(
        InProcessEngine([_client("good", 1), NegativeVariance(_client("bad", 2), None)]), progress=False
    )[0]
    assert "negative variance" in record.rejected["poisoned"]


@pytest.mark.parametrize("corrupt", [_nan, _renamed, _reshaped])
def test_a_rejected_update_does_not_touch_the_global_model(corrupt) -> None:
    clean, clean_model = _server()
    clean.run(InProcessEngine([_client("good", 1)]), progress=False)
    mixed, mixed_model = _server()
    record = mixed.run(InProcessEngine([_client("good", 1), Poisoned(_client("bad", 2), corrupt)]), progress=False)[0]
    assert "poisoned" in record.rejected
    assert all(torch.equal(clean_model.state_dict()[k], mixed_model.state_dict()[k]) for k in clean_model.state_dict())


def test_no_usable_update_stops_training() -> None:
    server, _ = _server()
    with pytest.raises(NoUsableUpdates, match="round 0"):
        server.run(InProcessEngine([Poisoned(_client("bad", 2), _nan)]), progress=False)


def test_tolerance_stops_early() -> None:
    server, _ = _server(rounds=50, tolerance=1.0)
    history = server.run(InProcessEngine([_client("good", 1)]), progress=False)
    assert len(history) == 1 and server.stopped_early
    assert 0 < history[0].relative_change < 1.0


def test_duplicate_client_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="unique"):
        InProcessEngine([_client("same", 1), _client("same", 2)])


class ScriptedValidation:
    """A real training client whose validation answers follow a script (and are recorded)."""

    def __init__(self, inner: GradientClient, losses: list[float]) -> None:
        self.client_id = inner.client_id
        self.inner = inner
        self.losses = list(losses)
        self.validated_states: list[dict[str, torch.Tensor]] = []

    def handle(self, instruction: Instruction) -> Update:
        if instruction.config.get("action") == "evaluate":
            self.validated_states.append({k: v.clone() for k, v in instruction.state.items()})
            return Update(self.client_id, UpdateKind.METRICS, {}, 10, metrics={"validation_loss": self.losses.pop(0)})
        return self.inner.handle(instruction)


def test_early_stopping_waits_patience_validations_and_restores_the_best_weights() -> None:
    model = ProdLDA.create(V, CONFIG, 0)
    rule = StoppingRule(max_rounds=100, validation_every=2, patience=3)
    server = FederatedServer(FedSGD(model, OptimizerConfig()), rule)
    client = ScriptedValidation(_client("a", 1), [5.0, 4.0, 3.0, 3.5, 3.0, 3.9, 1.0])
    history = server.run(InProcessEngine([client]), progress=False)
    assert len(history) == 12  # 6 validations: the best is the 3rd, then 3 without a lower loss
    assert server.stopped_early and server.best_round == 5
    assert [r.validation_loss for r in history if r.validation_loss is not None] == [5.0, 4.0, 3.0, 3.5, 3.0, 3.9]
    best = client.validated_states[2]
    assert all(torch.equal(model.state_dict()[k], best[k]) for k in best)
    assert "mu_bn.running_mean" in best  # validation sees the BatchNorm running statistics too


def test_validation_loss_is_weighted_by_documents_and_skips_clients_without_any() -> None:
    model = ProdLDA.create(V, CONFIG, 0)
    server = FederatedServer(FedSGD(model, OptimizerConfig()), StoppingRule(1))
    matrices = poisson_matrices((20, 30, 12), V, seed=3)
    clients = [
        GradientClient(
            "a",
            ProdLDA.create(V, CONFIG, 0),
            [BatchSource(matrices[0], 8, 1, torch.device("cpu"))],
            validation=matrices[1],
        ),
        GradientClient(
            "b",
            ProdLDA.create(V, CONFIG, 0),
            [BatchSource(matrices[0], 8, 2, torch.device("cpu"))],
            validation=matrices[2],
        ),
        GradientClient("c", ProdLDA.create(V, CONFIG, 0), [BatchSource(matrices[0], 8, 3, torch.device("cpu"))]),
    ]
    replies = [c.handle(server.strategy.evaluation_instruction(0)) for c in clients]
    assert [r.num_examples for r in replies] == [30, 12, 0]
    assert all(r.kind == UpdateKind.METRICS and not r.tensors for r in replies)
    expected = (replies[0].metrics["validation_loss"] * 30 + replies[1].metrics["validation_loss"] * 12) / 42
    assert server.validate(InProcessEngine(clients), 0) == pytest.approx(expected)
    # the same seed gives the same noise, so the same weights give the same loss
    assert clients[0].handle(server.strategy.evaluation_instruction(0)).metrics == replies[0].metrics


def test_non_finite_validation_losses_are_left_out_and_none_left_is_an_error() -> None:
    model = ProdLDA.create(V, CONFIG, 0)
    server = FederatedServer(FedSGD(model, OptimizerConfig()), StoppingRule(1))
    good = ScriptedValidation(_client("good", 1), [2.0])
    bad = ScriptedValidation(_client("bad", 2), [float("nan")])
    assert server.validate(InProcessEngine([good, bad]), 0) == 2.0
    with pytest.raises(NoUsableUpdates, match="no client returned a usable validation loss"):
        server.validate(InProcessEngine([ScriptedValidation(_client("bad", 2), [float("inf")])]), 1)


class Stop(Exception):
    """Stands for the server process being killed."""


@pytest.mark.parametrize("validation_every", [None, 3])
def test_a_server_resumed_from_a_checkpoint_ends_where_an_uninterrupted_one_does(validation_every) -> None:
    import io

    def server() -> tuple[FederatedServer, InProcessEngine]:
        clients = [_client("a", 1), _client("b", 2)]
        for c in clients:
            c.validation = c.sources[0].matrix[:6]
        strategy = FedSGD(ProdLDA.create(V, CONFIG, 0), OptimizerConfig(name="adam", lr=0.01))
        rule = StoppingRule(max_rounds=12, validation_every=validation_every, patience=50)
        return FederatedServer(strategy, rule), InProcessEngine(clients)

    reference, engine = server()
    reference.run(engine, progress=False)

    saved: dict[str, bytes] = {}

    def checkpoint_then_die(s: FederatedServer) -> None:
        if s.next_round % 4 == 0:  # every 4 rounds, as the Flower app does with checkpoint_every: 4
            buffer = io.BytesIO()
            torch.save(s.checkpoint(), buffer)
            saved["last"] = buffer.getvalue()
        if s.next_round == 7:
            raise Stop

    interrupted, engine = server()
    with pytest.raises(Stop):
        interrupted.run(engine, progress=False, on_round_end=checkpoint_then_die)

    resumed, engine = server()
    state = torch.load(io.BytesIO(saved["last"]), weights_only=False)
    assert state["next_round"] == 4
    resumed.resume(state)
    for client in engine.clients:  # fresh clients rejoin at the checkpoint's round
        client.skip(resumed.next_round)
    resumed.run(engine, progress=False)

    assert [r.round for r in resumed.history] == list(range(12))  # no round lost or repeated
    assert [r.loss for r in resumed.history] == [r.loss for r in reference.history]
    final, expected = resumed.strategy.snapshot(), reference.strategy.snapshot()
    assert all(torch.equal(final[k], expected[k]) for k in expected)
