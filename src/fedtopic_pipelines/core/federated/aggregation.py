"""Validation of untrusted updates and batch-size-weighted averaging (gFedNTM eq. 2)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from fedtopic_pipelines.core.federated.messages import Update, UpdateKind


class UpdateRejected(ValueError):
    """An update that must not touch the global model; ``reason`` says why."""

    def __init__(self, client_id: str, reason: str) -> None:
        super().__init__(f"update from client '{client_id}' rejected: {reason}")
        self.client_id = client_id
        self.reason = reason


def _check_tensors(
    client_id: str, what: str, tensors: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Size]
) -> None:
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing or extra:
        raise UpdateRejected(client_id, f"{what} names differ from the model's (missing {missing}, unknown {extra})")
    for name, tensor in tensors.items():
        if tuple(tensor.shape) != tuple(expected[name]):
            raise UpdateRejected(
                client_id, f"{what} '{name}' has shape {tuple(tensor.shape)}, expected {tuple(expected[name])}"
            )
        # One reduction instead of a boolean tensor per check: a NaN or Inf anywhere makes
        # the sum non-finite; only then (or on overflow) is the elementwise test needed.
        if not math.isfinite(float(tensor.sum())) and not bool(torch.isfinite(tensor).all()):
            raise UpdateRejected(client_id, f"{what} '{name}' contains NaN or Inf")


def validate_update(
    update: Update,
    kind: UpdateKind,
    shapes: Mapping[str, torch.Size],
    statistics_shapes: Mapping[str, torch.Size] | None = None,
) -> None:
    """Raise :class:`UpdateRejected` unless ``update`` is of ``kind``, well-shaped and finite."""
    if update.kind != kind:
        raise UpdateRejected(update.client_id, f"kind '{update.kind}' but the strategy expects '{kind}'")
    if not isinstance(update.num_examples, int) or update.num_examples <= 0:
        raise UpdateRejected(update.client_id, f"num_examples must be a positive integer, got {update.num_examples!r}")
    _check_tensors(update.client_id, "tensor", update.tensors, shapes)
    if statistics_shapes is not None:
        _check_tensors(update.client_id, "statistic", update.statistics, statistics_shapes)
    for name, value in update.metrics.items():
        if not math.isfinite(value):
            raise UpdateRejected(update.client_id, f"metric '{name}' is not finite")


def weighted_mean(
    tensors: Sequence[Mapping[str, torch.Tensor]], weights: Sequence[int | float]
) -> dict[str, torch.Tensor]:
    """sum_l n_l * G_l / sum_l n_l for every name (gFedNTM eq. 2)."""
    if not tensors:
        raise ValueError("cannot average an empty list of updates")
    total = float(sum(weights))
    if total <= 0:
        raise ValueError("weights must sum to a positive number")
    out: dict[str, torch.Tensor] = {}
    for name in tensors[0]:
        acc = tensors[0][name] * (weights[0] / total)
        for t, w in zip(tensors[1:], weights[1:], strict=True):
            acc.add_(t[name], alpha=w / total)
        out[name] = acc
    return out
