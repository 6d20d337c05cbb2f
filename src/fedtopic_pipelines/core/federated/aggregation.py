"""Validation of untrusted updates, and the reducers that strategies aggregate them with.

Everything a client sends is checked before it can touch the global model: the update's
kind, the Python types of its fields (a numpy array or a string is not a tensor), each
tensor's dtype (the model's own: float16 or complex tensors would break aggregation for
everyone), shape and finiteness, its example count (a true integer, at least 1, at most
what the client declared when it prepared), its metrics (finite real numbers), and, per
kind, the sparse row indices (in range, no duplicates). A failed check raises
:class:`UpdateRejected` with the reason; the server logs it and leaves the update out.

Reducers turn accepted updates into one value per tensor name: a weighted mean
(FedSGD, FedAvg: gFedNTM eq. 2), a sum (sufficient statistics, PC-TD), or a weighted mean
of sparse rows that only touches the rows some client sent (Word2Vec, seed 003 sec. 4.5.1).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn.utils import get_total_norm

from fedtopic_pipelines.core.federated.messages import Update, UpdateKind
from fedtopic_pipelines.core.rows import add_rows, distinct_positions


class UpdateRejected(ValueError):
    """An update that must not touch the global model; ``reason`` says why."""

    def __init__(self, client_id: str, reason: str) -> None:
        super().__init__(f"update from client '{client_id}' rejected: {reason}")
        self.client_id = client_id
        self.reason = reason


@dataclass(frozen=True)
class TensorSpec:
    """What a tensor of an update must look like: the model's shape and dtype."""

    shape: tuple[int, ...]
    dtype: torch.dtype

    @classmethod
    def of(cls, tensor: torch.Tensor) -> TensorSpec:
        return cls(tuple(tensor.shape), tensor.dtype)


def _finite(tensor: torch.Tensor) -> bool:
    # One reduction instead of a boolean tensor per check: a NaN or Inf anywhere makes the
    # sum non-finite; only then (or on overflow) is the elementwise test needed.
    return math.isfinite(float(tensor.sum())) or bool(torch.isfinite(tensor).all())


def _all_finite(values: Sequence[torch.Tensor]) -> bool:
    """Whether every tensor is finite, floating ones in one fused pass (``foreach``: one call for
    the whole update, where a check per tensor paid torch's call overhead per tensor; a NaN or Inf
    makes the total norm non-finite, and only then, or on overflow, are tensors tested one by one)."""
    floating = [t for t in values if t.is_floating_point()]
    if floating and not math.isfinite(float(get_total_norm(floating, foreach=True))):
        return all(bool(torch.isfinite(t).all()) for t in floating)
    return all(_finite(t) for t in values if not t.is_floating_point())


def check_tensor(
    client_id: str, what: str, name: str, value: object, spec: TensorSpec, finite: bool = True
) -> torch.Tensor:
    """``value`` if it is a dense tensor of ``spec``'s dtype and shape, and (``finite``, unless the
    caller tests a whole update at once) finite; else :class:`UpdateRejected`."""
    if not isinstance(value, torch.Tensor):
        raise UpdateRejected(client_id, f"{what} '{name}' is a {type(value).__name__}, not a tensor")
    if value.layout != torch.strided:
        raise UpdateRejected(client_id, f"{what} '{name}' has layout {value.layout}, expected a dense tensor")
    if value.dtype != spec.dtype:
        raise UpdateRejected(client_id, f"{what} '{name}' has dtype {value.dtype}, expected {spec.dtype}")
    if tuple(value.shape) != spec.shape:
        raise UpdateRejected(client_id, f"{what} '{name}' has shape {tuple(value.shape)}, expected {spec.shape}")
    if finite and not _finite(value):
        raise UpdateRejected(client_id, f"{what} '{name}' contains NaN or Inf")
    return value


def check_tensors(client_id: str, what: str, values: object, specs: Mapping[str, TensorSpec]) -> None:
    """Every named tensor as :func:`check_tensor` wants it, finiteness tested for all at once."""
    check_names(client_id, what, values, specs)
    for name, value in values.items():  # type: ignore[attr-defined]
        check_tensor(client_id, what, name, value, specs[name], finite=False)
    if not _all_finite(list(values.values())):  # type: ignore[attr-defined]
        bad = next(name for name, value in values.items() if not _finite(value))  # type: ignore[attr-defined]
        raise UpdateRejected(client_id, f"{what} '{bad}' contains NaN or Inf")


def check_names(client_id: str, what: str, names: object, expected: Sequence[str] | set[str]) -> None:
    if not isinstance(names, Mapping):
        raise UpdateRejected(client_id, f"{what}s must be a mapping of names to tensors, got {type(names).__name__}")
    missing = sorted(set(expected) - set(names))
    extra = sorted(set(names) - set(expected), key=str)
    if missing or extra:
        raise UpdateRejected(client_id, f"{what} names differ from the model's (missing {missing}, unknown {extra})")


