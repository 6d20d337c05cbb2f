"""Seeded random streams: a seed for each named stream, and the seeded validation hold-out.

Every organisation, round and purpose draws from its own stream (:func:`derive_seed` of the
run's seed and a few stream numbers), so the same seed gives the same numbers on either
engine, after a resume, and in the organisation's own process. Plain numpy: any floor may
use it.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def derive_seed(seed: int, *stream: int) -> int:
    """An independent 63-bit seed for a named random stream (e.g. one organisation)."""
    return int(np.random.SeedSequence([seed, *stream]).generate_state(2, np.uint64)[0] >> np.uint64(1))


def hold_out_one(name: str, data: Any, fraction: float, seed: int, index: int, family: Any = None) -> tuple[Any, Any]:
    """The organisation at ``index`` keeps ``fraction`` of its documents aside (seeded) for
    validation; returns (training, held-out). At least 2 are held out (BatchNorm statistics
    need 2 documents), and at least 2 must be left to train on. ``family`` (a ``ModelFamily``:
    its ``rows`` and ``select``) says how to count and select documents of its data; without
    it, ``data`` is a matrix of one row per document."""
    rows = family.rows(data) if family else int(data.shape[0])
    order = np.random.default_rng(derive_seed(seed, 3000, index)).permutation(rows)
    n_held = max(2, round(rows * fraction))
    if rows - n_held < 2:
        raise ValueError(
            f"organisation '{name}' has {rows} training documents: too few to hold out "
            f"'train.validation_fraction' = {fraction} and keep 2 for training"
        )
    fit, held = np.sort(order[n_held:]), np.sort(order[:n_held])
    if family is None:
        return data[fit], data[held]
    return family.select(data, fit), family.select(data, held)
