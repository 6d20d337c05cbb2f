"""Row-indexed arithmetic as compiled loops (numba): the distinct rows a step touched and a
weighted scatter-add of row values.

Sparse-row updates (Word2Vec's) touch a few thousand rows of a table of up to 200k words per
step. ``torch.unique`` sorts to find them and ``index_add_`` runs one thread's generic kernel;
on this project's 2-core machine the two took a third of a federated Word2Vec round. Marking a
table of the vocabulary's size needs no sort, and a plain loop adds rows at memory speed.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def distinct_positions(ids: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``ids`` (each in [0, ``size``)) in increasing order and each id's position
    among them: what ``np.unique(ids, return_inverse=True)`` returns."""
    seen = np.zeros(size, dtype=np.bool_)
    for x in ids:
        seen[x] = True
    rows = np.nonzero(seen)[0].astype(np.int64)
    where = np.empty(size, dtype=np.int64)
    for position in range(len(rows)):
        where[rows[position]] = position
    inverse = np.empty(len(ids), dtype=np.int64)
    for i in range(len(ids)):
        inverse[i] = where[ids[i]]
    return rows, inverse


@numba.njit(cache=True, nogil=True)
def add_rows(out: np.ndarray, positions: np.ndarray, values: np.ndarray, weight: float) -> None:
    """``out[positions[i]] += weight * values[i]`` for every row i (positions may repeat)."""
    w = out.dtype.type(weight)
    for i in range(len(positions)):
        target = out[positions[i]]
        source = values[i]
        for d in range(len(source)):
            target[d] += w * source[d]
