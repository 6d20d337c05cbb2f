"""GradientClient.skip: a client rebuilt from scratch rejoins a run at any round with the same streams."""

import torch

from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.federated.messages import Instruction
from fedtopic_pipelines.core.training import new_global_model, organisation_client
from tests.conftest import poisson_matrices

CONFIG = TrainConfig.from_params(
    {"model": {"n_topics": 3, "hidden_sizes": [8]}, "batch_size": 6, "max_steps": 10, "seed": 1, "device": "cpu"}
)


def gradients_at(client, state, round_):
    return client.handle(Instruction(round_, state, {"action": "gradients"})).tensors


def test_skip_replays_batches_and_noise_exactly() -> None:
    (matrix,) = poisson_matrices((20,), vocab=15)
    device = torch.device("cpu")
    state = {k: v.detach() for k, v in new_global_model(15, CONFIG, device).named_parameters()}
    running = organisation_client("a", 2, matrix, None, CONFIG, device)
    for round_ in range(5):  # past the first epoch (20 documents / 6 per batch)
        gradients_at(running, state, round_)
    rejoined = organisation_client("a", 2, matrix, None, CONFIG, device)
    rejoined.skip(5)
    expected, got = gradients_at(running, state, 5), gradients_at(rejoined, state, 5)
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    late = organisation_client("a", 2, matrix, None, CONFIG, device)
    late.skip(4)  # one round short: a different batch or noise
    other = gradients_at(late, state, 5)
    assert not all(torch.equal(expected[k], other[k]) for k in expected)
