"""What the organisations and the server do to updates under ``privacy`` (issue 19, docs/privacy.md).

Client-level differential privacy (McMahan et al. 2018, "Learning differentially private
recurrent language models"; Flower's ``DifferentialPrivacy*FixedClipping``): each
organisation's whole update (a round's gradient, or its weights minus the broadcast ones)
is clipped to L2 norm C, and Gaussian noise of std sigma C is added to the sum of the m
updates of a round, which the server divides by m: every organisation weighs the same,
so one organisation moves the mean by at most C / m, whatever its document count.

Where the noise is drawn (``privacy.dp.noise_at``):

* ``clients``: each organisation clips and adds its share N(0, (sigma C)^2 / m) before it
  sends (``privatize``); the shares of m organisations sum to the full noise. A curious
  server sees noisy updates, and with secure aggregation only their sum.
* ``server``: the server clips every update it received and adds the whole noise itself
  (``Reducer`` with ``dp`` at the server), as Flower's server-side wrapper does. The model
  it releases is private; the server itself saw every clipped update in the clear.

Sample-level DP (``privacy.dp.level: sample``) is DP-SGD inside each organisation
(:mod:`fedtopic_pipelines.core.privacy.dpsgd`); here only its plan (epsilon per document) and
the instruction that asks for it.

Robust rules (median, trimmed mean, Krum: :mod:`fedtopic_pipelines.core.privacy.robust`)
replace the weighted mean. Every mode measures each update's norm and logs, by name, an
organisation whose update is ``outlier_factor`` times the round's median norm.
"""

from __future__ import annotations

import logging
import math
import statistics
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fedtopic_pipelines.core.config import PrivacyConfig
from fedtopic_pipelines.core.federated.aggregation import weighted_mean
from fedtopic_pipelines.core.federated.messages import SECURE_AGGREGATE, Update
from fedtopic_pipelines.core.privacy.robust import outliers, update_norms

logger = logging.getLogger(__name__)

# Instruction.config keys (flat scalars: a Flower ConfigRecord holds no nested values): what an
# organisation does to its update before sending under DP with noise at the clients
NOISE_KEYS = ("dp_clip", "dp_std", "dp_seed")
# ... and at which level: "client" (clip the whole update, add a share of the noise) or "sample"
# (DP-SGD: clip each document's gradient, add the whole noise; core/privacy/dpsgd.py)
DP_LEVEL_KEY = "dp_level"


def flat_norm(tensors: Mapping[str, torch.Tensor]) -> float:
    """The L2 norm of all tensors together (the update as one vector)."""
    return update_norms([tensors])[0]


def clip(tensors: Mapping[str, torch.Tensor], bound: float) -> tuple[dict[str, torch.Tensor], float]:
    """``tensors`` scaled by min(1, bound / norm) (the update as one vector), and its norm before."""
    norm = flat_norm(tensors)
    scale = min(1.0, bound / norm) if norm > 0 else 1.0
    return {k: t * scale for k, t in tensors.items()}, norm


def noise_generator(seed: int, who: str, round_: int) -> torch.Generator:
    """A generator for one party's noise in one round: the same in both engines and after a resume."""
    generator = torch.Generator()
    generator.manual_seed((int(seed) * 1_000_003 + zlib.crc32(who.encode()) * 7919 + int(round_)) % (2**63 - 1))
    return generator


