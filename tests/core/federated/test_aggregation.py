"""Validation of untrusted updates per kind, and the reducers."""

import numpy as np
import pytest
import torch

from fedtopic_pipelines.core.federated.aggregation import (
    TensorSpec,
    UpdateRejected,
    sparse_row_mean,
    total,
    validate_metrics_update,
    validate_update,
    weighted_mean,
)
from fedtopic_pipelines.core.federated.messages import Update, UpdateKind

SPECS = {"w": TensorSpec((2, 2), torch.float32)}
GRAD = UpdateKind.GRADIENTS


def _update(tensor, n=3, name="w", kind=GRAD, metrics=None, **extra) -> Update:
    return Update("org", kind, {name: tensor}, n, metrics=metrics or {}, **extra)


def test_weighted_by_batch_size_eq2() -> None:
    out = weighted_mean([{"w": torch.tensor(1.0)}, {"w": torch.tensor(4.0)}], [1, 3])
    assert out["w"].item() == pytest.approx((1 * 1 + 3 * 4) / 4)


def test_total_sums_statistics() -> None:
    out = total([{"m": torch.tensor([1.0, 2.0])}, {"m": torch.tensor([3.0, -1.0])}])
    assert out["m"].tolist() == [4.0, 1.0]


def test_valid_update_passes() -> None:
    validate_update(_update(torch.zeros(2, 2)), GRAD, SPECS, capacity=3)


@pytest.mark.parametrize(
    ("update", "reason"),
    [
        (_update(torch.tensor([[float("nan"), 0], [0, 0]])), "NaN or Inf"),
        (_update(torch.tensor([[float("inf"), 0], [0, 0]])), "NaN or Inf"),
        (_update(torch.zeros(3, 2)), "shape"),
        (_update(torch.zeros(2, 2), name="v"), "names differ"),
        (_update(torch.zeros(2, 2), n=0), "at least 1"),
        (_update(torch.zeros(2, 2), kind=UpdateKind.WEIGHTS), "expects 'gradients'"),
        # dtypes that crash or corrupt aggregation for everyone
        (_update(torch.zeros(2, 2, dtype=torch.float16)), "dtype torch.float16"),
        (_update(torch.zeros(2, 2, dtype=torch.complex64)), "dtype torch.complex64"),
        (_update(torch.zeros(2, 2, dtype=torch.int64)), "dtype torch.int64"),
        (_update(torch.zeros(2, 2, dtype=torch.bool)), "dtype torch.bool"),
        # not a tensor at all
        (_update(np.zeros((2, 2), dtype=np.float32)), "is a ndarray, not a tensor"),
        (_update(torch.zeros(2, 2).to_sparse()), "layout"),
        # one client claiming all the weight
        (_update(torch.zeros(2, 2), n=True), "must be an integer"),
        (_update(torch.zeros(2, 2), n=10**9), "exceeds the 3 this client declared"),
        (_update(torch.zeros(2, 2), n=2.0), "must be an integer"),
        # metrics that are not finite numbers
        (_update(torch.zeros(2, 2), metrics={"loss": "low"}), "metric 'loss' is a str"),
        (_update(torch.zeros(2, 2), metrics={"loss": float("nan")}), "metric 'loss' is not finite"),
        (_update(torch.zeros(2, 2), metrics={"loss": True}), "metric 'loss' is a bool"),
        # row indices on a dense kind, statistics nobody asked for
        (_update(torch.zeros(2, 2), row_indices={"w": torch.tensor([0])}), "only for 'sparse_rows'"),
        (_update(torch.zeros(2, 2), statistics={"s": torch.zeros(1)}), "statistic names differ"),
        ("not an update", "is not an Update"),
    ],
)
def test_untrusted_updates_are_rejected_with_a_reason(update, reason) -> None:
    with pytest.raises(UpdateRejected, match=reason):
        validate_update(update, GRAD, SPECS, capacity=3)


def test_statistics_are_checked_like_tensors() -> None:
    stats = {"bn.mean": TensorSpec((2,), torch.float32)}
    good = _update(torch.zeros(2, 2), statistics={"bn.mean": torch.zeros(2)})
    validate_update(good, GRAD, SPECS, stats, capacity=3)
    bad = _update(torch.zeros(2, 2), statistics={"bn.mean": torch.zeros(2, dtype=torch.float64)})
    with pytest.raises(UpdateRejected, match="statistic 'bn.mean' has dtype torch.float64"):
        validate_update(bad, GRAD, SPECS, stats, capacity=3)


