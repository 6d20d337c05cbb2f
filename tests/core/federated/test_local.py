"""A gradient family's local update under a weights rule (core/federated/local.py)."""

from __future__ import annotations

import torch

from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.families import get_family
from fedtopic_pipelines.core.federated.local import gradient_epochs
from tests.conftest import poisson_matrices

CPU = torch.device("cpu")


def test_local_steps_stop_after_e_batches_and_an_epoch_of_them_is_one_local_epoch() -> None:
    """40 documents in batches of 8 are 5 steps per epoch: ``local_steps: 5`` is exactly
    ``local_epochs: 1`` (the same batches, noise and optimizer steps), and 1 step is less."""
    family = get_family("prodlda")
    (data,) = poisson_matrices((40,), 30)
    base = {
        "model": {"family": "prodlda", "n_topics": 3, "hidden_sizes": [8], "normalization": "layer"},
        "batch_size": 8,
        "seed": 3,
        "device": "cpu",
    }

    def run(**aggregation) -> dict[str, torch.Tensor]:
        config = TrainConfig.from_params({**base, "aggregation": {"rule": "fedavg", **aggregation}})
        model = family.create_model(30, config, CPU)
        return gradient_epochs(family, model, data, config, 11, CPU).tensors

    epoch, five, one = run(), run(local_steps=5), run(local_steps=1)
    assert all(torch.equal(epoch[name], five[name]) for name in epoch)
    assert any(not torch.equal(epoch[name], one[name]) for name in epoch)
