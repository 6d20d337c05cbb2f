"""The federated server: rounds, validation of untrusted updates, stopping rules, checkpoints.

It knows no model family. A round is: the strategy's instruction goes out through the
engine; each reply is validated (duplicates and unknown senders first, then the
strategy's checks for its update kind, including the example count each client declared
when it prepared); the accepted updates are aggregated by the strategy; the clients'
named metrics are averaged into the round's record. A rejected or failed client is
logged and left out of that round; one bad update never ends a run, only a round with no
usable update at all does.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import torch
from tqdm.auto import tqdm

from fedtopic_pipelines.core.federated.aggregation import UpdateRejected, validate_metrics_update
from fedtopic_pipelines.core.federated.messages import SECURE_AGGREGATE, Instruction, Replies, Update
from fedtopic_pipelines.core.federated.strategies import Exchanging, Strategy

logger = logging.getLogger(__name__)

VALIDATION_METRIC = "validation_loss"
REPORT_EVERY_S = 60.0  # seconds between progress lines in the log (FederatedServer.report_every_s)


class Engine(Protocol):
    """Moves one instruction to every client (or to those named in ``to``) and brings back their replies."""

    def broadcast(self, instruction: Instruction, to: Sequence[str] | None = None) -> Replies: ...


class NoUsableUpdates(RuntimeError):
    """A round ended with no accepted update; training cannot continue."""


NOT_FINITE = re.compile(r"not finite|NaN or Inf")  # the reasons the screens give (federated/aggregation.py)


def diverged_hint(rejected: Mapping[str, str], failures: Mapping[str, str]) -> str:
    """When every update of a round was refused for values that are not finite, the likeliest cause
    with honest organisations is a learning rate too large for the model: say which ones to lower."""
    if not rejected or failures or not all(NOT_FINITE.search(reason) for reason in rejected.values()):
        return ""
    return (
        ". Every update held values that are not finite: with honest organisations, training diverged. "
        "Lower the learning rate: train.optimizer.lr, and under a weights rule train.aggregation.eta (on Flower "
        "by the local-steps schedule, train.flower.local_steps.eta and .optimizer.lr)"
    )


@dataclass(frozen=True)
class StoppingRule:
    """Stop after ``max_rounds``, when the strategy's convergence measure falls below
    ``tolerance``, or (when ``validation_every`` is set) after ``patience`` validations
    without a lower validation loss; then the weights with the lowest validation loss are restored."""

    max_rounds: int
    tolerance: float = 0.0
    validation_every: int | None = None
    patience: int = 5


@dataclass
class RoundRecord:
    """What happened in one round, for histories and MLflow.

    ``metrics`` are the clients' named metrics (a family's loss terms: ``loss``, and for
    ProdLDA ``kl`` and ``reconstruction``) averaged with the accepted updates' example
    counts, plus the strategy's convergence measure when it was computed.
    """

    round: int
    metrics: dict[str, float]
    num_examples: int
    client_loss: dict[str, float] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    validation_loss: float | None = None
    client_bytes: dict[str, int] = field(default_factory=dict)  # what each accepted update carried
    sampled: list[str] = field(default_factory=list)  # the organisations asked this round (client sampling)
    exchanges: int = 1  # messages each organisation answered this round (pooled BatchNorm adds its own)
    voided: bool = False  # no step: an organisation in the round's pooled sums sent no usable gradient
    # wall-clock facts, which differ from run to run (equality ignores them): each organisation's
    # time to answer (Replies.seconds, summed over the round's exchanges) and the round's seconds
    client_seconds: dict[str, float] = field(default_factory=dict, compare=False)
    seconds: float = field(default=math.nan, compare=False)

    @property
    def loss(self) -> float:
        return self.metrics.get("loss", math.nan)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RoundRecord:
        return cls(**raw)


def round_postfix(record: RoundRecord, convergence_metric: str | None) -> dict[str, str]:
    """What a progress bar shows of a round: its loss, or where the organisations send none (PC-TD
    under noise, LDA) the strategy's convergence measure, never ``loss=nan``."""
    if math.isfinite(record.loss):
        return {"loss": f"{record.loss:.1f}"}
    change = record.metrics.get(convergence_metric) if convergence_metric else None
    return {"change": f"{change:.2e}"} if change is not None and math.isfinite(change) else {}


