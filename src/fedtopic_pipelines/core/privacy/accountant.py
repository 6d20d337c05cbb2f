"""Privacy accounting for the Gaussian mechanism composed over T iterations, by a library.

PC-TD (seed 002, Algorithm 1) releases, at every EM iteration, statistics computed from
word counts perturbed with Gaussian noise N(0, (Delta N)^2 sigma^2), Delta N = 1: one
Gaussian mechanism of noise multiplier sigma per iteration, composed T times. The paper
bounds the total with the moments accountant (Abadi et al. 2016); we ask Google's
``dp-accounting`` (the library Flower's own ``RdpAccountant`` wraps) twice: by Renyi DP
(the moments accountant's modern form) and by privacy loss distributions (tighter). Nothing
here computes a privacy bound by hand.

The adjacency is the paper's: two datasets differ in one word occurrence of one document
(``ADD_OR_REMOVE_ONE``). docs/pctd.md says what that protects and what it does not.

Client-level DP for the gradient and weight families (issue 19, docs/privacy.md) asks the same
functions with ``sampling`` q < 1 when only a share of the organisations trains in each round:
each iteration is then a Poisson-sampled Gaussian mechanism (dp-accounting's
``PoissonSampledDpEvent``), the usual amplification by sampling; the rounds sample a fixed number
floor(C K) of organisations, which the Poisson event approximates, as Flower's and Opacus's
accountants do.
"""

from __future__ import annotations

import functools
import logging
import math
import sys
from dataclasses import asdict, dataclass
from typing import Any

from fedtopic_pipelines.core.config import ConfigError

PLD_DISCRETIZATION = 1e-4  # dp-accounting's default grid of the privacy loss (PLD), the finest we use


def pld_interval(sigma: float) -> float:
    """The PLD's grid for noise multiplier ``sigma``: the default 1e-4 from sigma 3.2 up, coarser
    below (1e-3 / sigma^2). A small sigma's privacy loss spans thousands of nats: at the default
    grid sigma 0.25 over 100 iterations took 48 s and sigma 0.1 did not finish in 100 s, while the
    coarser grid changed epsilon by less than 1e-5 relative (docs/pctd.md)."""
    return max(PLD_DISCRETIZATION, 1e-3 / max(sigma, 1e-3) ** 2)


@dataclass(frozen=True)
class PrivacySpent:
    """(epsilon, delta) of T compositions of the Gaussian mechanism, by two accountants.

    ``epsilon_rdp`` and ``epsilon_pld`` are upper bounds on the same mechanism's epsilon at
    ``delta``; PLD's is the tighter. Infinite when ``sigma`` is 0 (no noise, no guarantee)."""

    sigma: float
    steps: int
    delta: float
    sensitivity: float
    epsilon_rdp: float
    epsilon_pld: float
    sampling: float = 1.0

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


def check_delta(delta: float, name: str = "delta") -> None:
    if not (0.0 < delta < 1.0) or not math.isfinite(delta):
        raise ConfigError(f"parameter '{name}' is {delta}; it must lie strictly between 0 and 1")


def check_sigma(sigma: float, name: str = "sigma") -> None:
    if not math.isfinite(sigma) or sigma < 0:
        raise ConfigError(f"parameter '{name}' is {sigma}; the noise's standard deviation must be >= 0")


def _library() -> Any:
    """dp-accounting, imported on first use. It imports absl, whose logging module creates a
    handler on whatever ``sys.stderr`` is at that moment, and that handler closes its stream
    when logging is reconfigured (as every Kedro session does) unless the stream is the
    process's own. Under pytest that stream was a capture file still in use, and closing it
    crashed an xdist worker: the handler is pointed at the process's stderr."""
    import dp_accounting
    import dp_accounting.pld
    import dp_accounting.rdp
    from absl import logging as absl_logging

    handler = absl_logging.get_absl_handler().python_handler
    # With Poisson sampling the RDP accountant warns once per fractional order it drops while
    # calibrating (dozens per call); the orders it keeps still bound epsilon. Errors still show.
    logging.getLogger("absl").setLevel(logging.ERROR)
    if handler.stream is not sys.__stderr__:
        handler.stream = sys.__stderr__
    return dp_accounting


def check_sampling(sampling: float) -> None:
    if not (0.0 < sampling <= 1.0):
        raise ConfigError(f"the sampling rate is {sampling}; it must lie in (0, 1]")


def _event(noise_multiplier: float, steps: int, sampling: float = 1.0) -> Any:
    dp = _library()
    event = dp.GaussianDpEvent(noise_multiplier)
    if sampling < 1.0:
        event = dp.PoissonSampledDpEvent(sampling, event)
    return dp.SelfComposedDpEvent(event, steps)


