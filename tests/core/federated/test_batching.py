import numpy as np
import scipy.sparse as sp
import torch

from fedtopic_pipelines.core.federated.batching import BatchSource


def test_an_epoch_covers_every_document_once_and_merges_a_single_leftover() -> None:
    matrix = sp.csr_matrix(np.arange(9, dtype=np.float32).reshape(9, 1) + 1)
    source = BatchSource(matrix, batch_size=4, seed=0, device=torch.device("cpu"))
    batches = [source.next_batch() for _ in range(2)]
    assert [len(b) for b in batches] == [4, 5]  # 9 = 4 + 4 + 1 -> 4 + 5
    assert sorted(torch.cat([b.to_dense() for b in batches]).flatten().tolist()) == list(range(1, 10))
    assert source.max_examples == 5  # what the server caps an update's example count by


def test_batches_are_sparse_csr_rows_of_the_matrix() -> None:
    from fedtopic_pipelines.core.federated.batching import EpochSampler

    matrix = sp.random(30, 50, density=0.1, format="csr", random_state=0, dtype=np.float32)
    batch = BatchSource(matrix, batch_size=8, seed=2, device=torch.device("cpu")).next_batch()
    rows = EpochSampler(30, 8, seed=2).next_indices()  # the same sampler, the same rows
    assert batch.layout == torch.sparse_csr
    assert torch.equal(batch.to_dense(), torch.from_numpy(matrix[rows].toarray()))


def test_same_seed_same_batches() -> None:
    matrix = sp.csr_matrix(np.eye(20, dtype=np.float32))
    a = BatchSource(matrix, 6, seed=5, device=torch.device("cpu"))
    b = BatchSource(matrix, 6, seed=5, device=torch.device("cpu"))
    assert all(torch.equal(a.next_batch().to_dense(), b.next_batch().to_dense()) for _ in range(5))


def test_ghost_batches_never_repeat_a_document_within_a_step() -> None:
    from fedtopic_pipelines.core.federated.batching import GhostBatchSource

    matrix = sp.csr_matrix(np.arange(50, dtype=np.float32).reshape(50, 1) + 1)
    source = GhostBatchSource(matrix, batch_size=4, n_ghosts=3, seed=0, device=torch.device("cpu"))
    seen = []
    for _ in range(5):  # 50 = 4 steps of 12, then a last step of 2 documents
        batches = source.next_batches()
        rows = torch.cat([b.to_dense() for b, _ in batches]).flatten().tolist()
        assert len(rows) == len(set(rows))
        assert all(len(b) >= 2 for b, _ in batches)
        seen += rows
    assert sorted(seen) == list(range(1, 51))  # one epoch: every document exactly once
    assert len({id(g) for _, g in source.next_batches()}) == 3  # one noise generator per ghost batch


def test_a_source_rebuilt_from_its_state_continues_the_same_stream() -> None:
    """A Flower ClientApp may be a fresh process per message: the stream must survive a state round trip."""
    matrix = sp.csr_matrix(np.arange(23, dtype=np.float32).reshape(23, 1) + 1)
    a = BatchSource(matrix, 5, seed=3, device=torch.device("cpu"))
    for _ in range(3):  # mid-epoch: batches left in the queue
        a.next_batch()
        torch.rand(7, generator=a.noise)
    b = BatchSource(matrix, 5, seed=99, device=torch.device("cpu"))
    b.load_state_dict({k: v.clone() for k, v in a.state_dict().items()})
    for _ in range(8):  # across the epoch boundary
        assert torch.equal(a.next_batch().to_dense(), b.next_batch().to_dense())
        assert torch.equal(torch.rand(4, generator=a.noise), torch.rand(4, generator=b.noise))
    fresh = BatchSource(matrix, 5, seed=99, device=torch.device("cpu"))
    assert not all(torch.equal(fresh.next_batch().to_dense(), a.next_batch().to_dense()) for _ in range(3))


def test_a_ghost_source_rebuilt_from_its_state_continues_the_same_stream() -> None:
    from fedtopic_pipelines.core.federated.batching import GhostBatchSource

    matrix = sp.csr_matrix(np.arange(40, dtype=np.float32).reshape(40, 1) + 1)
    a = GhostBatchSource(matrix, batch_size=3, n_ghosts=2, seed=1, device=torch.device("cpu"))
    for _ in range(4):
        for _, noise in a.next_batches():
            torch.rand(2, generator=noise)
    b = GhostBatchSource(matrix, batch_size=3, n_ghosts=2, seed=7, device=torch.device("cpu"))
    b.load_state_dict({k: v.clone() for k, v in a.state_dict().items()})
    for _ in range(9):
        for (x, nx), (y, ny) in zip(a.next_batches(), b.next_batches(), strict=True):
            assert torch.equal(x.to_dense(), y.to_dense())
            assert torch.equal(torch.rand(3, generator=nx), torch.rand(3, generator=ny))


def test_a_batch_gathers_the_rows_scipy_would() -> None:
    """The CSR gather equals scipy's row indexing, for rows in any order, repeated, or empty,
    and for a matrix whose column indices were not sorted."""
    import scipy.sparse as sp

    from fedtopic_pipelines.core.federated.batching import _sparse

    matrix = sp.random(9, 7, density=0.4, format="csr", random_state=0, dtype=np.float32)
    matrix[4] = 0  # an empty row
    matrix.eliminate_zeros()
    shuffled = matrix.copy()
    for r in range(shuffled.shape[0]):  # the same matrix with each row's entries reversed
        a, b = shuffled.indptr[r], shuffled.indptr[r + 1]
        shuffled.indices[a:b] = shuffled.indices[a:b][::-1].copy()
        shuffled.data[a:b] = shuffled.data[a:b][::-1].copy()
    shuffled.has_sorted_indices = False
    rows = np.array([8, 4, 0, 3, 3, 1])
    for source in (matrix, shuffled):
        batch = _sparse(source, rows, torch.device("cpu"))
        assert batch.layout == torch.sparse_csr and batch.shape == (6, 7)
        assert np.array_equal(batch.to_dense().numpy(), matrix[rows].toarray())
        assert all(
            np.all(np.diff(batch.col_indices().numpy()[a:b]) > 0)
            for a, b in zip(batch.crow_indices()[:-1], batch.crow_indices()[1:], strict=True)
        )