def check_count(client_id: str, value: object, capacity: int | None, minimum: int = 1) -> int:
    """An example count: a true ``int`` (not ``True``) between ``minimum`` and the declared ``capacity``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UpdateRejected(client_id, f"num_examples must be an integer, got {value!r}")
    if value < minimum:
        raise UpdateRejected(client_id, f"num_examples must be at least {minimum}, got {value}")
    if capacity is not None and value > capacity:
        raise UpdateRejected(
            client_id, f"num_examples {value} exceeds the {capacity} this client declared when it prepared"
        )
    return value


def check_metrics(client_id: str, metrics: object, names: Collection[str] | None = None) -> None:
    """Finite real numbers under string names; with ``names``, only those names (what the family
    declares: a peer's other names would flow into every history, checkpoint and MLflow run)."""
    if not isinstance(metrics, Mapping):
        raise UpdateRejected(client_id, f"metrics must be a mapping of names to numbers, got {type(metrics).__name__}")
    for name, value in metrics.items():
        if not isinstance(name, str):
            raise UpdateRejected(client_id, f"metric name {name!r} is not a string")
        if names is not None and name not in names:
            raise UpdateRejected(client_id, f"metric {name[:50]!r} is not one of {sorted(names)}")
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise UpdateRejected(client_id, f"metric '{name}' is a {type(value).__name__}, not a number")
        if not math.isfinite(float(value)):
            raise UpdateRejected(client_id, f"metric '{name}' is not finite")


def check_sparse_rows(
    client_id: str, tensors: Mapping[str, object], rows: Mapping[str, object], specs: Mapping[str, TensorSpec]
) -> None:
    """Row-indexed values: each named tensor has int64 row indices, in range and strictly
    increasing (sorted, so a row cannot repeat)."""
    unknown = sorted(set(tensors) - set(specs), key=str)
    if unknown:
        raise UpdateRejected(client_id, f"sparse rows of unknown tensors {unknown}")
    if set(rows) != set(tensors):
        raise UpdateRejected(client_id, f"row indices for {sorted(rows, key=str)} but values for {sorted(tensors)}")
    for name, value in tensors.items():
        index = rows[name]
        spec = specs[name]
        if not isinstance(index, torch.Tensor) or index.dtype != torch.int64 or index.dim() != 1:
            raise UpdateRejected(client_id, f"row indices of '{name}' must be a 1-D int64 tensor")
        n = int(index.numel())
        check_tensor(client_id, "sparse rows", name, value, TensorSpec((n, *spec.shape[1:]), spec.dtype))
        if n and (int(index.min()) < 0 or int(index.max()) >= spec.shape[0]):
            raise UpdateRejected(
                client_id,
                f"row indices of '{name}' must lie in [0, {spec.shape[0]}), got {int(index.min())}..{int(index.max())}",
            )
        if n > 1 and not bool((index[1:] > index[:-1]).all()):  # linear: a sort-based test took 0.8 ms an update
            raise UpdateRejected(client_id, f"row indices of '{name}' must increase: sorted, and no repeat of a row")


def validate_update(
    update: object,
    kind: UpdateKind,
    specs: Mapping[str, TensorSpec],
    statistics: Mapping[str, TensorSpec] | None = None,
    capacity: int | None = None,
    metric_names: Collection[str] | None = None,
) -> Update:
    """``update`` if it is a well-formed update of ``kind``; else :class:`UpdateRejected`.

    ``specs`` are the tensors the update must carry (all of them for dense kinds, a
    subset of rows for ``SPARSE_ROWS``); ``statistics`` the auxiliary statistics it must
    carry (none when ``None``); ``capacity`` the most examples this client may claim;
    ``metric_names`` the metrics it may report (any when ``None``).
    """
    if not isinstance(update, Update):
        raise UpdateRejected(getattr(update, "client_id", "?"), f"a {type(update).__name__} is not an Update")
    cid = update.client_id
    if update.kind != kind:
        raise UpdateRejected(cid, f"kind '{update.kind}' but the strategy expects '{kind}'")
    check_count(cid, update.num_examples, capacity)
    check_metrics(cid, update.metrics, metric_names)
    if kind is UpdateKind.SPARSE_ROWS:
        check_sparse_rows(cid, update.tensors, update.row_indices, specs)
    else:
        if update.row_indices:
            raise UpdateRejected(cid, f"row indices are only for '{UpdateKind.SPARSE_ROWS}' updates")
        check_tensors(cid, "tensor", update.tensors, specs)
    check_tensors(cid, "statistic", update.statistics, statistics or {})
    return update


def validate_metrics_update(update: object, capacity: int | None, metric: str) -> Update:
    """A validation reply: ``METRICS`` kind, no tensors, a count within ``capacity`` (0: nothing
    to validate on) and, when the count is positive, a finite ``metric``."""
    if not isinstance(update, Update):
        raise UpdateRejected(getattr(update, "client_id", "?"), f"a {type(update).__name__} is not an Update")
    cid = update.client_id
    if update.kind != UpdateKind.METRICS:
        raise UpdateRejected(cid, f"kind '{update.kind}' but a validation reply is '{UpdateKind.METRICS}'")
    if update.tensors or update.statistics or update.row_indices:
        raise UpdateRejected(cid, "a validation reply carries no tensors")
    n = check_count(cid, update.num_examples, capacity, minimum=0)
    check_metrics(cid, update.metrics, {metric})
    if n and metric not in update.metrics:
        raise UpdateRejected(cid, f"a validation reply on {n} documents without '{metric}'")
    return update


# Reducers -----------------------------------------------------------------------------
def weighted_mean(
    tensors: Sequence[Mapping[str, torch.Tensor]], weights: Sequence[int | float]
) -> dict[str, torch.Tensor]:
    """sum_l n_l * G_l / sum_l n_l for every name (gFedNTM eq. 2)."""
    if not tensors:
        raise ValueError("cannot average an empty list of updates")
    total_weight = float(sum(weights))
    if total_weight <= 0:
        raise ValueError("weights must sum to a positive number")
    # foreach: one call per client for all its tensors (the same products and sums, in the same order)
    names = list(tensors[0])
    if not names:
        return {}
    acc = torch._foreach_mul([tensors[0][name] for name in names], weights[0] / total_weight)
    for t, w in zip(tensors[1:], weights[1:], strict=True):
        torch._foreach_add_(acc, [t[name] for name in names], alpha=w / total_weight)
    return dict(zip(names, acc, strict=True))


def total(tensors: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """sum_l M_l for every name (sufficient statistics: PC-TD sums the parties' counts). The sums
    are C-contiguous whatever the first update's layout, so that what a strategy computes from
    them (row sums) adds in one order: an update built in process as a transposed view and the
    same numbers decoded from a Flower record would otherwise give results 1e-15 apart."""
    if not tensors:
        raise ValueError("cannot sum an empty list of updates")
    out = {name: t.clone(memory_format=torch.contiguous_format) for name, t in tensors[0].items()}
    for other in tensors[1:]:
        for name, acc in out.items():
            acc.add_(other[name])
    return out


def sparse_row_mean(
    updates: Sequence[Update], weights: Sequence[int | float]
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Weighted mean of row-indexed values, per tensor: (rows touched by any client, mean rows).

    A row a client did not send counts as zero for it (its gradient there is zero), so the
    result equals the dense weighted mean restricted to the touched rows, without ever
    materialising the dense table (a 200k-row embedding).
    """
    if not updates:
        raise ValueError("cannot average an empty list of updates")
    total_weight = float(sum(weights))
    if total_weight <= 0:
        raise ValueError("weights must sum to a positive number")
    names = sorted({name for u in updates for name in u.tensors})
    out: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for name in names:
        parts = [
            (u.row_indices[name], u.tensors[name], w)
            for u, w in zip(updates, weights, strict=True)
            if name in u.tensors
        ]
        joined = torch.cat([r for r, _, _ in parts])
        values = parts[0][1]
        if values.device.type != "cpu" or joined.device.type != "cpu" or not joined.numel():  # an accelerator's
            rows, inverse = torch.unique(joined, return_inverse=True)
            acc = values.new_zeros((rows.numel(), *values.shape[1:]))
            offset = 0
            for part, value, weight in parts:
                n = part.numel()
                acc.index_add_(0, inverse[offset : offset + n].to(values.device), value, alpha=weight / total_weight)
                offset += n
            out[name] = (rows, acc)
            continue
        # on the CPU: the touched rows by marking, the sum by a compiled loop (core/rows.py)
        index = joined.numpy()
        rows_np, inverse_np = distinct_positions(index, int(index.max()) + 1)
        acc_np = np.zeros((len(rows_np), *values.shape[1:]), dtype=values.numpy().dtype)
        flat = acc_np.reshape(len(rows_np), -1)
        offset = 0
        for part, value, weight in parts:
            n = part.numel()
            add_rows(flat, inverse_np[offset : offset + n], value.reshape(n, -1).numpy(), weight / total_weight)
            offset += n
        rows, acc = torch.from_numpy(rows_np), torch.from_numpy(acc_np)
        out[name] = (rows, acc)
    return out