def _rdp() -> Any:
    return _library().rdp.RdpAccountant()


def _pld(sigma: float) -> Any:
    return _library().pld.PLDAccountant(value_discretization_interval=pld_interval(sigma))


@functools.lru_cache(maxsize=256)  # pure; every party, round and model of a run asks the same few
def gaussian_privacy(
    sigma: float, steps: int, delta: float, sensitivity: float = 1.0, sampling: float = 1.0
) -> PrivacySpent:
    """The (epsilon, delta) of ``steps`` Gaussian mechanisms with noise standard deviation
    ``sensitivity * sigma`` on a query of L2 sensitivity ``sensitivity`` (noise multiplier sigma),
    each on a Poisson sample of rate ``sampling`` (1: everyone, every iteration)."""
    check_sigma(sigma)
    check_delta(delta)
    check_sampling(sampling)
    if steps < 0:
        raise ConfigError(f"the number of iterations is {steps}; it must be >= 0")
    if sensitivity <= 0:
        raise ConfigError(f"the sensitivity is {sensitivity}; it must be > 0")
    if steps == 0:
        return PrivacySpent(sigma, steps, delta, sensitivity, 0.0, 0.0, sampling)
    if sigma == 0:
        return PrivacySpent(sigma, steps, delta, sensitivity, math.inf, math.inf, sampling)
    accountants = {"rdp": _rdp(), "pld": _pld(sigma)}
    epsilons = {}
    for name, accountant in accountants.items():
        accountant.compose(_event(sigma, steps, sampling))
        epsilons[name] = float(accountant.get_epsilon(delta))
    return PrivacySpent(sigma, steps, delta, sensitivity, epsilons["rdp"], epsilons["pld"], sampling)


def rdp_epsilon(sigma: float, steps: int, delta: float, sampling: float = 1.0) -> float:
    """The RDP accountant's epsilon alone (a few milliseconds: the per-round privacy curve)."""
    check_sigma(sigma)
    check_delta(delta)
    check_sampling(sampling)
    if steps <= 0:
        return 0.0
    if sigma == 0:
        return math.inf
    accountant = _rdp()
    accountant.compose(_event(sigma, steps, sampling))
    return float(accountant.get_epsilon(delta))


@functools.lru_cache(maxsize=64)  # a bisection of accountants: every party asks for it every round
def sigma_for_epsilon(
    target_epsilon: float,
    steps: int,
    delta: float,
    accountant: str = "rdp",
    max_sigma: float = 1e4,
    sampling: float = 1.0,
) -> float:
    """The smallest noise multiplier whose ``steps`` compositions are (target_epsilon, delta)-DP
    by ``accountant`` (rdp or pld), by dp-accounting's own calibration (a bisection). PLD's is
    searched below RDP's (PLD is the tighter bound), on the grid of a tenth of RDP's sigma."""
    check_delta(delta)
    if not math.isfinite(target_epsilon) or target_epsilon <= 0:
        raise ConfigError(f"parameter 'target_epsilon' is {target_epsilon}; it must be a positive number")
    if steps <= 0:
        raise ConfigError(f"the number of iterations is {steps}; a target epsilon needs at least one")
    if accountant not in ("rdp", "pld"):
        raise ConfigError(f"parameter 'accountant' is {accountant!r}; expected one of ['pld', 'rdp']")
    check_sampling(sampling)
    check = _rdp()
    check.compose(_event(max_sigma, steps, sampling))
    if check.get_epsilon(delta) > target_epsilon:
        raise ConfigError(
            f"parameter 'target_epsilon' is {target_epsilon}: no noise multiplier up to {max_sigma:g} reaches it "
            f"over {steps} iterations at delta {delta:g}; raise the target or lower the iterations"
        )
    sigma = _calibrate(_rdp, target_epsilon, steps, delta, 1e-3, max_sigma, sampling)
    if accountant == "rdp":
        return sigma
    low = sigma / 10
    return _calibrate(lambda: _pld(low), target_epsilon, steps, delta, low, sigma, sampling)


def _calibrate(
    make, target_epsilon: float, steps: int, delta: float, low: float, high: float, sampling: float = 1.0
) -> float:
    dp = _library()
    bracket = dp.ExplicitBracketInterval(low, high)
    return float(
        dp.calibrate_dp_mechanism(
            make, lambda sigma: _event(sigma, steps, sampling), target_epsilon, delta, bracket, tol=1e-6
        )
    )
