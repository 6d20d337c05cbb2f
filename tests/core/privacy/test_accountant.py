"""The privacy accountant: dp-accounting's values, Theorem 1's bound, and bad parameters."""

from __future__ import annotations

import logging.config
import math
import sys

import numpy as np
import pytest

from fedtopic_pipelines.core.config import ConfigError
from fedtopic_pipelines.core.privacy.accountant import gaussian_privacy, sigma_for_epsilon


def test_known_values_of_the_library() -> None:
    """Gaussian, noise multiplier 5, composed 50 times, delta 1e-5: dp-accounting 0.6.0's RDP
    and PLD accountants give 7.077 and 6.573 (measured once with the library by hand)."""
    spent = gaussian_privacy(5.0, 50, 1e-5)
    assert spent.epsilon_rdp == pytest.approx(7.0774, abs=1e-3)
    assert spent.epsilon_pld == pytest.approx(6.5730, abs=1e-3)


def _moments_bound(sigma: float, steps: int, delta: float) -> float:
    """Theorem 1's route (Abadi et al. 2016, lemma 3 and eq. 17): alpha(lambda) <= T lambda
    (lambda + 1) / (2 sigma^2), epsilon = min over lambda of (alpha(lambda) + log(1/delta)) / lambda."""
    lambdas = np.arange(1, 5000)
    return float(np.min((steps * lambdas * (lambdas + 1) / (2 * sigma**2) + math.log(1 / delta)) / lambdas))


@pytest.mark.parametrize(("sigma", "steps"), [(1.0, 10), (2.0, 50), (5.0, 50), (10.0, 200)])
def test_accountants_within_theorem_1s_moments_bound(sigma: float, steps: int) -> None:
    """RDP is the moments accountant at real orders, so it is at most the integer-order bound,
    and PLD is tighter than both; neither is far below it (the same mechanism)."""
    spent = gaussian_privacy(sigma, steps, 1e-5)
    bound = _moments_bound(sigma, steps, 1e-5)
    assert spent.epsilon_pld <= spent.epsilon_rdp <= bound * (1 + 1e-9)
    assert spent.epsilon_pld >= 0.7 * bound


def test_theorem_1s_scaling_of_sigma_with_iterations() -> None:
    """sigma = Theta(sqrt(T log(1/delta)) / epsilon): four times the iterations need about
    twice the noise for the same (epsilon, delta)."""
    ratio = sigma_for_epsilon(1.0, 200, 1e-5) / sigma_for_epsilon(1.0, 50, 1e-5)
    assert 1.8 < ratio < 2.05


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_target_epsilon_gives_the_smallest_sigma_that_meets_it(accountant: str) -> None:
    sigma = sigma_for_epsilon(2.0, 30, 1e-5, accountant)
    field = f"epsilon_{accountant}"
    assert getattr(gaussian_privacy(sigma, 30, 1e-5), field) <= 2.0 + 1e-4
    assert getattr(gaussian_privacy(sigma * 0.99, 30, 1e-5), field) > 2.0


def test_no_noise_is_no_guarantee_and_no_iteration_spends_nothing() -> None:
    assert math.isinf(gaussian_privacy(0.0, 10, 1e-5).epsilon_rdp)
    assert gaussian_privacy(1.0, 0, 1e-5).epsilon_pld == 0.0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: gaussian_privacy(-0.1, 10, 1e-5), r"'sigma' is -0.1"),
        (lambda: gaussian_privacy(1.0, 10, 0.0), r"'delta' is 0.0"),
        (lambda: gaussian_privacy(1.0, 10, 1.0), r"'delta' is 1.0"),
        (lambda: sigma_for_epsilon(1.0, 10, 1.5), r"'delta' is 1.5"),
        (lambda: sigma_for_epsilon(-1.0, 10, 1e-5), r"'target_epsilon' is -1.0"),
        (lambda: sigma_for_epsilon(1e-3, 1000, 1e-5), r"no noise multiplier up to 10000 reaches it over 1000"),
        (lambda: sigma_for_epsilon(1.0, 10, 1e-5, "moments"), r"'accountant' is 'moments'"),
    ],
)
def test_bad_privacy_parameters_are_named(call, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        call()


def test_the_librarys_logging_handler_leaves_the_streams_open(capsys) -> None:
    """absl (imported by dp-accounting) makes a handler on the stderr of the moment and closes
    it when logging is reconfigured, as a Kedro session does: it must hold the process's own
    stderr, which it never closes, not the stream in place when it was imported."""
    gaussian_privacy(1.0, 1, 1e-5)
    from absl import logging as absl_logging

    assert absl_logging.get_absl_handler().python_handler.stream is sys.__stderr__
    logging.config.dictConfig({"version": 1, "disable_existing_loggers": False})
    sys.stderr.write("still open\n")
    assert "still open" in capsys.readouterr().err
