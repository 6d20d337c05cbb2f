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
  (``Reducer`` with ``dp`` at the server, :mod:`fedtopic_pipelines.core.federated.privacy`),
  as Flower's server-side wrapper does. The model
  it releases is private; the server itself saw every clipped update in the clear.

Sample-level DP (``privacy.dp.level: sample``) is DP-SGD inside each organisation
(:mod:`fedtopic_pipelines.core.privacy.dpsgd`); here only its plan (epsilon per document) and
the instruction that asks for it.

Robust rules (median, trimmed mean, Krum: :mod:`fedtopic_pipelines.core.privacy.robust`)
replace the weighted mean. Before any rule, the server's screen leaves out of the round, by
name, an organisation whose update or example count is ``outlier_factor`` times the round's
median (:class:`fedtopic_pipelines.core.federated.privacy.Screen`).

This module holds the mechanisms (clipping, noise, the run's DP plan): they know nothing of
the engine's messages, so the engine's clients and server both use them. The server's
reducer and :func:`apply_privacy` are :mod:`fedtopic_pipelines.core.federated.privacy`.
"""

from __future__ import annotations

import logging
import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from fedtopic_pipelines.core.config import PrivacyConfig
from fedtopic_pipelines.core.privacy.accountant import gaussian_privacy, sigma_for_epsilon
from fedtopic_pipelines.core.privacy.robust import update_norms

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
