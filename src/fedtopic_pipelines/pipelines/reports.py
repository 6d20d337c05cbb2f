"""A report's numbers as MLflow metrics, so that every figure a pipeline writes can be compared
across runs in MLflow, not only read in its JSON."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

Series = dict[str, list[dict[str, float]]]


def metric_series(report: Mapping[str, Any], prefix: str = "") -> Series:
    """Every finite number of ``report`` (nested mappings walked, keys joined by dots; lists,
    strings, booleans and nulls left to the JSON) as one-step series for kedro-mlflow's metrics
    history dataset."""
    out: Series = {}
    for key, value in report.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(metric_series(value, f"{name}."))
        elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(float(value)):
            out[name] = [{"step": 0, "value": float(value)}]
    return out
