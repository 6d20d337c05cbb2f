"""Row-indexed arithmetic as compiled loops (numba): the distinct rows a step touched, a
weighted scatter-add of row values, and a sparse bag of words times a table of word rows.

Sparse-row updates (Word2Vec's) touch a few thousand rows of a table of up to 200k words per
step. ``torch.unique`` sorts to find them and ``index_add_`` runs one thread's generic kernel;
on this project's 2-core machine the two took a third of a federated Word2Vec round. Marking a
table of the vocabulary's size needs no sort, and a plain loop adds rows at memory speed.

A topic model's encoder reads a bag of words of a few hundred distinct words out of tens of
thousands: its first layer, stored one row per word, reads and writes only those rows, where a
dense product multiplies every zero (docs/performance.md).

Rows read in a random order (a skip-gram's contexts and negatives) wait on memory more than
they compute: :func:`prefetch_row` asks the CPU for a row a few iterations before a loop
reads it (LLVM's ``prefetch``, a hint that changes no value).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

CACHE_LINE = 64  # bytes: x86-64's and most ARM cores'


@intrinsic
def _prefetch(typingctx: Any, array: types.Array, row: types.Integer, column: types.Integer) -> tuple:
    """LLVM's ``prefetch`` of ``array[row, column]``'s address: read, keep in every cache level."""

    def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: tuple) -> Any:
        array_type = signature.args[0]
        view = context.make_array(array_type)(context, builder, args[0])
        address = cgutils.get_item_pointer(context, builder, array_type, view, args[1:], wraparound=False)
        byte_pointer = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        hint = ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32])
        function = cgutils.get_or_insert_function(builder.module, hint, "llvm.prefetch.p0i8")
        # arguments: address, 0 = read, 3 = keep in all levels, 1 = data cache
        builder.call(function, [builder.bitcast(address, byte_pointer), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(array, row, column), codegen


@numba.njit(inline="always")
def prefetch_row(table: np.ndarray, row: int) -> None:
    """Every cache line of ``table[row]`` (a C-contiguous 2-D table) requested, not waited for."""
    step = max(CACHE_LINE // table.itemsize, 1)
    for column in range(0, table.shape[1], step):
        _prefetch(table, row, column)


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


@numba.njit(cache=True, nogil=True)
def bag_times_rows(
    indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, table: np.ndarray, out: np.ndarray
) -> None:
    """``out[i] += sum_p data[p] * table[indices[p]]`` over row i's entries of a CSR batch: a bag
    of words times a table with one row per word, reading only the rows of the words present."""
    for i in range(len(indptr) - 1):
        target = out[i]
        for p in range(indptr[i], indptr[i + 1]):
            source = table[indices[p]]
            v = data[p]
            for d in range(len(target)):
                target[d] += v * source[d]


@numba.njit(cache=True, nogil=True)
def add_bag_rows(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, grad: np.ndarray, out: np.ndarray) -> None:
    """``out[indices[p]] += data[p] * grad[i]`` over row i's entries of a CSR batch: the table's
    gradient of :func:`bag_times_rows` (the batch transposed times ``grad``), row by row."""
    for i in range(len(indptr) - 1):
        source = grad[i]
        for p in range(indptr[i], indptr[i + 1]):
            target = out[indices[p]]
            v = data[p]
            for d in range(len(source)):
                target[d] += v * source[d]


@numba.njit(cache=True, nogil=True)
def bag_totals_and_dots(
    indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, table: np.ndarray, totals: np.ndarray, dots: np.ndarray
) -> None:
    """Per row i of a CSR batch: ``totals[i] = sum_p data[p]`` and ``dots[i] = sum_p data[p] *
    table[i, indices[p]]``, the row's entries against the same row of a dense (rows x columns) table."""
    for i in range(len(indptr) - 1):
        total = 0.0
        dot = 0.0
        row = table[i]
        for p in range(indptr[i], indptr[i + 1]):
            total += data[p]
            dot += data[p] * row[indices[p]]
        totals[i] = total
        dots[i] = dot


@numba.njit(cache=True, nogil=True)
def subtract_bag(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, scale: np.ndarray, out: np.ndarray) -> None:
    """``out[i, indices[p]] -= scale[i] * data[p]`` over row i's entries of a CSR batch."""
    for i in range(len(indptr) - 1):
        s = scale[i]
        row = out[i]
        for p in range(indptr[i], indptr[i + 1]):
            row[indices[p]] -= s * data[p]
