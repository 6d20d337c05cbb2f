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
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("parameter 'train.device' is 'cuda' but no CUDA device is available")
    return torch.device(name)


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
