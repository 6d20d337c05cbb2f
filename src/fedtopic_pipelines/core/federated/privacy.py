"""A federation's server under ``privacy`` (docs/privacy.md): its reducer, and the switch that sets it.

:class:`Reducer` replaces a strategy's weighted mean: the mean of clipped and noised updates
under client-level DP (noise drawn by the organisations or by the server), a robust rule's
aggregate. :class:`Screen` leaves out of a round, by name, every update far from the round's
median (``privacy.outlier_factor``), whatever the rule. :func:`apply_privacy` puts them on a server
before the first round, with what each training instruction asks the organisations to do
to their updates. The mechanisms themselves (clipping, noise, the DP plan, robust rules) are
:mod:`fedtopic_pipelines.core.privacy`.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from fedtopic_pipelines.core.config import PrivacyConfig
from fedtopic_pipelines.core.config.aggregation import participants_per_round
from fedtopic_pipelines.core.federated.aggregation import weighted_mean
from fedtopic_pipelines.core.federated.messages import SECURE_AGGREGATE, Update, UpdateKind
from fedtopic_pipelines.core.federated.pooled import is_sum
from fedtopic_pipelines.core.federated.strategies import Exchanging
from fedtopic_pipelines.core.privacy.defences import DPPlan, add_noise, clip, noise_generator, plan_dp
from fedtopic_pipelines.core.privacy.robust import beyond, robust_aggregate, update_norms

logger = logging.getLogger(__name__)


class Reducer:
    """The server's aggregate of a round's accepted updates under ``privacy``.

    ``mean`` (no DP, no robust rule): the weighted mean (gFedNTM eq. 2, FedAvg). With client-level
    DP: the unweighted mean of the updates (clipped and noised by the organisations), or, noise
    at the server, of the updates the server clips, plus N(0, (sigma C / m)^2). A robust rule: its
    aggregate. Sample-level DP changes nothing here: every update is already private (DP-SGD at
    the organisation), so the weighted mean or a robust rule is post-processing; the epsilon is
    recorded. ``reference`` is the broadcast weights for a weights rule (the update is the
    difference), None for gradients.
    """

    def __init__(self, privacy: PrivacyConfig, plan: DPPlan | None, seed: int, name: str = "federated") -> None:
        self.privacy = privacy
        self.plan = plan
        self.seed = seed
        self.name = name

    def __call__(
        self, updates: Sequence[Update], reference: Mapping[str, torch.Tensor] | None, round_: int
    ) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        recorded: dict[str, float] = {}
        if self.plan is not None and self.plan.level == "client":
            return self._dp(updates, reference, round_, recorded)
        if self.plan is not None:
            self._spent(round_, recorded)
        if self.privacy.robust:
            result = robust_aggregate(
                [u.tensors for u in updates],
                [u.num_examples for u in updates],
                self.privacy.robust_rule,
                trim_fraction=self.privacy.trim_fraction,
                byzantine=self.privacy.krum_byzantine,
                keep=self.privacy.krum_keep,
            )
            recorded["robust_kept"] = float(len(result.selected))
            return result.tensors, recorded
        return weighted_mean([u.tensors for u in updates], [u.num_examples for u in updates]), recorded

    def _dp(
        self,
        updates: Sequence[Update],
        reference: Mapping[str, torch.Tensor] | None,
        round_: int,
        recorded: dict[str, float],
    ) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        plan = self.plan
        deltas = [_delta(u.tensors, reference) for u in updates]
        m = len(deltas)
        if plan.noise_at == "server":
            clipped = []
            for delta in deltas:
                kept, norm = clip(delta, plan.clip)
                clipped.append(kept)
                recorded["clipped"] = recorded.get("clipped", 0.0) + float(norm > plan.clip)
            mean = weighted_mean(clipped, [1] * m)
            generator = noise_generator(self.seed, "server", round_)
            mean = add_noise(mean, plan.sigma * plan.clip / m, generator)
        else:  # the organisations clipped and noised: the server only averages, every one the same
            mean = weighted_mean(deltas, [1] * m)
        # a secure-aggregation round's one update is already the organisations' mean (flower/secagg.py)
        if m != plan.per_round and updates[0].client_id != SECURE_AGGREGATE:
            logger.warning(
                "%s round %d: %d updates instead of the %d planned; the noise on the mean is %s than accounted",
                self.name,
                round_,
                m,
                plan.per_round,
                "larger" if m < plan.per_round else "smaller",
            )
        self._spent(round_, recorded)
        if reference is None:
            return mean, recorded
        return {k: reference[k].to(v.device) + v for k, v in mean.items()}, recorded

    def _spent(self, round_: int, recorded: dict[str, float]) -> None:
        """Epsilon so far at the last round and every 100th (the accountant takes a moment), sigma always."""
        plan = self.plan
        if round_ + 1 == plan.rounds or (round_ + 1) % 100 == 0:
            recorded.update(plan.epsilon(round_ + 1))
        recorded["sigma"] = plan.sigma


class Screen:
    """Leaves out of a round every update far from the round's median, by name, and counts it.

    An organisation's update is compared with the others of its round and the accepted ones of
    the last rounds (``privacy.outlier_factor`` = F; the median of the round's values and the
    last :attr:`MEMORY` accepted ones, so that a round of one sampled organisation is judged
    too; at least 3 values, as a median of two is their mean): its example count above F times
    the median count (a claimed capacity buys weight in every mean); its size above F times the
    median size (the L2 norm of a gradient or sparse rows, of weights minus the broadcast ones,
    or of a party's sufficient statistics per document); a party's statistics' total per document
    (its words) or a batch statistic's norm (BatchNorm means, variances) above F times or under
    1/F of the median. Whoever is left out does not enter the aggregate, whichever rule computes
    it, so one organisation sending x1000, -x1000 or a billion examples is a silent one in that
    round. F is set above what honest organisations of the demo reach (docs/privacy.md gives the
    measured ratios), so an honest run loses nothing and equals the undefended one. A subtler
    attack (a sign flip at the honest size) passes: robust rules are for that.
    """

    MEMORY = 50  # accepted values kept per measure: a round of one or two updates is judged against them

    def __init__(self, factor: float, name: str = "federated") -> None:
        self.factor = factor
        self.name = name
        self.left_out: Counter[str] = Counter()  # screened updates by organisation
        self.seen: dict[str, deque[float]] = {}  # accepted values of the last rounds, per measure
        self.largest: dict[str, float] = {}  # the largest ratio to the median an accepted value reached: the margin

    def __call__(self, updates: list[Update], strategy: Any, round_: int) -> tuple[list[Update], dict[str, str]]:
        if updates[0].client_id == SECURE_AGGREGATE:  # the sum: nothing to compare it with
            return updates, {}
        reasons: dict[int, str] = {}  # the same words every round (reports group by them); the figures go to the log
        measured: dict[int, str] = {}
        measures = self._measures(updates, strategy)
        # Under pooled BatchNorm (an exchanging strategy) an organisation's values move fast early in
        # training and carry parts that cancel only across the round: a round of 3 or more is judged
        # by its own median, which the values of earlier rounds would drag behind (docs/privacy.md).
        own_round = isinstance(strategy, Exchanging)
        for what, values, below in measures:
            seen = self.seen.setdefault(what, deque(maxlen=self.MEMORY))
            if len(values) + len(seen) < 3:  # a median of two is their mean: nothing can be told apart
                continue
            before = () if own_round and len(values) >= 3 else seen
            median = statistics.median([v for v in (*values, *before) if math.isfinite(v)] or [0.0])
            out = beyond(values, self.factor, below, before)
            for i in out:
                measured[i] = measured.get(i) or f"{values[i]:.4g}, {_times(values[i], median)} the median {median:.4g}"
                side = f"over {self.factor:g}x" + (f" or under 1/{self.factor:g} of" if below else "")
                reasons.setdefault(i, f"{what} is {side} the median")
            if median > 0:
                ratios = [v / median for i, v in enumerate(values) if i not in out]
                self.largest[what] = max([self.largest.get(what, 0.0), *ratios])
        for what, values, _ in measures:
            self.seen[what].extend(v for i, v in enumerate(values) if i not in reasons)
        kept = [u for i, u in enumerate(updates) if i not in reasons]
        screened = {}
        for i, reason in sorted(reasons.items()):
            client = updates[i].client_id
            screened[client] = f"{reason} (privacy.outlier_factor {self.factor:g})"
            self.left_out[client] += 1
            if self.left_out[client] % 50 == 1:  # the first time, then every 50th: a run of warnings says nothing new
                logger.warning(
                    "%s round %d: update from '%s' left out: %s (%s; %d time(s) so far)",
                    self.name,
                    round_,
                    client,
                    screened[client],
                    measured[i],
                    self.left_out[client],
                )
        return kept, screened

    def _measures(self, updates: list[Update], strategy: Any) -> list[tuple[str, list[float], bool]]:
        """(what, one value per update, whether a value under the median / F is also out)."""
        counts = [float(u.num_examples) for u in updates]
        kind = updates[0].kind
        reference = strategy.parameters() if kind is UpdateKind.WEIGHTS else None
        norms = update_norms([_delta(u.tensors, reference) for u in updates], exact=False)
        measures = [("its example count", counts, False)]
        if kind is UpdateKind.STATISTICS:  # sums over documents: compared per document
            per_document = [x / n for x, n in zip(norms, counts, strict=True)]
            measures.append(("its statistics' norm per document", per_document, False))
            mass = [
                sum(float(t.double().sum()) for t in u.tensors.values()) / n
                for u, n in zip(updates, counts, strict=True)
            ]
            measures.append(("its statistics' total per document", mass, True))
        elif kind is UpdateKind.POOLED_NORM:  # pooled BatchNorm's exchanges, each judged with its own kind
            first = next(iter(updates[0].tensors), "")
            if is_sum(first):  # sums over documents: per document, and too small shifts the statistics too
                per_document = [x / n for x, n in zip(norms, counts, strict=True)]
                measures.append((f"its pooled sums' norm per document ({first})", per_document, True))
            else:
                measures.append((f"its pooled derivatives' norm ({first})", norms, False))
        else:
            measures.append(("its update's norm", norms, False))
        for name in updates[0].statistics:
            values = update_norms([{name: u.statistics[name]} for u in updates])
            measures.append((f"its statistic '{name}''s norm", values, True))
        return measures


def _times(value: float, median: float) -> str:
    if not math.isfinite(value) or median <= 0:
        return "far from"
    ratio = value / median
    return f"{ratio:.3g}x" if ratio >= 1 else f"1/{1 / ratio:.3g} of" if ratio > 0 else "below"


def _delta(tensors: Mapping[str, torch.Tensor], reference: Mapping[str, torch.Tensor] | None) -> dict:
    if reference is None:
        return dict(tensors)
    return {k: t - reference[k].to(t.device) for k, t in tensors.items()}


def _log_plan(
    plan: DPPlan, name: str, batch_size: int, organisations: int, per_round: int, documents: Mapping[str, int] | None
) -> None:
    """Say the guarantee the run is planned to give: its level, clip, noise and epsilon at delta."""
    if plan.level == "sample":
        logger.info(
            "%s: sample-level DP-SGD, each document's gradient clipped to %g, noise multiplier %.4g, batch %d of "
            "the smallest organisation's %d documents (sampling %.3g) over %d rounds: epsilon %.4g (RDP) at "
            "delta %g for one document of any organisation",
            name,
            plan.clip,
            plan.sigma,
            batch_size,
            min(documents.values()),
            plan.sampling,
            plan.rounds,
            plan.epsilon(plan.rounds)["epsilon_rdp"],
            plan.delta,
        )
    else:
        logger.info(
            "%s: client-level DP, clip %g, noise multiplier %.4g, noise at the %s, %d of %d organisations per "
            "round over %d rounds: epsilon %.4g (RDP) at delta %g",
            name,
            plan.clip,
            plan.sigma,
            plan.noise_at,
            per_round,
            organisations,
            plan.rounds,
            plan.epsilon(plan.rounds)["epsilon_rdp"],
            plan.delta,
        )


def apply_privacy(
    server: Any, config: Any, organisations: int, name: str = "federated", documents: Mapping[str, int] | None = None
) -> DPPlan | None:
    """Put ``config.privacy`` on a federation's server before its first round: the screen of
    outlying updates (every family), the strategy's reducer (DP or a robust rule), and with
    noise at the clients what every training instruction asks them to do. The plan is fixed by
    the run's rounds and sampling (``documents``: each organisation's declared training documents,
    for sample-level DP)."""
    privacy = config.privacy
    strategy = server.strategy
    if privacy.outlier_factor > 0:
        server.screen = Screen(privacy.outlier_factor, name)
    if not (privacy.dp.on or privacy.robust):
        return None
    if not hasattr(strategy, "reduce"):
        if privacy.dp.on or privacy.robust:  # TrainConfig refuses these; a strategy without a mean cannot take them
            raise ValueError(f"strategy {type(strategy).__name__} does not take 'privacy.dp' or a robust rule")
        return None
    per_round = participants_per_round(organisations, config.aggregation.client_fraction)
    plan = plan_dp(privacy, server.stopping.max_rounds, per_round, organisations, documents, config.batch_size)
    if not {"dp", "robust"} & config.model.capabilities.privacy:
        # the family's updates are not reduced by a mean of tensors (sparse rows, summed statistics)
        if plan is not None or privacy.robust:
            raise ValueError(
                f"{config.model.family}'s updates take no 'privacy.dp' or robust rule: "
                f"{config.model.capabilities.privacy_refusal}"
            )
        return None
    strategy.reducer = Reducer(privacy, plan, config.seed, name)
    if plan is not None and plan.noise_at == "clients":
        server.context = {**server.context, **plan.instruction(config.seed)}
        if getattr(strategy, "check", None) is not None:
            # a family's own test of an update (NMF: W >= 0) cannot hold for noisy weights; the
            # family's projection still applies to the aggregate
            strategy.check = None
    if plan is not None:
        _log_plan(plan, name, config.batch_size, organisations, per_round, documents)
    return plan
