"""The federated server: rounds, stopping rules and the policy for rejected updates."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Protocol

import torch
from tqdm.auto import tqdm

from fedtopic_pipelines.core.federated.aggregation import UpdateRejected
from fedtopic_pipelines.core.federated.messages import Instruction, Replies
from fedtopic_pipelines.core.federated.strategies import Strategy

logger = logging.getLogger(__name__)


class Engine(Protocol):
    """Moves one instruction to every client and brings back their replies."""

    def broadcast(self, instruction: Instruction) -> Replies: ...


class NoUsableUpdates(RuntimeError):
    """A round ended with no accepted update; training cannot continue."""


@dataclass(frozen=True)
class StoppingRule:
    """Stop after ``max_rounds`` or when the relative weight change falls below ``tolerance``."""

    max_rounds: int
    tolerance: float = 0.0


@dataclass
class RoundRecord:
    """What happened in one round, for histories and MLflow."""

    round: int
    loss: float
    kl: float
    reconstruction: float
    relative_change: float
    num_examples: int
    client_loss: dict[str, float] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def _norm(tensors: dict[str, torch.Tensor]) -> float:
    return math.sqrt(sum(float(torch.linalg.vector_norm(t)) ** 2 for t in tensors.values()))


class FederatedServer:
    """Runs rounds of instruction -> replies -> validation -> aggregation until a stop rule fires."""

    def __init__(self, strategy: Strategy, stopping: StoppingRule, name: str = "federated") -> None:
        self.strategy = strategy
        self.stopping = stopping
        self.name = name
        self.history: list[RoundRecord] = []
        self.stopped_early = False

    def run_round(self, engine: Engine, round_: int) -> RoundRecord:
        """One synchronous round; rejected or failed clients are logged and left out."""
        replies = engine.broadcast(self.strategy.instruction(round_))
        accepted, rejected = [], {}
        for update in replies.updates:
            try:
                self.strategy.validate(update)
                accepted.append(update)
            except UpdateRejected as exc:
                logger.warning("%s round %d: %s", self.name, round_, exc)
                rejected[exc.client_id] = exc.reason
        for client, reason in replies.failures.items():
            logger.warning("%s round %d: client '%s' failed: %s", self.name, round_, client, reason)
        if not accepted:
            raise NoUsableUpdates(
                f"{self.name} round {round_}: no usable update (rejected {rejected}, failed {replies.failures})"
            )
        before = {k: v.clone() for k, v in self.strategy.parameters().items()}
        self.strategy.aggregate(accepted)
        after = self.strategy.parameters()
        change = _norm({k: after[k] - before[k] for k in before}) / max(_norm(before), 1e-12)
        n = sum(u.num_examples for u in accepted)

        def mean(metric: str) -> float:
            return sum(u.metrics.get(metric, float("nan")) * u.num_examples for u in accepted) / n

        return RoundRecord(
            round=round_,
            loss=mean("loss"),
            kl=mean("kl"),
            reconstruction=mean("reconstruction"),
            relative_change=change,
            num_examples=n,
            client_loss={u.client_id: u.metrics.get("loss", float("nan")) for u in accepted},
            rejected=rejected,
            failed=dict(replies.failures),
        )

    def run(self, engine: Engine, progress: bool = True) -> list[RoundRecord]:
        """All rounds; returns (and keeps) the per-round history."""
        bar = tqdm(
            range(self.stopping.max_rounds),
            desc=f"train {self.name}",
            disable=not progress,
            mininterval=1.0,
            leave=False,
        )
        for round_ in bar:
            record = self.run_round(engine, round_)
            self.history.append(record)
            if round_ % 50 == 0:
                bar.set_postfix(loss=f"{record.loss:.1f}")
            if self.stopping.tolerance > 0 and record.relative_change < self.stopping.tolerance:
                logger.info(
                    "%s: relative weight change %.2e < tolerance %.2e at round %d; stopping",
                    self.name,
                    record.relative_change,
                    self.stopping.tolerance,
                    round_,
                )
                self.stopped_early = True
                break
        bar.close()
        return self.history