def add_noise(tensors: Mapping[str, torch.Tensor], std: float, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Each tensor plus N(0, std^2) noise, drawn on the CPU in name order (device-independent draws)."""
    if std <= 0:
        return dict(tensors)
    out = {}
    for name in sorted(tensors):
        t = tensors[name]
        noise = torch.randn(t.shape, generator=generator, dtype=torch.float64) * std
        out[name] = t + noise.to(dtype=t.dtype, device=t.device)
    return out


def privatize(
    tensors: Mapping[str, torch.Tensor],
    reference: Mapping[str, torch.Tensor] | None,
    bound: float,
    std: float,
    generator: torch.Generator,
) -> dict[str, torch.Tensor]:
    """An organisation's update as it leaves under client-level DP with noise at the clients:
    the update (``reference`` given: the weights minus the broadcast ``reference``) clipped to
    ``bound`` plus its share of the noise; weights go back out as reference + noisy delta."""
    if reference is None:
        clipped, _ = clip(tensors, bound)
        return add_noise(clipped, std, generator)
    delta = {k: t - reference[k].to(t.device) for k, t in tensors.items()}
    clipped, _ = clip(delta, bound)
    noisy = add_noise(clipped, std, generator)
    return {k: reference[k].to(v.device) + v for k, v in noisy.items()}


@dataclass(frozen=True)
class DPPlan:
    """A run's DP, fixed before its first round: the noise multiplier (given, or chosen for the
    target epsilon at the run's rounds and sampling), the sampling rate q, the organisations per
    round m, who draws the noise and the level. At ``client`` level q is the share of the
    organisations sampled per round; at ``sample`` level it is the batch size over the smallest
    organisation's documents (its documents are sampled most often: its epsilon is the largest)."""

    sigma: float
    clip: float
    delta: float
    sampling: float
    per_round: int
    rounds: int
    noise_at: str
    accountant: str
    level: str = "client"

    @property
    def client_std(self) -> float:
        """The noise std an organisation adds. Client level: its share, m shares of variance
        (sigma C)^2 / m sum to (sigma C)^2. Sample level: the whole sigma C on its own sum of
        clipped document gradients (each organisation is its own DP-SGD)."""
        if self.level == "sample":
            return self.sigma * self.clip
        return self.sigma * self.clip / math.sqrt(self.per_round)

    def instruction(self, seed: int) -> dict[str, Any]:
        """What the server asks each organisation to do to its update (Instruction.config's NOISE_KEYS)."""
        keys = dict(zip(NOISE_KEYS, (float(self.clip), float(self.client_std), int(seed)), strict=True))
        return {**keys, DP_LEVEL_KEY: self.level}

    def epsilon(self, rounds: int) -> dict[str, float]:
        """(epsilon, delta) after ``rounds`` rounds, by RDP and PLD (dp_accounting, as PC-TD)."""
        from fedtopic_pipelines.core.privacy.accountant import gaussian_privacy

        spent = gaussian_privacy(self.sigma, rounds, self.delta, 1.0, self.sampling)
        return {"epsilon_rdp": spent.epsilon_rdp, "epsilon_pld": spent.epsilon_pld}


def plan_dp(
    privacy: PrivacyConfig,
    rounds: int,
    per_round: int,
    organisations: int,
    documents: Mapping[str, int] | None = None,
    batch_size: int | None = None,
) -> DPPlan | None:
    """The run's :class:`DPPlan` (None with DP off); a target epsilon picks sigma here, before any round.

    At sample level ``documents`` (each organisation's training documents, as it declared them)
    and ``batch_size`` give the sampling rate. An organisation is counted in every round, trained
    or not (with client sampling that over-counts: epsilon is an upper bound)."""
    dp = privacy.dp
    if not dp.on:
        return None
    if dp.level == "sample":
        if not documents or not batch_size:
            raise ValueError("sample-level DP needs each organisation's document count and the batch size")
        sampling = min(1.0, batch_size / max(1, min(documents.values())))
    else:
        sampling = per_round / organisations
    sigma = dp.noise_multiplier
    if sigma is None:
        from fedtopic_pipelines.core.privacy.accountant import sigma_for_epsilon

        sigma = sigma_for_epsilon(dp.target_epsilon, rounds, dp.delta, dp.accountant, sampling=sampling)
        logger.info(
            "privacy.dp: noise multiplier %.4f reaches epsilon %.3g at delta %g over %d rounds (sampling %.3g)",
            sigma,
            dp.target_epsilon,
            dp.delta,
            rounds,
            sampling,
        )
    return DPPlan(sigma, dp.clip, dp.delta, sampling, per_round, rounds, dp.noise_at, dp.accountant, dp.level)


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
        self.flagged: Counter[str] = Counter()  # outlier updates by organisation

    def _outliers(self, updates: Sequence[Update], reference: Mapping[str, torch.Tensor] | None, round_: int) -> dict:
        factor = self.privacy.outlier_factor
        if factor <= 0 or len(updates) < 3:
            return {}
        norms = update_norms([_delta(u.tensors, reference) for u in updates])
        median = statistics.median(norms)
        flagged = {updates[i].client_id: norms[i] for i in outliers(norms, factor)} if median > 0 else {}
        for client, norm in flagged.items():
            self.flagged[client] += 1
            if self.flagged[client] % 50 != 1:  # the first time, then every 50th: a run of warnings says nothing new
                continue
            logger.warning(
                "%s round %d: update from '%s' has norm %.3g, %.0fx the round's median %.3g "
                "(privacy.outlier_factor %g; %d time(s) so far)%s",
                self.name,
                round_,
                client,
                norm,
                norm / median,
                median,
                factor,
                self.flagged[client],
                "" if self.privacy.robust else "; it enters the mean (privacy.robust_rule: mean)",
            )
        return {"outliers": float(len(flagged))}

    def __call__(
        self, updates: Sequence[Update], reference: Mapping[str, torch.Tensor] | None, round_: int
    ) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        recorded = self._outliers(updates, reference, round_)
        if self.plan is not None and self.plan.level == "client":
            return self._dp(updates, reference, round_, recorded)
        if self.plan is not None:
            self._spent(round_, recorded)
        if self.privacy.robust:
            from fedtopic_pipelines.core.privacy.robust import robust_aggregate

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


def _delta(tensors: Mapping[str, torch.Tensor], reference: Mapping[str, torch.Tensor] | None) -> dict:
    if reference is None:
        return dict(tensors)
    return {k: t - reference[k].to(t.device) for k, t in tensors.items()}


def apply_privacy(
    server: Any, config: Any, organisations: int, name: str = "federated", documents: Mapping[str, int] | None = None
) -> DPPlan | None:
    """Put ``config.privacy`` on a federation's server before its first round: the strategy's
    reducer (DP or a robust rule), and with noise at the clients what every training
    instruction asks them to do. The plan is fixed by the run's rounds and sampling
    (``documents``: each organisation's declared training documents, for sample-level DP)."""
    from fedtopic_pipelines.core.federated.local import participants_per_round

    privacy = config.privacy
    strategy = server.strategy
    if not (privacy.dp.on or privacy.robust or privacy.outlier_factor > 0):
        return None
    if not hasattr(strategy, "reduce"):
        if privacy.dp.on or privacy.robust:  # TrainConfig refuses these; a strategy without a mean cannot take them
            raise ValueError(f"strategy {type(strategy).__name__} does not take 'privacy.dp' or a robust rule")
        return None
    per_round = participants_per_round(organisations, config.aggregation.client_fraction)
    plan = plan_dp(privacy, server.stopping.max_rounds, per_round, organisations, documents, config.batch_size)
    from fedtopic_pipelines.core.federated.strategies import SparseRowsSGD

    if isinstance(strategy, SparseRowsSGD):  # its rows are reduced by sparse_row_mean, not a mean of tensors
        if plan is not None or privacy.robust:
            raise ValueError("word2vec's sparse rows take no 'privacy.dp' or robust rule (docs/privacy.md)")
        return None
    strategy.reducer = Reducer(privacy, plan, config.seed, name)
    if plan is not None and plan.noise_at == "clients":
        server.context = {**server.context, **plan.instruction(config.seed)}
        if getattr(strategy, "check", None) is not None:
            # a family's own test of an update (NMF: W >= 0) cannot hold for noisy weights; the
            # family's projection still applies to the aggregate
            strategy.check = None
    if plan is not None and plan.level == "sample":
        logger.info(
            "%s: sample-level DP-SGD, each document's gradient clipped to %g, noise multiplier %.4g, batch %d of "
            "the smallest organisation's %d documents (sampling %.3g) over %d rounds: epsilon %.4g (RDP) at "
            "delta %g for one document of any organisation",
            name,
            plan.clip,
            plan.sigma,
            config.batch_size,
            min(documents.values()),
            plan.sampling,
            plan.rounds,
            plan.epsilon(plan.rounds)["epsilon_rdp"],
            plan.delta,
        )
    elif plan is not None:
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
    return plan