@dataclass
class _Exchanges:
    """What a round's exchanges before its instruction saw: how many ran, what each organisation's
    accepted answers carried, and who was rejected or failed (and why)."""

    count: int = 0
    dropped: set[str] = field(default_factory=set)  # left after the first exchange (the step started again)
    bytes: dict[str, int] = field(default_factory=dict)
    seconds: Counter[str] = field(default_factory=Counter)  # each organisation's answer seconds, summed
    rejected: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


class FederatedServer:
    """Runs rounds of instruction -> replies -> validation -> aggregation until a stop rule fires.

    ``capacity`` maps each client to the most examples one of its updates may claim (what
    it declared when it prepared: its training documents, capped by the family's batch);
    ``validation_capacity`` likewise for validation replies. A client not in ``capacity``
    is unknown and its updates are rejected. ``None`` checks no counts (unit tests).
    ``sample`` maps a round to the organisations asked to train in it (client sampling;
    None: all of them); validation asks everyone. ``context`` is added to every training
    instruction's config (the checkpoint's job and last saved round, for clients that keep
    local state).
    """

    def __init__(
        self,
        strategy: Strategy,
        stopping: StoppingRule,
        name: str = "federated",
        capacity: Mapping[str, int] | None = None,
        validation_capacity: Mapping[str, int] | None = None,
        sample: Callable[[int], list[str]] | None = None,
    ) -> None:
        self.strategy = strategy
        self.sample = sample
        self.context: dict[str, Any] = {}
        self.stopping = stopping
        self.name = name
        self.capacity = None if capacity is None else dict(capacity)
        self.validation_capacity = None if validation_capacity is None else dict(validation_capacity)
        self.history: list[RoundRecord] = []
        # privacy.outlier_factor's screen (core/federated/privacy.py): the validated updates of a
        # round -> those it keeps and the reason for each it leaves out; None keeps them all
        self.screen: Callable[[list[Update], Strategy, int], tuple[list[Update], dict[str, str]]] | None = None
        self.stopped_early = False
        self.next_round = 0
        self.best_round: int | None = None
        self.best_loss = math.inf
        self.best_state: dict[str, torch.Tensor] | None = None
        self.waited = 0
        # exchanging strategies (pooled BatchNorm): organisations that dropped out of a step, the round
        # each may come back, and how many consecutive times each dropped out (:meth:`_void`)
        self.sitting_out: dict[str, int] = {}
        self.offences: dict[str, int] = {}
        self.report_every_s = REPORT_EVERY_S

    def _screen(
        self,
        updates: list[Update],
        round_: int,
        check: Callable[[Update, int | None], None],
        limits,
        contributors: dict[str, int] | None = None,
    ) -> tuple[list[Update], dict[str, str]]:
        """The updates that pass ``check``; the others by client with the reason (logged).
        ``contributors``: a secure round's summed organisations and their declared counts."""
        ids = Counter(str(getattr(u, "client_id", "?")) for u in updates)
        accepted, rejected = [], {}
        for update in updates:
            cid = str(getattr(update, "client_id", "?"))
            try:
                if not isinstance(update.client_id, str):
                    raise UpdateRejected(cid, f"client id is a {type(update.client_id).__name__}, not a name")
                if ids[cid] > 1:
                    raise UpdateRejected(cid, f"{ids[cid]} updates in one round from the same client; all left out")
                if getattr(update, "round", None) != round_:
                    raise UpdateRejected(cid, _wrong_round(update, round_))
                if limits is not None and cid == SECURE_AGGREGATE and cid not in limits:
                    # secure aggregation: one update, the organisations' sum, that claims at most their total
                    check(update, _secure_capacity(update, contributors or {}, limits))
                    accepted.append(update)
                    continue
                if limits is not None and cid not in limits:
                    raise UpdateRejected(cid, f"not a client of this federation (known: {sorted(limits)})")
                check(update, None if limits is None else limits[cid])
                accepted.append(update)
            except UpdateRejected as exc:
                rejected[cid] = exc.reason
            except Exception as exc:  # a check that breaks on a malformed value must not end the run
                rejected[cid] = f"could not be validated: {type(exc).__name__}: {exc}"
        for cid, reason in rejected.items():
            logger.warning("%s round %d: update from client '%s' rejected: %s", self.name, round_, cid, reason)
        return accepted, rejected

    def _with_context(self, instruction: Instruction) -> Instruction:
        if not self.context:
            return instruction
        return dataclasses.replace(instruction, config={**instruction.config, **self.context})

    def _exchange(self, engine: Engine, round_: int, sampled: list[str] | None, record: _Exchanges) -> list[str] | None:
        """Run the strategy's exchanges before its training instruction (:class:`Exchanging`); returns
        the organisations that answered every one. One that fails or is rejected in an exchange
        after the first would leave its documents in sums it no longer answers for: the step's
        exchanges start again without it (the exchanges draw nothing, so a restart is exact)."""
        members = sampled
        while True:
            known = members if members is not None else self.capacity  # None: the server cannot tell
            parties = None if known is None else len(known)
            exchanges = self.strategy.exchanges(round_, parties)  # type: ignore[attr-defined]
            answered: list[str] | None = None
            try:
                instruction = next(exchanges)
                while True:
                    instruction = self._with_context(instruction)
                    replies = engine.broadcast(instruction, **({} if members is None else {"to": members}))
                    record.failed.update(replies.failures)
                    record.seconds.update(replies.seconds)

                    def check(update: Update, capacity: int | None, instruction: Instruction = instruction) -> None:
                        self.strategy.validate_exchange(update, capacity, instruction)  # type: ignore[attr-defined]

                    accepted, rejected = self._screen(list(replies.updates), round_, check, self.capacity)
                    if self.screen is not None and accepted:  # privacy.outlier_factor, as for the updates
                        accepted, screened = self.screen(accepted, self.strategy, round_)
                        rejected.update(screened)
                    record.rejected.update(rejected)
                    record.count += 1
                    for update in accepted:
                        record.bytes[update.client_id] = record.bytes.get(update.client_id, 0) + update.nbytes
                    if not accepted:
                        raise NoUsableUpdates(
                            f"{self.name} round {round_}: no usable answer to exchange {record.count} "
                            f"(rejected {rejected}, failed {replies.failures})"
                        )
                    ids = [u.client_id for u in accepted]
                    if answered is not None and set(ids) != set(answered):
                        lost = sorted(set(answered) - set(ids))
                        logger.warning(
                            "%s round %d: %s left the step's exchanges; they start again without them",
                            self.name,
                            round_,
                            lost,
                        )
                        record.dropped.update(lost)
                        members = ids
                        break
                    answered = members = ids
                    instruction = exchanges.send(accepted)
            except StopIteration:  # the exchanges are done (or there were none: one party holds the step)
                return answered if answered is not None else members

    def _present(self, sampled: list[str] | None, round_: int) -> list[str] | None:
        """The organisations asked this round, without those sitting out (:meth:`_void`); all of them
        if none would be left."""
        away = {org for org, back in self.sitting_out.items() if back > round_}
        if not away or (sampled is None and self.capacity is None):
            return sampled
        present = [org for org in (sampled if sampled is not None else self.capacity or {}) if org not in away]
        return present or sampled

    def _void(self, round_: int, asked: list[str], kept: list[Update], exchanged: _Exchanges) -> bool:
        """Whether this exchanging round must not step: an organisation whose documents are in the
        step's pooled sums has no gradient in it (rejected, screened or failed), so the others'
        gradients would carry parts that only its own cancels. The step is voided instead, and
        whoever dropped out after the step's first exchange sits out the next round, twice as
        long at each consecutive time (an organisation that keeps voiding steps is soon left out;
        an honest one that drops out now and then loses a round)."""
        dropped = (set(asked) - {u.client_id for u in kept}) | exchanged.dropped
        for org in asked:
            if org not in dropped:
                self.offences.pop(org, None)
        for org in sorted(dropped):
            self.offences[org] = self.offences.get(org, 0) + 1
            self.sitting_out[org] = round_ + 1 + 2 ** min(self.offences[org] - 1, 20)
        void = set(asked) != {u.client_id for u in kept}
        if dropped:
            logger.warning(
                "%s round %d: %s dropped out of the step%s; they sit out the next round(s)",
                self.name,
                round_,
                sorted(dropped),
                " after its exchanges, which voids it" if void else "",
            )
        return void

    def run_round(self, engine: Engine, round_: int) -> RoundRecord:
        """One synchronous round; rejected or failed clients are logged and left out."""
        sampled = self.sample(round_) if self.sample is not None else None
        exchanged = _Exchanges()
        exchanging = isinstance(self.strategy, Exchanging)
        if exchanging:
            sampled = self._exchange(engine, round_, self._present(sampled, round_), exchanged)
        instruction = self._with_context(self.strategy.instruction(round_))
        replies = engine.broadcast(instruction) if sampled is None else engine.broadcast(instruction, to=sampled)
        accepted, rejected = self._screen(
            list(replies.updates), round_, self.strategy.validate, self.capacity, replies.contributors
        )
        rejected = {**exchanged.rejected, **rejected}
        if self.screen is not None and accepted:
            accepted, screened = self.screen(accepted, self.strategy, round_)
            rejected.update(screened)
        asked = list(sampled) if sampled is not None else list(self.capacity or {})
        if replies.contributors and len(replies.contributors) < len(asked):
            logger.warning(
                "%s round %d: the secure sum holds %d of the %d organisations asked (%s left out); under DP "
                "with the noise at the clients its noise is that share of the planned",
                self.name,
                round_,
                len(replies.contributors),
                len(asked),
                sorted(set(asked) - set(replies.contributors)),
            )
        for client, reason in replies.failures.items():
            logger.warning("%s round %d: client '%s' failed: %s", self.name, round_, client, reason)
        if not accepted:
            raise NoUsableUpdates(
                f"{self.name} round {round_}: no usable update (rejected {rejected}, failed {replies.failures})"
                + diverged_hint(rejected, replies.failures)
            )
        exchanged.seconds.update(replies.seconds)
        voided = exchanging and self._void(round_, asked or [u.client_id for u in accepted], accepted, exchanged)
        server_metrics = {} if voided else self.strategy.aggregate(accepted, self.stopping.tolerance > 0)
        n = sum(u.num_examples for u in accepted)
        names = list(dict.fromkeys(name for u in accepted for name in u.metrics))
        metrics = {
            name: sum(float(u.metrics.get(name, math.nan)) * u.num_examples for u in accepted) / n for name in names
        }
        return RoundRecord(
            round=round_,
            metrics={**metrics, **server_metrics},
            num_examples=n,
            client_loss={u.client_id: float(u.metrics.get("loss", math.nan)) for u in accepted},
            client_bytes={u.client_id: u.nbytes + exchanged.bytes.get(u.client_id, 0) for u in accepted},
            rejected=rejected,
            failed={**exchanged.failed, **replies.failures},
            sampled=list(sampled or []) if self.sample is not None else [],
            exchanges=1 + exchanged.count,
            voided=voided,
            client_seconds=dict(exchanged.seconds),
        )

    def validate(self, engine: Engine, round_: int) -> float | None:
        """Mean validation loss over the clients' held-out documents, weighted by their number.

        Clients without validation documents answer with zero examples and are left out; a
        malformed or non-finite answer is logged and left out, as a rejected update is. With
        no usable answer at all (every node failed this once) the round has no validation loss
        and training goes on; early stopping counts only validations that happened.
        """
        replies = engine.broadcast(self.strategy.evaluation_instruction(round_))

        def check(update: Update, capacity: int | None) -> None:
            validate_metrics_update(update, capacity, VALIDATION_METRIC)

        accepted, _ = self._screen(list(replies.updates), round_, check, self.validation_capacity)
        for client, reason in replies.failures.items():
            logger.warning("%s round %d: client '%s' failed validation: %s", self.name, round_, client, reason)
        counted = [u for u in accepted if u.num_examples > 0]
        n = sum(u.num_examples for u in counted)
        if n == 0:
            logger.warning("%s round %d: no client returned a usable validation loss; no validation", self.name, round_)
            return None
        return sum(float(u.metrics[VALIDATION_METRIC]) * u.num_examples for u in counted) / n

    def _converged(self, record: RoundRecord, round_: int) -> bool:
        """Whether the strategy's convergence metric fell below ``tolerance`` this round (logged when it did)."""
        convergence = self.strategy.convergence_metric
        change = record.metrics.get(convergence) if convergence else None
        if self.stopping.tolerance > 0 and change is not None and change < self.stopping.tolerance:
            logger.info(
                "%s: %s %.2e < tolerance %.2e at round %d; stopping",
                self.name,
                convergence,
                change,
                self.stopping.tolerance,
                round_,
            )
            return True
        return False

    def _count_validation(self, record: RoundRecord, loss: float, round_: int) -> None:
        """Early stopping's bookkeeping: keep the best state so far, stop after ``patience`` validations without one."""
        patience = self.stopping.patience
        record.validation_loss = loss
        if record.validation_loss < self.best_loss:
            self.best_state = None  # the old copy goes first: two at once is a model more at peak
            self.best_loss, self.best_state, self.waited, self.best_round = (
                record.validation_loss,
                self.strategy.snapshot(),
                0,
                round_,
            )
        else:
            self.waited += 1
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

    def run(
        self,
        engine: Engine,
        progress: bool = True,
        on_round_end: Callable[[FederatedServer], None] | None = None,
    ) -> list[RoundRecord]:
        """All rounds from :attr:`next_round` on; returns (and keeps) the per-round history.

        ``on_round_end`` is called after every round (checkpoints are written there).
        """
        every = self.stopping.validation_every
        # miniters=1: tqdm checks the clock at every round and redraws at most once per
        # mininterval. Its default adapts miniters to the early rounds' rate, so after fast
        # first rounds a slowed-down host redrew (and showed the loss) only every ~50 rounds.
        bar = tqdm(
            total=self.stopping.max_rounds,
            initial=self.next_round,
            desc=f"train {self.name}",
            disable=not progress,
            mininterval=1.0,
            miniters=1,
            leave=False,
        )
        postfix: dict[str, str] = {}
        started = last_report = time.perf_counter()
        first = self.next_round
        while self.next_round < self.stopping.max_rounds and not self.stopped_early:
            round_ = self.next_round
            begun = time.perf_counter()
            record = self.run_round(engine, round_)
            now = time.perf_counter()
            record.seconds = now - begun
            self.history.append(record)
            self.next_round = round_ + 1
            if self._converged(record, round_):
                self.stopped_early = True
            elif every and (round_ + 1) % every == 0 and (loss := self.validate(engine, round_)) is not None:
                self._count_validation(record, loss, round_)
                postfix["val"] = f"{record.validation_loss:.1f}"
            # Set before update(), which redraws: the bar shows this round's loss and the
            # latest validation loss, never a stale one.
            bar.set_postfix({**round_postfix(record, self.strategy.convergence_metric), **postfix}, refresh=False)
            bar.update(1)
            if now - last_report >= self.report_every_s or round_ == first:
                self._report(record, (now - started) / (round_ + 1 - first))
                last_report = now
            if on_round_end is not None:
                on_round_end(self)
        bar.close()
        if self.best_state is not None:
            self.strategy.restore(self.best_state)
        return self.history

    def _report(self, record: RoundRecord, per_round: float) -> None:
        """A progress line for a long federation: the round, the time per round and left, who
        answered this round and how fast, who failed (every ``report_every_s`` and at the first)."""
        took = record.client_seconds
        left = (self.stopping.max_rounds - record.round - 1) * per_round
        slowest = max(took, key=took.__getitem__) if took else None
        answers = (
            f"{len(took)} organisation(s) answered (slowest '{slowest}' {took[slowest]:.2f} s, median "
            f"{statistics.median(took.values()):.2f} s)"
            if slowest is not None
            else f"{record.num_examples} examples in the round"
        )
        failed = f"; failed: {sorted(record.failed)}" if record.failed else ""
        logger.info(
            "%s: round %d of %d, %.2f s per round, about %s left; %s%s",
            self.name,
            record.round + 1,
            self.stopping.max_rounds,
            per_round,
            _duration(left),
            answers,
            failed,
        )

    @property
    def finished(self) -> bool:
        return self.stopped_early or self.next_round >= self.stopping.max_rounds

    def checkpoint(self) -> dict[str, Any]:
        """Everything a restarted server needs to go on at :attr:`next_round` as if never stopped
        (tensors and plain values only: :mod:`fedtopic_pipelines.core.persist` stores it)."""
        return {
            "next_round": self.next_round,
            "history": [r.to_dict() for r in self.history],
            "stopped_early": self.stopped_early,
            "best": {
                "loss": self.best_loss,
                "state": self.best_state,
                "waited": self.waited,
                "round": self.best_round,
            },
            "strategy": self.strategy.state_dict(),
            "sitting_out": dict(self.sitting_out),
            "offences": dict(self.offences),
        }

    def resume(self, checkpoint: Mapping[str, Any]) -> None:
        self.next_round = int(checkpoint["next_round"])
        self.history = [RoundRecord.from_dict(r) for r in checkpoint["history"]]
        self.stopped_early = bool(checkpoint["stopped_early"])
        best = checkpoint["best"]
        self.best_loss, self.best_state = float(best["loss"]), best["state"]
        self.waited, self.best_round = int(best["waited"]), best["round"]
        self.strategy.load_state_dict(checkpoint["strategy"])
        self.sitting_out = {str(k): int(v) for k, v in checkpoint.get("sitting_out", {}).items()}
        self.offences = {str(k): int(v) for k, v in checkpoint.get("offences", {}).items()}


