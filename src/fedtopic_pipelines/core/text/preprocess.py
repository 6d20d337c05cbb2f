"""Preprocess one organisation's documents shard by shard, over several processes.

Pass 1 tokenises every shard (chunks of ``chunk_documents`` documents spread over the
worker processes) and writes unfiltered token shards to a staging folder, while
counting document frequencies and term counts of the training split. Pass 2 applies
the document-frequency limits shard by shard. Memory is bounded by one shard plus the
organisation's vocabulary counts, never by the corpus.

The result equals the in-memory algorithm: the same tokens, the same vocabulary (on the
training split only), the same term counts (restricted to the kept terms).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from fedtopic_pipelines.core.config import PreprocessConfig
from fedtopic_pipelines.core.ingest.common import (
    ShardedTable,
    iter_frames,
    ordered_map,
    resolve_processes,
    write_parquet_atomic,
)
from fedtopic_pipelines.core.text.demo import CorpusError
from fedtopic_pipelines.core.text.tokenize import tokenize_documents

logger = logging.getLogger(__name__)

TOKEN_COLUMNS = ["doc_id", "organisation", "label", "split", "tokens"]
# With ``processes: null``, below this many documents a pool costs more (spawn, imports) than it saves.
PARALLEL_MIN_DOCUMENTS = 20_000


def tokenize_chunk(item: tuple[int, list[str], PreprocessConfig]) -> tuple[int, list[list[str]]]:
    """Worker entry point: one chunk of one shard."""
    shard, texts, config = item
    return shard, tokenize_documents(texts, config)


@dataclass
class PreprocessResult:
    tokens: ShardedTable
    term_counts: dict[str, int]
    report: dict[str, int] = field(default_factory=dict)


def preprocess_shards(
    raw: pd.DataFrame | ShardedTable, config: PreprocessConfig, staging: Path | None = None
) -> PreprocessResult:
    """Tokenise, filter by document frequency and count the terms of one organisation."""
    staging = Path(tempfile.mkdtemp(prefix="fedtopic-tokens-", dir=staging))
    first = staging / "pass1"
    total = len(raw)
    # null (all cores) only pays off for large organisations; an explicit number is obeyed
    processes = config.processes or (resolve_processes(None) if total >= PARALLEL_MIN_DOCUMENTS else 1)
    df: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    n_train = documents_in = 0
    org = "?"
    frames: list[pd.DataFrame] = []  # at most one shard's metadata at a time

    def chunks() -> Iterator[tuple[int, list[str], PreprocessConfig]]:
        for shard, frame in enumerate(iter_frames(raw)):
            frames.append(frame.drop(columns=["text"]))
            texts = frame["text"].astype(str).tolist()
            for begin in range(0, max(len(texts), 1), config.chunk_documents):
                yield shard, texts[begin : begin + config.chunk_documents], config

    pending: list[list[str]] = []
    current = 0
    progress = tqdm(total=total, desc="tokenise", unit="doc", leave=False)
    written: list[Path] = []

    def flush(shard: int) -> None:
        nonlocal n_train, documents_in, org
        meta = frames.pop(0)
        is_train = (meta["split"] == "train").to_numpy()
        for doc, train in zip(pending, is_train, strict=True):
            if train:
                df.update(set(doc))
                counts.update(doc)
        n_train += int(is_train.sum())
        documents_in += len(meta)
        if len(meta):
            org = str(meta["organisation"].iloc[0])
        path = first / f"part-{shard:05d}.parquet"
        write_parquet_atomic(meta[TOKEN_COLUMNS[:-1]].assign(tokens=[" ".join(d) for d in pending]), path)
        written.append(path)
        pending.clear()

    for shard, docs in ordered_map(tokenize_chunk, chunks(), processes):
        while shard != current:
            flush(current)
            current += 1
        pending.extend(docs)
        progress.update(len(docs))
    if frames:
        flush(current)
    progress.close()
    if n_train == 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise CorpusError(f"organisation '{org}' has no training documents to preprocess")
    max_docs = config.max_df * n_train
    keep = {t for t, n in df.items() if config.min_df <= n <= max_docs}
    removed = len(df) - len(keep)
    out_dir = staging / "out"
    shards: list[Path] = []
    documents_out = empty = train_out = 0
    for path in written:
        frame = pd.read_parquet(path)
        filtered = [" ".join(t for t in doc.split() if t in keep) for doc in frame["tokens"]]
        frame = frame.assign(tokens=filtered)
        blank = frame["tokens"] == ""
        frame = frame.loc[~blank].reset_index(drop=True)
        empty += int(blank.sum())
        documents_out += len(frame)
        train_out += int((frame["split"] == "train").sum())
        if len(frame):
            target = out_dir / path.name
            write_parquet_atomic(frame, target)
            shards.append(target)
        path.unlink()
    if train_out == 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise CorpusError(
            f"organisation '{org}' has no training document left after preprocessing; "
            "relax 'preprocess.min_df' / 'preprocess.max_df'"
        )
    term_counts = {t: c for t, c in counts.items() if t in keep}
    report = {
        "documents_in": documents_in,
        "documents_out": documents_out,
        "dropped_empty_after_cleaning": empty,
        "terms_removed_by_document_frequency": removed,
        "vocabulary_size": len(term_counts),
        "shards": len(shards),
        "processes": processes,
    }
    logger.info("preprocess %s: %d -> %d documents, %d terms", org, documents_in, documents_out, len(term_counts))
    return PreprocessResult(ShardedTable(shards, staging=staging), term_counts, report)
