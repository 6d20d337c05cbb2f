"""Where the arithmetic runs: the torch device a run asks for, and torch's CPU threads.

torch is imported when a function is called, not with this module: text processing uses
the thread setting too, and the ingestion and preprocessing pipelines never load torch
(``tests/test_pipeline_registry.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def resolve_device(name: str) -> torch.device:
    """``auto`` means CUDA when available, CPU otherwise."""
    import torch  # deferred: see the module docstring

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    missing = missing_device(name)
    if missing:
        raise ValueError(f"parameter 'train.device' is {name!r}, but {missing}")
    return torch.device(name)


def missing_device(name: str) -> str | None:
    """Why torch cannot compute on device ``name`` on this machine (None: it can), so that a run
    asking for a GPU that is not there stops before its first node instead of at training."""
    import torch  # deferred: see the module docstring

    device = torch.device(name)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            return "torch finds no CUDA device on this machine"
        if device.index is not None and device.index >= count:
            return f"torch finds {count} CUDA device(s) on this machine"
    if device.type == "mps" and not torch.backends.mps.is_available():
        return "torch finds no MPS device (Apple silicon) on this machine"
    return None


@contextlib.contextmanager
def compute_threads(threads: int | None) -> Iterator[None]:
    """torch's intra-op threads set to ``threads`` for the block (None: unchanged), then restored."""
    if threads is None:
        yield
        return
    import torch  # deferred: see the module docstring

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def deterministic_algorithms() -> Iterator[None]:
    """torch's deterministic algorithms on for the block, then the setting restored: the same
    seed gives the same numbers on one machine. ``warn_only``: an op without a deterministic
    version warns instead of failing. On CPU every op training uses is deterministic already,
    so it costs nothing measurable there (docs/results.md#reproducibility); on CUDA it needs
    ``CUBLAS_WORKSPACE_CONFIG`` before the first cuBLAS call, which this sets when unset."""
    import os

    import torch  # deferred: see the module docstring

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    before, warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn)
