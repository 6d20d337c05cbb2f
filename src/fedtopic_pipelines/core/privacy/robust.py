"""Robust reducers: aggregate clients' dense updates so that a few hostile ones cannot steer the model.

Validation (``core.federated.aggregation``) refuses what is malformed; a *finite* poisoned
update inside the limits (one client of three sending its gradient times -1000) passes it and,
under a weighted mean, ruins the model. These reducers screen updates against each other:

* ``median``: coordinate-wise median (Yin et al. 2018), as Flower's ``FedMedian``;
* ``trimmed_mean``: coordinate-wise mean after cutting ``int(trim_fraction * n)`` values from
  each end (Yin et al. 2018), as Flower's ``FedTrimmedAvg`` with ``beta = trim_fraction``;
* ``krum``: Krum / multi-Krum (Blanchard et al. 2017), as Flower's ``Krum`` strategy: each
  whole update is scored by its squared distances to its ``n - f - 2`` nearest others; the
  best one is kept, or the weighted mean of the ``keep`` best.

Each matches Flower 1.42's ``flwr.server.strategy.aggregate`` function on the same arrays
(tests/core/privacy/test_robust.py), so Flower's documentation and papers describe what runs.
This module imports neither Flower, Kedro nor MLflow.

``update_norms``, ``outliers`` and ``beyond`` are the server's screen (``core.federated.privacy``):
an update whose size is far from the round's median is left out of the round by name, whatever
the rule, and counted.
"""

from __future__ import annotations

import math
import numbers
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch.nn.utils import get_total_norm

from fedtopic_pipelines.core.config import ConfigError

RULES = ("median", "trimmed_mean", "krum")


@dataclass(frozen=True)
class RobustResult:
    """The aggregate, which clients it used (Krum: those kept, best first; else all) and
    Krum's score per client (sum of squared distances to its nearest others; else empty)."""

    tensors: dict[str, torch.Tensor]
    selected: list[int]
    scores: list[float] = field(default_factory=list)


def _check_updates(tensors: Sequence[Mapping[str, torch.Tensor]], weights: Sequence[int | float]) -> list[str]:
    """The tensor names, in the first update's order, once every update has the same names,
    shapes and floating dtypes and every weight is a finite positive number."""
    if not tensors:
        raise ValueError("cannot aggregate an empty list of updates")
    if len(weights) != len(tensors):
        raise ValueError(f"'weights' has {len(weights)} entries for {len(tensors)} updates")
    for w in weights:
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not math.isfinite(w) or w <= 0:
            raise ValueError(f"'weights' must be finite positive numbers, got {w!r}")
    first = tensors[0]
    names = list(first)
    if not names:
        raise ValueError("updates carry no tensors")
    for name, t in first.items():
        if not t.is_floating_point():
            raise ValueError(f"tensor '{name}' has dtype {t.dtype}; robust aggregation needs floating point")
    for i, other in enumerate(tensors[1:], start=1):
        if set(other) != set(names):
            raise ValueError(f"update {i} has tensors {sorted(other)}, update 0 has {sorted(names)}")
        for name in names:
            a, b = first[name], other[name]
            if a.shape != b.shape or a.dtype != b.dtype:
                raise ValueError(
                    f"tensor '{name}' of update {i} is {tuple(b.shape)} {b.dtype}, "
                    f"update 0's {tuple(a.shape)} {a.dtype}"
                )
    return names


def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ConfigError(f"parameter '{name}' is {value!r}; it must be an integer >= 0")
    return int(value)


def robust_aggregate(
    tensors: Sequence[Mapping[str, torch.Tensor]],
    weights: Sequence[int | float],
    rule: str,
    trim_fraction: float = 0.2,
    byzantine: int = 0,
    keep: int = 0,
) -> RobustResult:
    """Aggregate clients' dense updates (same names, shapes, dtypes) by ``rule``, as Flower 1.42 does.

    ``median`` and ``trimmed_mean`` ignore ``weights``, as Flower's ``aggregate_median`` and
    ``aggregate_trimmed_avg`` ignore ``num_examples``: a count a client claims must not buy it
    influence. The median of an even number of values is the mean of the two middle ones
    (``np.median``). ``trimmed_mean`` cuts ``int(trim_fraction * n)`` values from each end,
    Python's float product truncated as Flower does (0.29 * 100 cuts 28).

    ``krum`` scores update i by the sum of squared L2 distances, over all tensors flattened
    together, to its ``n - byzantine - 2`` nearest other updates. ``keep == 0``: the lowest
    score's update (Krum); ``keep > 0``: the ``weights``-weighted mean of the ``keep`` lowest
    (multi-Krum, Flower's ``aggregate`` of them). Ties go to the lower client index. Unlike
    Flower, which then falls back to one neighbour, ``n - byzantine - 2 <= 0`` is an error, and
    so is keeping more than the ``n - byzantine`` updates that can be honest.

    Results keep the inputs' shapes and dtype and are computed in that dtype (Krum's distances
    are accumulated in float64); they never alias the inputs.
    """
    names = _check_updates(tensors, weights)
    if rule not in RULES:
        raise ConfigError(f"parameter 'privacy.robust_rule' is {rule!r}; it must be one of {list(RULES)}")
    if isinstance(trim_fraction, bool) or not isinstance(trim_fraction, numbers.Real) or not 0.0 <= trim_fraction < 0.5:
        raise ConfigError(f"parameter 'privacy.trim_fraction' is {trim_fraction!r}; it must lie in [0, 0.5)")
    n = len(tensors)
    if rule == "median":
        return RobustResult({name: _median(_stack(tensors, name)) for name in names}, list(range(n)))
    if rule == "trimmed_mean":
        cut = int(trim_fraction * n)
        return RobustResult({name: _trimmed_mean(_stack(tensors, name), cut) for name in names}, list(range(n)))
    f = _check_int("privacy.krum_byzantine", byzantine)
    if n - f - 2 <= 0:
        raise ConfigError(
            f"parameter 'privacy.krum_byzantine' is {f}; Krum with {n} clients needs n - f - 2 > 0, i.e. f <= {n - 3}"
        )
    m = _check_int("privacy.krum_keep", keep)
    if m > n - f:
        raise ConfigError(
            f"parameter 'privacy.krum_keep' is {m}; with {n} clients of which {f} may be Byzantine, "
            f"at most {n - f} can be kept"
        )
    return _krum(tensors, weights, names, f, m)


