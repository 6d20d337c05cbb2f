import pytest
import torch

from fedtopic_pipelines.core.config import OptimizerConfig, ProdLDAConfig
from fedtopic_pipelines.core.federated.batching import BatchSource
from fedtopic_pipelines.core.federated.client import GradientClient
from fedtopic_pipelines.core.federated.engine import InProcessEngine
from fedtopic_pipelines.core.federated.messages import Instruction, Update
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
