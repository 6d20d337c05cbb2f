"""Robust reducers: equal to Flower 1.42's on the same arrays, bad parameters named, a -1000x client outvoted."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from flwr.server.strategy.aggregate import (
    _compute_distances,
    aggregate_krum,
    aggregate_median,
    aggregate_trimmed_avg,
)

from fedtopic_pipelines.core.config import ConfigError
from fedtopic_pipelines.core.federated.aggregation import weighted_mean
from fedtopic_pipelines.core.privacy.robust import outliers, robust_aggregate, update_norms

SHAPES = {"beta": (6, 4), "bias": (5,), "cube": (2, 3, 2), "scale": ()}


def _clients(n: int, seed: int, attacker: bool) -> list[dict[str, torch.Tensor]]:
    """``n`` clients' updates around a shared direction; with ``attacker``, client 1 sends -1000x its own."""
    gen = torch.Generator().manual_seed(seed)
    base = {name: torch.randn(shape, generator=gen) for name, shape in SHAPES.items()}
    out = [{name: b + 0.3 * torch.randn(b.shape, generator=gen) for name, b in base.items()} for _ in range(n)]
    if attacker:
        out[1] = {name: -1e3 * t for name, t in out[1].items()}
    return out


def _weights(n: int, kind: str) -> list[int | float]:
    rng = np.random.default_rng(n)
    if kind == "int":
        return [int(x) for x in rng.integers(1, 500, n)]
    return [float(x) for x in rng.uniform(0.1, 50.0, n)]


def _flower(clients: list[dict[str, torch.Tensor]], weights: list[int | float]) -> list[tuple[list[np.ndarray], int]]:
    """Flower's form: (list of ndarrays in the first client's name order, num_examples) per client."""
    names = list(clients[0])
    return [([c[name].numpy() for name in names], w) for c, w in zip(clients, weights, strict=True)]  # type: ignore[misc]


def _assert_close(ours: dict[str, torch.Tensor], theirs: list[np.ndarray], rtol: float, exact: bool = False) -> None:
    assert list(ours) == list(SHAPES)
    for (name, got), want in zip(ours.items(), theirs, strict=True):
        assert got.dtype == torch.float32 and tuple(got.shape) == SHAPES[name]
        assert want.dtype == np.float32
        if exact:
            np.testing.assert_array_equal(got.numpy(), want, err_msg=name)
        else:
            scale = float(np.abs(want).max())
            np.testing.assert_allclose(got.numpy(), want, rtol=rtol, atol=rtol * scale, err_msg=name)


CASES = [(n, w, a) for n in (5, 6, 9) for w in ("int", "float") for a in (False, True)]


@pytest.mark.parametrize(("n", "weight_kind", "attacker"), CASES)
def test_median_equals_flowers(n: int, weight_kind: str, attacker: bool) -> None:
    """Bit for bit, odd and even n (the mean of the two middle values, not torch's lower one)."""
    clients, weights = _clients(n, n, attacker), _weights(n, weight_kind)
    result = robust_aggregate(clients, weights, "median")
    _assert_close(result.tensors, aggregate_median(_flower(clients, weights)), 0.0, exact=True)
    assert result.selected == list(range(n)) and result.scores == []


@pytest.mark.parametrize(("n", "weight_kind", "attacker"), CASES)
@pytest.mark.parametrize("beta", [0.0, 0.1, 0.2, 0.3, 0.45])
def test_trimmed_mean_equals_flowers(n: int, weight_kind: str, attacker: bool, beta: float) -> None:
    """To float32 rounding: Flower's np.partition leaves the kept values in another summation order."""
    clients, weights = _clients(n, n, attacker), _weights(n, weight_kind)
    result = robust_aggregate(clients, weights, "trimmed_mean", trim_fraction=beta)
    _assert_close(result.tensors, aggregate_trimmed_avg(_flower(clients, weights), beta), 1e-6)