def _stack(tensors: Sequence[Mapping[str, torch.Tensor]], name: str) -> torch.Tensor:
    return torch.stack([t[name] for t in tensors])


def _median(stacked: torch.Tensor) -> torch.Tensor:
    # np.median: the middle value, or (a + b) / 2 of the two middle ones in the input dtype.
    # torch.median would return the lower of the two.
    n = stacked.shape[0]
    ordered = torch.sort(stacked, dim=0).values
    if n % 2:
        return ordered[n // 2].clone()
    return (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def _trimmed_mean(stacked: torch.Tensor, cut: int) -> torch.Tensor:
    n = stacked.shape[0]
    ordered = torch.sort(stacked, dim=0).values
    return ordered[cut : n - cut].mean(dim=0)


def _krum(
    tensors: Sequence[Mapping[str, torch.Tensor]],
    weights: Sequence[int | float],
    names: list[str],
    byzantine: int,
    keep: int,
) -> RobustResult:
    n = len(tensors)
    flat = [torch.cat([t[name].reshape(-1) for name in names]) for t in tensors]
    distance = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            # the difference in the inputs' dtype, as Flower's; its squared norm in float64
            delta = (flat[i] - flat[j]).to(torch.float64)
            distance[i][j] = distance[j][i] = float(torch.dot(delta, delta))
    closest = n - byzantine - 2
    scores = [math.fsum(sorted(d for j, d in enumerate(row) if j != i)[:closest]) for i, row in enumerate(distance)]
    ranked = sorted(range(n), key=lambda i: (scores[i], i))
    if keep == 0:
        best = ranked[0]
        return RobustResult({name: tensors[best][name].clone() for name in names}, [best], scores)
    kept = ranked[:keep]
    # Flower's aggregate(): sum of n_k * x_k, in its order (worst kept first), divided by sum n_k,
    # each step in the inputs' dtype, so the two agree to the last bit.
    order = kept[::-1]
    total_weight = sum(weights[i] for i in order)
    out: dict[str, torch.Tensor] = {}
    for name in names:
        acc = tensors[order[0]][name] * weights[order[0]]
        for i in order[1:]:
            acc += tensors[i][name] * weights[i]
        out[name] = acc / total_weight
    return RobustResult(out, kept, scores)


def update_norms(tensors: Sequence[Mapping[str, torch.Tensor]], exact: bool = True) -> list[float]:
    """The L2 norm of each client's whole update (all tensors together): summed in float64, or
    (``exact=False``, for a screen that compares norms with 10x a median) in each tensor's own
    precision, 1e-6 relative in float32, in one fused call per update (torch's ``foreach`` norms)."""
    if not exact:
        return [float(get_total_norm(list(u.values()), foreach=True)) if u else 0.0 for u in tensors]
    return [
        math.sqrt(math.fsum(float(torch.linalg.vector_norm(t, dtype=torch.float64)) ** 2 for t in u.values()))
        for u in tensors
    ]


def outliers(norms: Sequence[float], factor: float = 10.0) -> list[int]:
    """Indices of the norms above ``factor`` times the median norm (NaN counts as above).

    The median stands for the honest clients while they are a majority; with two clients it is
    their mean, and neither can exceed 10x it: nothing is flagged, as nothing can be told apart.
    """
    return beyond(norms, factor, below=False)


def beyond(values: Sequence[float], factor: float, below: bool = True, others: Sequence[float] = ()) -> list[int]:
    """Indices of the values above ``factor`` times the median of the finite ones (with ``others``:
    of those and ``others``, values seen before), and (``below``) under the median divided by
    ``factor`` (a negative value counts as under); NaN and Inf count as beyond. A median of 0 or
    less tells nothing apart: only non-finite values are returned."""
    if isinstance(factor, bool) or not isinstance(factor, numbers.Real) or not 0 < factor < math.inf:
        raise ConfigError(f"parameter 'privacy.outlier_factor' is {factor!r}; it must be a finite number > 0")
    finite = [x for x in (*values, *others) if math.isfinite(x)]
    median = statistics.median(finite) if finite else 0.0
    if median <= 0:
        return [i for i, x in enumerate(values) if not math.isfinite(x)]
    return [
        i
        for i, x in enumerate(values)
        if not math.isfinite(x) or x > factor * median or (below and x < median / factor)
    ]
