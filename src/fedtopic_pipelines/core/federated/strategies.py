"""Server-side strategies: turn accepted updates into the next global state.

A strategy owns the global model. Adding a family means adding a strategy (and a
client) that accepts another :class:`UpdateKind`; the server and engines stay as they are.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from fedtopic_pipelines.core.config import OptimizerConfig
from fedtopic_pipelines.core.federated.aggregation import UpdateRejected, validate_update, weighted_mean
from fedtopic_pipelines.core.federated.messages import EVALUATE, Instruction, Update, UpdateKind


class Strategy(Protocol):
    """What :class:`~fedtopic_pipelines.core.federated.server.FederatedServer` needs."""

    kind: UpdateKind

    def instruction(self, round_: int) -> Instruction: ...

    def validate(self, update: Update) -> None: ...

    def aggregate(self, updates: list[Update]) -> None: ...

    def parameters(self) -> dict[str, torch.Tensor]: ...

    def evaluation_instruction(self, round_: int) -> Instruction: ...

    def snapshot(self) -> dict[str, torch.Tensor]: ...

    def restore(self, state: dict[str, torch.Tensor]) -> None: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


def make_optimizer(params, config: OptimizerConfig) -> torch.optim.Optimizer:
    """The server optimizer of eq. 3 (plain SGD) or Adam as in the CTM defaults."""
    if config.name == "adam":
        return torch.optim.Adam(params, lr=config.lr, betas=config.betas)
    return torch.optim.SGD(params, lr=config.lr)


class FedSGD:
    """Synchronous per-mini-batch gradient averaging (gFedNTM eq. 1-3, Algorithm 1).

    The server averages client gradients weighted by mini-batch size (eq. 2) and takes
    one optimizer step per round; it also folds the clients' BatchNorm batch statistics,
    averaged with the same weights, into the model's running estimates.
    """

    kind = UpdateKind.GRADIENTS

    def __init__(self, model: nn.Module, optimizer: OptimizerConfig) -> None:
        self.model = model
        self.optimizer = make_optimizer(model.parameters(), optimizer)
        self._shapes = {name: p.shape for name, p in model.named_parameters()}
        self._stat_shapes = model.statistics_shapes() if hasattr(model, "statistics_shapes") else None

    def instruction(self, round_: int) -> Instruction:
        return Instruction(round_, self.parameters(), {"action": self.kind.value})

    def evaluation_instruction(self, round_: int) -> Instruction:
        """Ask clients to validate the global model: weights *and* BatchNorm running statistics."""
        return Instruction(round_, self.snapshot(), {"action": EVALUATE})

    def snapshot(self) -> dict[str, torch.Tensor]:
        """A copy of the global model's full state (for keeping the best weights)."""
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def restore(self, state: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state)

    def state_dict(self) -> dict:
        """Model and server optimizer state (Adam moments included), for checkpoints."""
        return {"model": self.snapshot(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])

    def parameters(self) -> dict[str, torch.Tensor]:
        return {name: p.detach() for name, p in self.model.named_parameters()}

    def validate(self, update: Update) -> None:
        validate_update(update, self.kind, self._shapes, self._stat_shapes)
        for name, value in update.statistics.items():
            if name.endswith(".var") and bool((value < 0).any()):
                raise UpdateRejected(update.client_id, f"statistic '{name}' has a negative variance")

    def aggregate(self, updates: list[Update]) -> None:
        weights = [u.num_examples for u in updates]
        grads = weighted_mean([u.tensors for u in updates], weights)
        self.optimizer.zero_grad(set_to_none=True)
        for name, param in self.model.named_parameters():
            param.grad = grads[name].to(param.device)
        self.optimizer.step()
        if updates[0].statistics:
            self.model.apply_statistics(weighted_mean([u.statistics for u in updates], weights))