ROWS = {"emb": TensorSpec((5, 3), torch.float32)}
SPARSE = UpdateKind.SPARSE_ROWS


def _rows(index, values=None, name="emb") -> Update:
    index = torch.tensor(index, dtype=torch.int64)
    values = torch.ones(len(index), 3) if values is None else values
    return Update("org", SPARSE, {name: values}, 2, row_indices={name: index})


@pytest.mark.parametrize(
    ("update", "reason"),
    [
        (_rows([0, 5]), r"must lie in \[0, 5\)"),
        (_rows([-1, 2]), r"must lie in \[0, 5\)"),
        (_rows([1, 1]), "no repeat of a row"),
        (_rows([3, 1]), "must increase"),
        (_rows([1, 2], torch.ones(3, 3)), "shape"),
        (_rows([1], name="other"), "unknown tensors"),
        (_rows([1, 2], torch.tensor([[0.0, float("nan"), 0.0], [1.0, 1.0, 1.0]])), "sparse rows 'emb' contains NaN"),
        (_rows([1, 2], torch.tensor([[0.0, 0.0, 0.0], [float("-inf"), 1.0, 1.0]])), "sparse rows 'emb' contains NaN"),
        (Update("org", SPARSE, {"emb": torch.ones(1, 3)}, 2, row_indices={"emb": torch.tensor([1.0])}), "int64"),
        (Update("org", SPARSE, {"emb": torch.ones(1, 3)}, 2), "row indices for"),
    ],
)
def test_sparse_rows_are_checked(update, reason) -> None:
    with pytest.raises(UpdateRejected, match=reason):
        validate_update(update, SPARSE, ROWS, capacity=4)


def test_sparse_row_mean_equals_the_dense_weighted_mean_on_the_touched_rows() -> None:
    generator = torch.Generator().manual_seed(0)
    a = _rows([0, 3], torch.randn(2, 3, generator=generator))
    b = _rows([1, 3, 4], torch.randn(3, 3, generator=generator))
    c = _rows([4, 1], torch.randn(2, 3, generator=generator))  # the mean itself takes rows in any order
    validate_update(a, SPARSE, ROWS, capacity=4)
    validate_update(b, SPARSE, ROWS, capacity=4)
    rows, mean = sparse_row_mean([a, b, c], [2, 6, 1])["emb"]
    dense = []
    for update in (a, b, c):
        full = torch.zeros(5, 3)
        full[update.row_indices["emb"]] = update.tensors["emb"]
        dense.append({"emb": full})
    expected = weighted_mean(dense, [2, 6, 1])["emb"]
    assert rows.tolist() == [0, 1, 3, 4]  # row 2 untouched: not materialised
    assert torch.allclose(mean, expected[rows], atol=1e-7)


def test_validation_replies_carry_only_a_count_and_a_finite_loss() -> None:
    ok = Update("org", UpdateKind.METRICS, {}, 5, metrics={"validation_loss": 2.0})
    validate_metrics_update(ok, capacity=5, metric="validation_loss")
    validate_metrics_update(Update("org", UpdateKind.METRICS, {}, 0), capacity=5, metric="validation_loss")
    for bad, reason in [
        (Update("org", UpdateKind.METRICS, {}, 6, metrics={"validation_loss": 2.0}), "exceeds the 5"),
        (Update("org", UpdateKind.METRICS, {}, 5, metrics={"validation_loss": float("inf")}), "not finite"),
        (Update("org", UpdateKind.METRICS, {}, 5), "without 'validation_loss'"),
        (Update("org", UpdateKind.METRICS, {"w": torch.zeros(1)}, 5, metrics={"validation_loss": 1.0}), "no tensors"),
        (Update("org", GRAD, {}, 5, metrics={"validation_loss": 1.0}), "kind 'gradients'"),
    ]:
        with pytest.raises(UpdateRejected, match=reason):
            validate_metrics_update(bad, capacity=5, metric="validation_loss")