def _duration(seconds: float) -> str:
    """``3 h 12 min``, ``4 min 5 s``, ``12 s``."""
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 60} min {s % 60} s" if s >= 60 else f"{s} s"


def _wrong_round(update: object, round_: int) -> str:
    """Why an update of another round (or of none) cannot enter this one."""
    answered = getattr(update, "round", None)
    if isinstance(answered, bool) or not isinstance(answered, int):
        return f"it names no round (round = {answered!r}); this is round {round_}"
    late = "a replay or a stale update" if answered < round_ else "an update for a round not yet run"
    return f"it answers round {answered}, this is round {round_}: {late}"


def _secure_capacity(update: Update, contributors: dict[str, int], limits: dict[str, int]) -> int:
    """The most examples a secure aggregate may claim: the capacities of the organisations summed
    into it when the engine names them (each one's declared count within its own capacity, and
    the counts adding up to the aggregate's), else every organisation's."""
    if not contributors:
        return sum(limits.values())
    unknown = sorted(set(contributors) - set(limits))
    if unknown:
        raise UpdateRejected(SECURE_AGGREGATE, f"it sums organisations not of this federation: {unknown}")
    over = {org: n for org, n in contributors.items() if n > limits[org]}
    if over:
        most = {org: limits[org] for org in over}
        raise UpdateRejected(
            SECURE_AGGREGATE, f"organisations declare more examples than they hold: {over} (at most {most})"
        )
    if sum(contributors.values()) != update.num_examples:
        raise UpdateRejected(
            SECURE_AGGREGATE,
            f"it claims {update.num_examples} examples, its organisations declared {sum(contributors.values())}",
        )
    return sum(limits[org] for org in contributors)