def test_trim_counts_as_flower_truncates() -> None:
    """int(beta * n) values cut from each end, Python's float product included: 0.29 * 100 cuts 28."""
    values = [{"x": torch.tensor([float(i)])} for i in range(100)]
    weights = [1] * 100
    for beta, cut in [(0.29, 28), (0.3, 30), (0.1, 10), (0.499, 49)]:
        assert int(beta * 100) == cut
        got = robust_aggregate(values, weights, "trimmed_mean", trim_fraction=beta).tensors["x"]
        assert got.item() == pytest.approx(np.mean(np.arange(cut, 100 - cut)))
        assert got.item() == pytest.approx(aggregate_trimmed_avg(_flower(values, weights), beta)[0].item())


@pytest.mark.parametrize(("n", "weight_kind", "attacker"), CASES)
@pytest.mark.parametrize(("byzantine", "keep"), [(0, 0), (1, 0), (2, 0), (1, 1), (1, 3), (2, 2), (0, 4)])
def test_krum_equals_flowers(n: int, weight_kind: str, attacker: bool, byzantine: int, keep: int) -> None:
    """Krum returns Flower's chosen update bit for bit; multi-Krum Flower's weighted mean of the same
    kept clients, bit for bit too (same order of sums); the scores to float32 rounding (Flower takes
    the norm in float32 and squares it)."""
    clients, weights = _clients(n, 100 + n, attacker), _weights(n, weight_kind)
    flower = _flower(clients, weights)
    result = robust_aggregate(clients, weights, "krum", byzantine=byzantine, keep=keep)
    _assert_close(result.tensors, aggregate_krum(flower, byzantine, keep), 0.0, exact=True)

    distance = _compute_distances([w for w, _ in flower])
    closest = max(1, n - byzantine - 2)
    scores = [float(np.sum(np.sort(row)[1 : closest + 1])) for row in distance]
    np.testing.assert_allclose(result.scores, scores, rtol=1e-5)
    if keep == 0:
        assert result.selected == [int(np.argmin(scores))]
    else:
        assert sorted(result.selected) == sorted(int(i) for i in np.argsort(scores)[::-1][n - keep :])
        assert result.selected == sorted(result.selected, key=lambda i: result.scores[i])
    if attacker:
        assert 1 not in result.selected


def test_krum_ties_go_to_the_lower_index() -> None:
    same = {"x": torch.ones(3)}
    result = robust_aggregate([dict(same), {"x": torch.zeros(3)}, dict(same), dict(same)], [1, 1, 1, 1], "krum")
    assert result.selected == [0]


def test_results_do_not_alias_inputs_and_keep_dtype() -> None:
    clients = [{"w": torch.randn(3, 2, dtype=torch.float64)} for _ in range(5)]
    for rule, extra in [("median", {}), ("trimmed_mean", {}), ("krum", {}), ("krum", {"keep": 2})]:
        out = robust_aggregate(clients, [1] * 5, rule, **extra).tensors["w"]
        assert out.dtype == torch.float64 and out.shape == (3, 2)
        assert all(out.data_ptr() != c["w"].data_ptr() for c in clients)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rule": "mean"}, "'privacy.robust_rule'"),
        ({"rule": "trimmed_mean", "trim_fraction": 0.5}, r"'privacy.trim_fraction' is 0.5; it must lie in \[0, 0.5\)"),
        ({"rule": "trimmed_mean", "trim_fraction": -0.1}, "'privacy.trim_fraction'"),
        ({"rule": "trimmed_mean", "trim_fraction": float("nan")}, "'privacy.trim_fraction'"),
        ({"rule": "krum", "byzantine": 3}, "'privacy.krum_byzantine' is 3; Krum with 5 clients needs n - f - 2 > 0"),
        ({"rule": "krum", "byzantine": -1}, "'privacy.krum_byzantine'"),
        ({"rule": "krum", "byzantine": 1.0}, "'privacy.krum_byzantine'"),
        ({"rule": "krum", "byzantine": 1, "keep": 5}, "'privacy.krum_keep' is 5"),
        ({"rule": "krum", "keep": -1}, "'privacy.krum_keep'"),
    ],
)
def test_bad_parameters_are_named(kwargs: dict, message: str) -> None:
    clients = _clients(5, 0, False)
    with pytest.raises(ConfigError, match=message):
        robust_aggregate(clients, [1] * 5, **kwargs)


