"""FamilyClient: a client rebuilt from scratch rejoins a run at any round with the same streams."""

import pytest
import torch

from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.families import get_family
from fedtopic_pipelines.core.federated.messages import Instruction
from fedtopic_pipelines.core.site import Prepared, Site
from tests.conftest import poisson_matrices

CONFIG = TrainConfig.from_params(
    {"model": {"n_topics": 3, "hidden_sizes": [8]}, "batch_size": 6, "max_steps": 10, "seed": 1, "device": "cpu"}
)
FAMILY = get_family("prodlda")


def client():
    (matrix,) = poisson_matrices((20,), vocab=15)
    return Site("a").client(FAMILY, Prepared(matrix, None), CONFIG, 15, stream=2)


def gradients_at(c, state, round_):
    return c.handle(Instruction(round_, state, {"action": "gradients"})).tensors


STATE = {k: v.detach() for k, v in FAMILY.create_model(15, CONFIG, torch.device("cpu")).named_parameters()}


def test_a_fresh_client_asked_for_a_later_round_replays_batches_and_noise_exactly() -> None:
    running = client()
    for round_ in range(5):  # past the first epoch (20 documents / 6 per batch)
        gradients_at(running, STATE, round_)
    expected = gradients_at(running, STATE, 5)
    rejoined = client()
    got = gradients_at(rejoined, STATE, 5)  # replays rounds 0-4 first
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    assert rejoined.next_round == running.next_round == 6


def test_one_round_short_is_a_different_batch_or_noise() -> None:
    running = client()
    for round_ in range(6):
        expected = gradients_at(running, STATE, round_)
    late = client()
    late.catch_up(4)
    late.next_round = 5  # pretend: one replayed round missing
    other = gradients_at(late, STATE, 5)
    assert not all(torch.equal(expected[k], other[k]) for k in expected)


def test_the_state_dict_carries_the_streams_and_the_round() -> None:
    a = client()
    for round_ in range(3):
        gradients_at(a, STATE, round_)
    b = client()
    b.load_state_dict({k: v.clone() for k, v in a.state_dict().items()})
    assert b.next_round == 3
    expected, got = gradients_at(a, STATE, 3), gradients_at(b, STATE, 3)
    assert all(torch.equal(expected[k], got[k]) for k in expected)


def test_a_client_cannot_go_back_to_an_earlier_round() -> None:
    c = client()
    gradients_at(c, STATE, 0)
    with pytest.raises(ValueError, match="cannot go back to round 0"):
        gradients_at(c, STATE, 0)


class WithALocalParameter(type(FAMILY)):
    """ProdLDA with its prior variance kept by each organisation (as NMF keeps its document factor)."""

    def shared_names(self, model):
        return [name for name in super().shared_names(model) if name != "prior_variance"]


def test_local_parameters_survive_the_client_state_and_validation_and_never_travel() -> None:
    family = WithALocalParameter()
    (matrix,) = poisson_matrices((20,), vocab=15)
    site = Site("a")
    client = site.client(family, Prepared(matrix, matrix[:6]), CONFIG, 15, stream=2)
    with torch.no_grad():
        client.model.prior_variance.add_(1.0)  # the organisation's own value
    mine = client.model.prior_variance.detach().clone()
    update = client.handle(Instruction(0, STATE, {"action": "gradients"}))
    assert "prior_variance" not in update.tensors
    rebuilt = site.client(family, Prepared(matrix, matrix[:6]), CONFIG, 15, stream=2)
    rebuilt.load_state_dict(client.state_dict())  # what a ClientApp does between messages
    assert torch.equal(rebuilt.model.prior_variance, mine)
    server_model = family.create_model(15, CONFIG, torch.device("cpu"))
    evaluation = family.strategy(server_model, CONFIG).evaluation_instruction(0)
    assert "prior_variance" not in evaluation.state and "beta" in evaluation.state
    rebuilt.handle(evaluation)
    assert torch.equal(rebuilt.model.prior_variance, mine)  # validation does not overwrite it
