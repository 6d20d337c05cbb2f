"""Seeded mini-batch streams over one organisation's document-term matrix."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch


def derive_seed(seed: int, *stream: int) -> int:
    """An independent 63-bit seed for a named random stream (e.g. one organisation)."""
    return int(np.random.SeedSequence([seed, *stream]).generate_state(2, np.uint64)[0] >> np.uint64(1))


class BatchSource:
    """Shuffled epochs of mini-batches plus the noise generator used on them.

    One source per organisation: its sampling and its dropout / reparameterisation noise
    come from its own seeded generators, so the same source gives the same batches and
    the same noise whether it feeds a federated client or a centralized ghost batch.
    A trailing batch of a single document is merged into the previous one, because
    BatchNorm needs at least two documents.
    """

    def __init__(self, matrix: sp.csr_matrix, batch_size: int, seed: int, device: torch.device) -> None:
        if matrix.shape[0] < 2:
            raise ValueError(f"a batch source needs at least 2 documents, got {matrix.shape[0]}")
        self.matrix = matrix.tocsr().astype(np.float32)
        self.batch_size = batch_size
        self.device = device
        self._sampler = torch.Generator(device="cpu").manual_seed(seed)
        self.noise = torch.Generator(device=device).manual_seed(derive_seed(seed, 1))
        self._queue: list[np.ndarray] = []
        self.epoch = 0

    def _new_epoch(self) -> None:
        n = self.matrix.shape[0]
        order = torch.randperm(n, generator=self._sampler).numpy()
        chunks = [order[i : i + self.batch_size] for i in range(0, n, self.batch_size)]
        if len(chunks) > 1 and len(chunks[-1]) < 2:
            last = chunks.pop()
            chunks[-1] = np.concatenate([chunks[-1], last])
        self._queue = chunks[::-1]
        self.epoch += 1

    def next_batch(self) -> torch.Tensor:
        """The next dense mini-batch on the source's device."""
        if not self._queue:
            self._new_epoch()
        rows = self._queue.pop()
        dense = torch.from_numpy(self.matrix[rows].toarray())
        return dense.to(self.device)
