"""An organisation's side of a weights rule: local epochs, client sampling, and its own state.

Under a weights rule (FedAvg, FedAdagrad, FedYogi, FedAdam: ``train.aggregation``) a
sampled organisation trains ``local_epochs`` epochs from the broadcast weights and sends
its shared weights back (seed 004 Algorithm 1, ClientUpdate). :class:`LocalEpochs` does it
for any family: a family that defines ``local_update`` (NMF, whose step also moves its
documents' own topic weights) runs its own loop; any gradient family gets the generic one,
its ``local_step`` gradients applied by ``train.optimizer`` at the organisation.

A round's batches and noise come from a generator seeded by the organisation's stream
and the round: nothing but the local parameters carries from one round to the next, so an
organisation left out of a round (client sampling) or rebuilt for every message (a Flower
ClientApp) needs no replay. What it keeps across rounds, its local parameters (NMF's H),
is written by :class:`LocalStates` to the organisation's own folder while the server
checkpoints, so that a resumed run continues from what it had: its replay cannot rebuild them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from fedtopic_pipelines.core.config import WEIGHT_RULES, TrainConfig
from fedtopic_pipelines.core.config.aggregation import participants_per_round
from fedtopic_pipelines.core.federated.family import LocalRounds, LocalStep, ModelFamily, Streaming
from fedtopic_pipelines.core.federated.strategies import make_optimizer
from fedtopic_pipelines.core.seeds import derive_seed

logger = logging.getLogger(__name__)

ROUND_STREAM = 7000  # the seed stream of an organisation's local epochs in a round
SAMPLE_STREAM = 5000  # the seed stream of the server's client sample in a round


def uses_weights(config: TrainConfig) -> bool:
    """Whether the run's rule sends weights after local epochs (not one batch's gradient)."""
    return config.rule in WEIGHT_RULES


def runs_local_rounds(family: ModelFamily, config: TrainConfig) -> bool:
    """Whether a round is each organisation's local computation over all its documents
    (:class:`LocalEpochs`, a round's draws seeded by the round): under a weights rule, and
    for a family that has no batch stream (not :class:`Streaming`: PC-TD's E-step over its units)."""
    return uses_weights(config) or not isinstance(family, Streaming)


def client_sample(organisations: Sequence[str], fraction: float, seed: int):
    """The round -> organisations function of client sampling, or None when every organisation
    trains every round. The sample of a round depends on the seed and the round only (a
    resumed server draws the same organisations)."""
    k = len(organisations)
    m = participants_per_round(k, fraction)
    if m >= k:
        return None
    names = list(organisations)

    def sample(round_: int) -> list[str]:
        rng = np.random.default_rng(derive_seed(seed, SAMPLE_STREAM, round_))
        return [names[i] for i in sorted(rng.choice(k, size=m, replace=False).tolist())]

    return sample


class LocalEpochs:
    """A client's "stream" when it runs local rounds (:func:`runs_local_rounds`): its data, and
    the local computation of a round."""

    def __init__(
        self,
        family: ModelFamily,
        data: Any,
        config: TrainConfig,
        seed: int,
        device: torch.device,
        ghosts: int | None = None,
    ) -> None:
        self.family = family
        self.data = data
        self.config = config
        self.seed = seed
        self.device = device
        self.ghosts = ghosts
        self.rows = family.rows(data)

    @property
    def max_examples(self) -> int:
        """An update weighs the organisation's documents (N_i of seed 004's FedAvg)."""
        return self.rows

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {}  # a round's draws depend on the round only

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        return None

    def run(self, model: nn.Module, round_: int) -> LocalStep:
        """``local_epochs`` epochs from the model's current (broadcast) weights; the shared
        weights after them, weighted by the organisation's documents, with the mean loss terms."""
        seed = derive_seed(self.seed, ROUND_STREAM, round_)
        if isinstance(self.family, LocalRounds):
            return self.family.local_update(model, self.data, self.config, seed)
        return gradient_epochs(self.family, model, self.data, self.config, seed, self.device, self.ghosts)


def gradient_epochs(
    family: ModelFamily,
    model: nn.Module,
    data: Any,
    config: TrainConfig,
    seed: int,
    device: torch.device,
    ghosts: int | None = None,
) -> LocalStep:
    """FedAvg's ClientUpdate for a gradient family: ``local_steps`` batches, or ``local_epochs``
    passes, of its batch stream, each batch's gradient applied by a fresh ``train.optimizer`` to
    the shared parameters."""
    stream = family.stream(data, config, seed, device, ghosts)
    rows = family.rows(data)
    steps = config.aggregation.local_steps or config.aggregation.local_epochs * family.steps_per_epoch(
        rows, config, ghosts
    )
    shared = family.shared_names(model)
    params = dict(model.named_parameters())
    optimizer = make_optimizer([params[n] for n in shared], config.optimizer)
    totals: dict[str, float] = {}
    for _ in range(steps):
        step = family.local_step(model, stream)
        optimizer.zero_grad(set_to_none=True)
        for name, grad in step.tensors.items():
            params[name].grad = grad
        optimizer.step()
        for key, value in step.losses.items():
            totals[key] = totals.get(key, 0.0) + value / steps
    return LocalStep({n: params[n].detach().clone() for n in shared}, rows, totals)


class LocalStates:
    """An organisation's own copies of its local parameters, one file per round it trained in
    (``<folder>/<job>/round-<r>.safetensors``), kept while the server checkpoints so that a
    resumed run gives it back what it had before the checkpoint's round. Files older than
    the newest one before the server's last checkpoint are removed."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def _dir(self, job: str) -> Path:
        return self.folder / job

    def save(self, job: str, round_: int, state: dict[str, torch.Tensor], checkpointed: int) -> None:
        folder = self._dir(job)
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f"round-{round_:09d}.partial"
        save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, str(partial))
        partial.replace(folder / f"round-{round_:09d}.safetensors")
        older = [r for r in self.rounds(job) if r < checkpointed]
        for r in older[:-1]:  # the newest before the checkpoint is what a resumed run needs
            (folder / f"round-{r:09d}.safetensors").unlink(missing_ok=True)

    def rounds(self, job: str) -> list[int]:
        folder = self._dir(job)
        if not folder.is_dir():
            return []
        return sorted(int(p.stem.removeprefix("round-")) for p in folder.glob("round-*.safetensors"))

    def load_before(self, job: str, round_: int) -> tuple[int, dict[str, torch.Tensor]] | None:
        """The state saved after the last round before ``round_`` this organisation trained in."""
        earlier = [r for r in self.rounds(job) if r < round_]
        if not earlier:
            return None
        return earlier[-1], load_file(str(self._dir(job) / f"round-{earlier[-1]:09d}.safetensors"))