def test_krum_needs_three_clients() -> None:
    with pytest.raises(ValueError, match="'privacy.krum_byzantine' is 0; Krum with 2 clients"):
        robust_aggregate(_clients(2, 0, False), [1, 1], "krum")


@pytest.mark.parametrize(
    ("tensors", "weights", "message"),
    [
        ([], [], "empty list"),
        ([{"w": torch.zeros(2)}] * 2, [1], "'weights' has 1 entries for 2 updates"),
        ([{"w": torch.zeros(2)}] * 2, [1, 0], "'weights' must be finite positive"),
        ([{"w": torch.zeros(2)}] * 2, [1, math.inf], "'weights' must be finite positive"),
        ([{"w": torch.zeros(2)}, {"v": torch.zeros(2)}], [1, 1], "update 1 has tensors"),
        ([{"w": torch.zeros(2)}, {"w": torch.zeros(3)}], [1, 1], "tensor 'w' of update 1"),
        ([{"w": torch.zeros(2)}, {"w": torch.zeros(2, dtype=torch.float64)}], [1, 1], "tensor 'w' of update 1"),
        ([{"w": torch.zeros(2, dtype=torch.int64)}] * 2, [1, 1], "floating point"),
        ([{}, {}], [1, 1], "no tensors"),
    ],
)
def test_bad_updates_raise(tensors: list, weights: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        robust_aggregate(tensors, weights, "median")


@pytest.mark.parametrize(
    ("rule", "extra"),
    [("median", {}), ("trimmed_mean", {}), ("krum", {"byzantine": 1}), ("krum", {"byzantine": 1, "keep": 3})],
)
def test_a_minus_1000x_client_is_outvoted(rule: str, extra: dict) -> None:
    """One of six clients sends -1000x its update: the robust result stays within the honest
    clients' spread of their mean; the weighted mean (even giving it the fewest examples) is far off."""
    clients = _clients(6, 7, attacker=True)
    weights = [100, 10, 100, 100, 100, 100]
    honest = [c for i, c in enumerate(clients) if i != 1]
    honest_mean = weighted_mean(honest, [1] * len(honest))

    def gap(out: dict[str, torch.Tensor]) -> float:
        return max(float((out[k] - honest_mean[k]).abs().max()) for k in SHAPES)

    assert gap(weighted_mean(clients, weights)) > 10.0
    assert gap(robust_aggregate(clients, weights, rule, **extra).tensors) < 0.6


def test_norms_and_outliers_flag_the_attacker() -> None:
    clients = _clients(6, 7, attacker=True)
    norms = update_norms(clients)
    flat = [torch.cat([t.reshape(-1) for t in c.values()]).double() for c in clients]
    assert norms == pytest.approx([float(f.norm()) for f in flat], rel=1e-12)
    assert outliers(norms) == [1]
    assert outliers(update_norms(_clients(6, 7, attacker=False))) == []


def test_outliers_edge_cases() -> None:
    assert outliers([]) == []
    assert outliers([1.0, 1000.0]) == []  # two clients: the median is their mean
    assert outliers([0.0, 0.0, 0.0]) == []
    assert outliers([1.0, 1.0, 0.0, 5.0], factor=2.0) == [3]
    assert outliers([1.0, math.nan, math.inf, 1.0, 1.0]) == [1, 2]
    with pytest.raises(ConfigError, match="'privacy.outlier_factor'"):
        outliers([1.0], factor=0.0)
