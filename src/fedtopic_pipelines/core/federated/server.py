"""The federated server: rounds, stopping rules and the policy for rejected updates."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

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
    """Stop after ``max_rounds``, when the relative weight change falls below ``tolerance``,
    or (when ``validation_every`` is set) after ``patience`` validations without a lower
    validation loss; then the weights with the lowest validation loss are restored."""

    max_rounds: int
    tolerance: float = 0.0
    validation_every: int | None = None
    patience: int = 5


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
    validation_loss: float | None = None


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
        self.next_round = 0
        self.best_round: int | None = None
        self.best_loss = math.inf
        self.best_state: dict[str, torch.Tensor] | None = None
        self.waited = 0

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

    def validate(self, engine: Engine, round_: int) -> float:
        """Mean validation loss over the clients' held-out documents, weighted by their number.

        Clients without validation documents answer with zero examples and are left out; a
        non-finite answer is logged and left out, as a rejected update is.
        """
        replies = engine.broadcast(self.strategy.evaluation_instruction(round_))
        total, n = 0.0, 0
        for update in replies.updates:
            value = update.metrics.get("validation_loss", float("nan"))
            if update.num_examples == 0:
                continue
            if not math.isfinite(value) or update.num_examples < 0:
                logger.warning(
                    "%s round %d: client '%s' sent validation loss %r on %d documents; left out",
                    self.name,
                    round_,
                    update.client_id,
                    value,
                    update.num_examples,
                )
                continue
            total += value * update.num_examples
            n += update.num_examples
        for client, reason in replies.failures.items():
            logger.warning("%s round %d: client '%s' failed validation: %s", self.name, round_, client, reason)
        if n == 0:
            raise NoUsableUpdates(f"{self.name} round {round_}: no client returned a usable validation loss")
        return total / n

    def run(
        self,
        engine: Engine,
        progress: bool = True,
        on_round_end: Callable[[FederatedServer], None] | None = None,
    ) -> list[RoundRecord]:
        """All rounds from :attr:`next_round` on; returns (and keeps) the per-round history.

        ``on_round_end`` is called after every round (the Flower app writes checkpoints there).
        """
        every, patience = self.stopping.validation_every, self.stopping.patience
        bar = tqdm(
            total=self.stopping.max_rounds,
            initial=self.next_round,
            desc=f"train {self.name}",
            disable=not progress,
            mininterval=1.0,
            leave=False,
        )
        while self.next_round < self.stopping.max_rounds and not self.stopped_early:
            round_ = self.next_round
            record = self.run_round(engine, round_)
            self.history.append(record)
            self.next_round = round_ + 1
            bar.update(1)
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
            elif every and (round_ + 1) % every == 0:
                record.validation_loss = self.validate(engine, round_)
                if record.validation_loss < self.best_loss:
                    self.best_loss, self.best_state, self.waited, self.best_round = (
                        record.validation_loss,
                        self.strategy.snapshot(),
                        0,
                        round_,
                    )
                else:
                    self.waited += 1
                bar.set_postfix(loss=f"{record.loss:.1f}", val=f"{record.validation_loss:.1f}")
                if self.waited >= patience:
                    logger.info(
                        "%s: no lower validation loss in %d validations; stopping at round %d, keeping round %d "
                        "(validation loss %.2f)",
                        self.name,
                        patience,
                        round_,
                        self.best_round,
                        self.best_loss,
                    )
                    self.stopped_early = True
            if on_round_end is not None:
                on_round_end(self)
        bar.close()
        if self.best_state is not None:
            self.strategy.restore(self.best_state)
        return self.history

    def checkpoint(self) -> dict[str, Any]:
        """Everything a restarted server needs to go on at :attr:`next_round` as if never stopped."""
        return {
            "next_round": self.next_round,
            "history": list(self.history),
            "stopped_early": self.stopped_early,
            "best": (self.best_loss, self.best_state, self.waited, self.best_round),
            "strategy": self.strategy.state_dict(),
        }

    def resume(self, checkpoint: dict[str, Any]) -> None:
        self.next_round = int(checkpoint["next_round"])
        self.history = list(checkpoint["history"])
        self.stopped_early = bool(checkpoint["stopped_early"])
        self.best_loss, self.best_state, self.waited, self.best_round = checkpoint["best"]
        self.strategy.load_state_dict(checkpoint["strategy"])
