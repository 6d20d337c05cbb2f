"""Clients: each holds one organisation's private data and answers the server.

A client never sends documents: only what its ``handle`` returns, an :class:`Update`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from fedtopic_pipelines.core.federated.aggregation import weighted_mean
from fedtopic_pipelines.core.federated.batching import BatchSource, GhostBatchSource
from fedtopic_pipelines.core.federated.messages import EVALUATE, Instruction, Update, UpdateKind


class Client(Protocol):
    """Anything that answers an instruction with an update (in-process or behind Flower)."""

    client_id: str

    def handle(self, instruction: Instruction) -> Update: ...


def load_parameters(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy the broadcast global parameters into a client's local model."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(state[name])


VALIDATION_CHUNK = 1024


class GradientClient:
    """FedSGD client (gFedNTM Algorithm 1, GETCLIENTGRAD).

    Loads the global weights, draws this step's batches from its sources, and returns the
    gradient of their mean loss. With one :class:`BatchSource` this is an organisation;
    with a :class:`GhostBatchSource` (or several sources) it is the centralized trainer,
    whose batch is a concatenation of ghost batches, each normalised by its own BatchNorm
    statistics.
    """

    kind = UpdateKind.GRADIENTS

    def __init__(
        self,
        client_id: str,
        model: nn.Module,
        sources: Sequence[BatchSource | GhostBatchSource],
        validation: sp.csr_matrix | None = None,
        validation_seed: int = 0,
    ) -> None:
        if not sources:
            raise ValueError(f"client '{client_id}' has no data")
        self.client_id = client_id
        self.model = model
        self.sources = list(sources)
        self.validation = None if validation is None else validation.tocsr().astype(np.float32)
        self.validation_seed = validation_seed

    def handle(self, instruction: Instruction) -> Update:
        if instruction.config.get("action") == EVALUATE:
            return self.evaluate(instruction)
        load_parameters(self.model, instruction.state)
        self.model.train()
        self.model.zero_grad(set_to_none=True)
        parts = [self.model.loss_on_batch(batch, noise) for s in self.sources for batch, noise in s.next_batches()]
        n = sum(p.n for p in parts)
        loss = sum(p.loss * (p.n / n) for p in parts)
        loss.backward()
        # Fresh tensors every round (zero_grad(set_to_none=True) above), so no copy is needed.
        grads = {name: p.grad.detach() for name, p in self.model.named_parameters()}
        weights = [p.n for p in parts]
        stats = weighted_mean([p.statistics for p in parts], weights)
        metrics = {
            "loss": float(loss.detach()),
            "kl": float(sum(p.kl * (p.n / n) for p in parts)),
            "reconstruction": float(sum(p.reconstruction * (p.n / n) for p in parts)),
        }
        return Update(self.client_id, self.kind, grads, n, statistics=stats, metrics=metrics)

    def skip(self, rounds: int) -> None:
        """Advance the batch and noise streams by ``rounds`` without sending anything.

        A client rebuilt from scratch (a resumed run) calls it to rejoin at the round it is
        asked for with the streams an uninterrupted client would have: the draws depend on
        the batch shapes only, so a forward pass without gradients replays them exactly.
        """
        self.model.train()
        with torch.no_grad():
            for _ in range(rounds):
                for source in self.sources:
                    for batch, noise in source.next_batches():
                        self.model.loss_on_batch(batch, noise)

    def evaluate(self, instruction: Instruction) -> Update:
        """Mean validation loss of the broadcast model (weights and BatchNorm running
        statistics) on this organisation's held-out documents; only the number leaves."""
        if self.validation is None or self.validation.shape[0] == 0:
            return Update(self.client_id, UpdateKind.METRICS, {}, 0)
        self.model.load_state_dict(instruction.state)
        device = next(self.model.parameters()).device
        generator = torch.Generator(device=device).manual_seed(self.validation_seed)
        total, n = 0.0, self.validation.shape[0]
        for start in range(0, n, VALIDATION_CHUNK):
            bow = torch.from_numpy(self.validation[start : start + VALIDATION_CHUNK].toarray()).to(device)
            total += float(self.model.validation_loss(bow, generator).sum())
        return Update(self.client_id, UpdateKind.METRICS, {}, n, metrics={"validation_loss": total / n})
