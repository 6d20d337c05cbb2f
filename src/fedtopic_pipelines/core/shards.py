"""Documents as Parquet shards read one at a time, and the bounded ordered map that writes them.

An organisation's documents and tokens may not fit in memory: they are held as an ordered
list of Parquet shards (:class:`ShardedTable`), read one shard at a time; a plain DataFrame
(tests, small corpora) is one shard. Shards are written atomically. Work on many shards or
units goes through :func:`ordered_map`, a process pool that keeps input order and bounds what
is in flight. Ingestion, preprocessing and the sites all read and write documents this way.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

T = TypeVar("T")
R = TypeVar("R")


# Shards ---------------------------------------------------------------------------------


def write_parquet_atomic(frame: pd.DataFrame, path: Path, metadata: Mapping[str, str] | None = None) -> None:
    """Write a shard under a temporary name and rename it: a killed run never leaves half a shard.
    ``metadata`` goes into the file's schema (key-value pairs beside pandas' own)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    table = pa.Table.from_pandas(frame, preserve_index=False)
    if metadata:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
    pq.write_table(table, tmp)
    os.replace(tmp, path)


class ShardedTable:
    """Documents held as an ordered list of Parquet shards and read one shard at a time.

    Memory is bounded by the largest shard, not by the corpus. ``staging`` marks shards
    in a temporary directory that the dataset may move instead of copy.
    """

    def __init__(self, paths: Sequence[Path | str], staging: Path | None = None) -> None:
        self.paths = [Path(p) for p in paths]
        self.staging = staging

    @classmethod
    def from_directory(cls, directory: Path) -> ShardedTable:
        return cls(sorted(directory.glob("*.parquet")))

    def __len__(self) -> int:
        return sum(pq.ParquetFile(p).metadata.num_rows for p in self.paths)

    def frames(self, columns: Sequence[str] | None = None) -> Iterator[pd.DataFrame]:
        for path in self.paths:
            yield pd.read_parquet(path, columns=list(columns) if columns else None)

    def to_frame(self, columns: Sequence[str] | None = None) -> pd.DataFrame:
        frames = list(self.frames(columns))
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(columns or []))

    def discard(self) -> None:
        """Remove a staged table's temporary folder (after it was read or moved)."""
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)

    def __repr__(self) -> str:
        return f"ShardedTable({len(self.paths)} shards)"


def iter_frames(data: pd.DataFrame | ShardedTable, columns: Sequence[str] | None = None) -> Iterator[pd.DataFrame]:
    """Shards of a sharded table, or a plain DataFrame as a single shard (tests, small corpora)."""
    if isinstance(data, ShardedTable):
        yield from data.frames(columns)
    else:
        yield data if columns is None else data[list(columns)]


def as_frame(data: pd.DataFrame | ShardedTable) -> pd.DataFrame:
    return data.to_frame() if isinstance(data, ShardedTable) else data


# Bounded ordered parallel map -----------------------------------------------------------


def resolve_processes(processes: int | None) -> int:
    return processes or os.cpu_count() or 1


def ordered_map(fn: Callable[[T], R], items: Iterable[T], processes: int, window: int | None = None) -> Iterator[R]:
    """``map(fn, items)`` over worker processes, in input order, with at most ``window`` items in flight.

    ``Pool.imap`` would drain ``items`` as fast as it can (a whole dump into memory);
    the window bounds memory to a few work units. One process runs inline.
    """
    if processes <= 1:
        yield from map(fn, items)
        return
    window = window or 2 * processes
    # spawn, not fork: the Kedro process holds threads (MLflow, logging) that fork would copy mid-state.
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        pending: deque = deque()
        for item in items:
            pending.append(pool.apply_async(fn, (item,)))
            if len(pending) >= window:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()
