import numba
import numpy as np
import pytest
import scipy.sparse as sp

from fedtopic_pipelines.core.rows import (
    add_bag_rows,
    add_rows,
    bag_times_rows,
    bag_totals_and_dots,
    distinct_positions,
    prefetch_row,
    subtract_bag,
)


def _batch_with_an_empty_document(
    shape: tuple[int, int], density: float, seed: int, dtype: type, empty: int
) -> sp.csr_matrix:
    """A random CSR batch whose document ``empty`` has no entry."""
    batch = sp.random(*shape, density=density, format="csr", random_state=seed, dtype=dtype)
    batch.data[batch.indptr[empty] : batch.indptr[empty + 1]] = 0
    batch.eliminate_zeros()
    return batch


def test_distinct_positions_is_numpy_unique_with_its_inverse() -> None:
    ids = np.random.default_rng(0).integers(0, 50, size=300)
    rows, inverse = distinct_positions(ids, 50)
    expected, expected_inverse = np.unique(ids, return_inverse=True)
    assert np.array_equal(rows, expected) and np.array_equal(inverse, expected_inverse)


def test_add_rows_adds_repeated_positions_as_numpy_add_at() -> None:
    rng = np.random.default_rng(1)
    out, positions, values = np.zeros((6, 3)), rng.integers(0, 6, size=20), rng.normal(size=(20, 3))
    expected = out.copy()
    np.add.at(expected, positions, 0.5 * values)
    add_rows(out, positions, values, 0.5)
    np.testing.assert_allclose(out, expected, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_bag_times_word_rows_and_its_table_gradient_are_the_dense_products(dtype: type) -> None:
    """The CSR batch's rows in any state: empty rows, unsorted columns, a batch with no entry."""
    rng = np.random.default_rng(2)
    batch = _batch_with_an_empty_document((7, 30), 0.2, 3, dtype, empty=2)
    batch.indices[batch.indptr[0] : batch.indptr[1]] = batch.indices[batch.indptr[0] : batch.indptr[1]][::-1].copy()
    table, grad = rng.normal(size=(30, 5)).astype(dtype), rng.normal(size=(7, 5)).astype(dtype)
    out, table_grad = np.zeros((7, 5), dtype), np.zeros((30, 5), dtype)
    bag_times_rows(batch.indptr, batch.indices, batch.data, table, out)
    add_bag_rows(batch.indptr, batch.indices, batch.data, grad, table_grad)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, batch.toarray() @ table, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(table_grad, batch.toarray().T @ grad, rtol=tolerance, atol=tolerance)
    assert not out[2].any()  # an empty document reads no row
    empty = sp.csr_matrix((4, 30), dtype=dtype)
    out = np.zeros((4, 5), dtype)
    bag_times_rows(empty.indptr, empty.indices, empty.data, table, out)
    assert not out.any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_bags_totals_dots_with_its_own_rows_and_subtraction_are_the_dense_ones(dtype: type) -> None:
    """What the reconstruction term reads and writes at a batch's entries, an empty row included."""
    rng = np.random.default_rng(4)
    batch = _batch_with_an_empty_document((6, 25), 0.3, 5, dtype, empty=4)
    table, scale = rng.normal(size=(6, 25)).astype(dtype), rng.normal(size=6).astype(dtype)
    totals, dots = np.full(6, np.nan, dtype), np.full(6, np.nan, dtype)
    bag_totals_and_dots(batch.indptr, batch.indices, batch.data, table, totals, dots)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(totals, batch.toarray().sum(axis=1), rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(dots, (batch.toarray() * table).sum(axis=1), rtol=tolerance, atol=tolerance)
    assert totals[4] == 0 and dots[4] == 0
    out = table.copy()
    subtract_bag(batch.indptr, batch.indices, batch.data, scale, out)
    np.testing.assert_allclose(out, table - scale[:, None] * batch.toarray(), rtol=tolerance, atol=tolerance)


@numba.njit
def _sum_rows_with_prefetch(table: np.ndarray, order: np.ndarray) -> float:
    total = 0.0
    for n in range(len(order)):
        if n + 1 < len(order):
            prefetch_row(table, order[n + 1])
        total += table[order[n]].sum()
    return total


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("width", [1, 15, 100, 257])
def test_a_prefetched_row_reads_back_unchanged(dtype: type, width: int) -> None:
    """The prefetch hint compiles for each table type and width (rows shorter or longer than a
    cache line, the last row included) and leaves every value as it was."""
    table = np.arange(40 * width, dtype=dtype).reshape(40, width)
    before = table.copy()
    order = np.random.default_rng(width).permutation(40)
    assert _sum_rows_with_prefetch(table, order) == pytest.approx(float(before.sum()))
    assert np.array_equal(table, before)
