"""Preprocess one organisation's documents shard by shard, over several processes.

Pass 1 tokenises every shard (chunks of ``chunk_documents`` documents spread over the
worker processes) and writes unfiltered token shards to a staging folder, while
counting document frequencies and term counts of the training split. Pass 2 applies
the document-frequency limits shard by shard. Memory is bounded by one shard plus the
organisation's vocabulary counts, never by the corpus.

The result equals the in-memory algorithm: the same tokens, the same vocabulary (on the
training split only), the same term counts (restricted to the kept terms).

``min_df`` scales with the organisation (an integer is a number of its training documents,
a float a share of them), and :func:`check_organisations` checks every organisation's
document counts against what preprocessing, training and evaluation need before any
organisation is preprocessed (docs/vocabulary.md).
"""

from __future__ import annotations

import hashlib
import logging
import math
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from fedtopic_pipelines.core.config import EvaluateConfig, PreprocessConfig, TrainConfig, count_from
from fedtopic_pipelines.core.seeds import hold_out_one  # the rule training applies
from fedtopic_pipelines.core.shards import (
    ShardedTable,
    iter_frames,
    ordered_map,
    resolve_processes,
    write_parquet_atomic,
)
from fedtopic_pipelines.core.text.demo import CorpusError
from fedtopic_pipelines.core.text.tokenize import TokenizeError, tokenize_documents

logger = logging.getLogger(__name__)

TOKEN_COLUMNS = ["doc_id", "organisation", "label", "split", "tokens"]
# With ``processes: null``, below this many documents a pool costs more (spawn, imports) than it saves.
PARALLEL_MIN_DOCUMENTS = 20_000
# The report lists the ids of at most this many truncated documents (all are counted).
TRUNCATED_IDS_REPORTED = 20

# one chunk of one shard: (shard, texts, config, organisation, row of its first text, doc_ids)
Chunk = tuple[int, list[str], PreprocessConfig, str, int, list[str]]


def tokenize_chunk(item: Chunk) -> tuple[int, list[list[str]], list[str]]:
    """Worker entry point: one chunk of one shard. Returns its token lists and the doc_ids of its
    documents truncated at ``max_document_chars``; a tokenizer's error names the organisation and row."""
    shard, texts, config, org, first_row, doc_ids = item
    try:
        docs = tokenize_documents(texts, config)
    except TokenizeError as exc:
        row = first_row + exc.index
        raise CorpusError(
            f"organisation '{org}', row {row} (doc_id '{doc_ids[exc.index]}', {len(texts[exc.index]):,} characters): "
            f"'preprocess.tokenizer' = {config.tokenizer} failed: {exc.message}"
        ) from exc
    limit = config.max_document_chars
    truncated = [d for d, text in zip(doc_ids, texts, strict=True) if limit is not None and len(text) > limit]
    return shard, docs, truncated


def document_frequency_window(config: PreprocessConfig, n_train: int) -> tuple[int, float]:
    """The fewest and most training documents of an organisation of ``n_train`` that a term may
    occur in: ``min_df`` as a count, or a share rounded up (at least 1); ``max_df`` a share."""
    return count_from(config.min_df, n_train), config.max_df * n_train


# What a floor suggested in a stop's message aims for: at least this many terms (20 topics of 25
# distinct top words, the demo's model), or every term the other rules keep when they keep fewer.
SUGGESTED_TERMS = 500


def largest_floor(
    values: Iterable[int], below: int | None = None, terms: int = SUGGESTED_TERMS
) -> tuple[int, int] | None:
    """The largest floor on ``values`` (a term's document frequency, or its summed count) that keeps
    min(``terms``, all) of them, and how many it keeps; None when there are no values, or
    when that floor is not below ``below`` (the current one)."""
    ranked = sorted(values, reverse=True)
    if not ranked:
        return None
    value = ranked[min(terms, len(ranked)) - 1]
    if below is not None and value >= below:
        return None
    return value, sum(v >= value for v in ranked)


def document_frequency_suggestion(df: Counter[str], config: PreprocessConfig, n_train: int) -> str:
    """A ``min_df`` (or ``max_df``) that keeps terms, computed from the organisation's document
    frequencies, for the message of a stop that the window caused."""
    if not df:
        return (
            "other cleaning: every token was a stopword ('preprocess.stopwords', 'preprocess.extra_stopwords'), "
            "shorter than 'preprocess.min_token_length' or not alphabetic ('preprocess.alphabetic_only')"
        )
    _, most = document_frequency_window(config, n_train)
    found = largest_floor(n for n in df.values() if n <= most)
    if found is None:
        share = min(1.0, math.ceil(20 * min(df.values()) / n_train) / 20)
        return f"'preprocess.max_df' = {share:g}: every term is in more than {most:g} of its documents"
    value, kept = found
    return f"'preprocess.min_df' = {value} (or the share {value / n_train:.3g}), which keeps {kept} terms"


def _window_problem(config: PreprocessConfig, n_train: int) -> str | None:
    least, most = document_frequency_window(config, n_train)
    if least <= most:
        return None
    given = f"'preprocess.min_df' = {config.min_df}" + (f" ({least} documents)" if least != config.min_df else "")
    return (
        f"{given} is more than 'preprocess.max_df' = {config.max_df} of its training documents ({most:g}): no term "
        f"can pass; set 'preprocess.min_df' to a share (e.g. 0.01, which scales with each organisation) or raise "
        "'preprocess.max_df'"
    )


def svm_minimum_documents(test_size: float) -> int:
    """The fewest labelled test documents for which the SVM's stratified split has two documents
    on each side (two classes need at least that; ``metrics.classification``)."""
    n = 4
    while math.ceil(test_size * n) < 2 or n - math.ceil(test_size * n) < 2:
        n += 1
    return n


def check_organisations(
    counts: Mapping[str, Mapping[str, int]], preprocess: PreprocessConfig, train: TrainConfig, evaluate: EvaluateConfig
) -> dict[str, dict[str, object]]:
    """Check every organisation's raw document counts (``{org: {"train": n, "test": n}}``)
    against what the chain needs, before any organisation is preprocessed.

    Raises :class:`CorpusError` naming every organisation that cannot be preprocessed or
    trained on (no training document; a document-frequency window no term can pass; too few
    documents to hold out validation documents and keep 2 for BatchNorm), with its counts and
    the parameter to change. ``train.batch_size`` needs nothing: a batch is capped by the
    organisation's documents (``EpochSampler``). What only leaves a metric undefined (no test document, too few
    for the SVM's split) is a warning in the log and the returned report. Preprocessing may
    still drop documents (empty after cleaning): later checks stay.
    """
    problems: list[str] = []
    report: dict[str, dict[str, object]] = {}
    svm_least = svm_minimum_documents(evaluate.svm_test_size)
    for org, split_counts in counts.items():
        n_train, n_test = int(split_counts.get("train", 0)), int(split_counts.get("test", 0))
        least, most = document_frequency_window(preprocess, max(n_train, 1))
        errors: list[str] = []
        warnings: list[str] = []
        if n_train == 0:
            errors.append("no training document: check the ingestion's split (e.g. 'test_fraction') and rules")
        else:
            window = _window_problem(preprocess, n_train)
            if window:
                errors.append(window)
            if n_train < 2:
                errors.append("training needs at least 2 documents (BatchNorm)")
            elif train.validation_fraction > 0:
                try:
                    hold_out_one(org, np.empty((n_train, 0)), train.validation_fraction, train.seed, 0)
                except ValueError as exc:
                    errors.append(f"{str(exc).split(': ', 1)[-1]}; lower it or set it to 0")
        if n_test == 0:
            warnings.append("no test document: its perplexity and macro-F1 will be missing")
        elif n_test < svm_least:
            warnings.append(
                f"{n_test} test documents: the SVM needs at least {svm_least} for its "
                f"'evaluate.svm_test_size' = {evaluate.svm_test_size} split, its macro-F1 will be missing"
            )
        for warning in warnings:
            logger.warning("organisation '%s' (%d training, %d test documents): %s", org, n_train, n_test, warning)
        problems += [f"organisation '{org}' ({n_train} training, {n_test} test documents): {e}" for e in errors]
        report[org] = {
            "train": n_train,
            "test": n_test,
            "min_df_documents": least,
            "max_df_documents": most,
            "warnings": warnings,
        }
    if problems:
        raise CorpusError("before preprocessing: " + "; ".join(problems))
    return report


def _line_key(line: str) -> int | None:
    """A line's identity for :class:`RepeatedLines`: its words, lowercased, as an 8-byte hash
    (stable across processes, unlike ``hash``); None for a blank line."""
    words = " ".join(line.split()).lower()
    if not words:
        return None
    return int.from_bytes(hashlib.blake2b(words.encode(), digest_size=8).digest(), "little")


@dataclass
class RepeatedLines:
    """Lines found in at least ``threshold`` of an organisation's training documents (boilerplate:
    navigation, licence or signature lines), and how many occurrences :meth:`strip` removed."""

    keys: frozenset[int]
    threshold: int
    removed: int = 0
    documents_changed: int = 0

    @classmethod
    def count(cls, raw: pd.DataFrame | ShardedTable, setting: int | float) -> RepeatedLines:
        """Count every line's training documents, shard by shard (``setting``: a count, or a share
        of the training documents rounded up; at least 2 either way)."""
        seen: Counter[int] = Counter()
        n_train = 0
        for frame in tqdm(iter_frames(raw), desc="count repeated lines", unit="shard", leave=False):
            for text in frame.loc[frame["split"] == "train", "text"].astype(str):
                n_train += 1
                seen.update({k for k in map(_line_key, text.splitlines()) if k is not None})
        threshold = max(2, count_from(setting, n_train))
        return cls(frozenset(k for k, n in seen.items() if n >= threshold), threshold)

    def strip(self, text: str) -> str:
        """``text`` without its repeated lines (counted)."""
        if not self.keys:
            return text
        lines = text.splitlines()
        kept = [line for line in lines if _line_key(line) not in self.keys]
        if len(kept) < len(lines):
            self.removed += len(lines) - len(kept)
            self.documents_changed += 1
        return "\n".join(kept)

    def report(self) -> dict[str, int]:
        return {
            "threshold_documents": self.threshold,
            "distinct_lines": len(self.keys),
            "occurrences_removed": self.removed,
            "documents_changed": self.documents_changed,
        }


@dataclass
class PreprocessResult:
    tokens: ShardedTable
    term_counts: dict[str, int]
    report: dict[str, object] = field(default_factory=dict)


@dataclass
class _FirstPass:
    """What the tokenising pass accumulates, flushed shard by shard so only one shard's tokens are held."""

    first: Path
    df: Counter[str] = field(default_factory=Counter)
    counts: Counter[str] = field(default_factory=Counter)
    n_train: int = 0
    documents_in: int = 0
    org: str = "?"
    frames: list[pd.DataFrame] = field(default_factory=list)  # at most one shard's metadata at a time
    pending: list[list[str]] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)
    lines: RepeatedLines | None = None

    def chunks(self, raw: pd.DataFrame | ShardedTable, config: PreprocessConfig) -> Iterator[Chunk]:
        """Cut every shard into worker chunks, keeping its metadata aside for :meth:`flush`."""
        row = 0
        for shard, frame in enumerate(iter_frames(raw)):
            self.frames.append(frame.drop(columns=["text"]))
            texts = frame["text"].astype(str).tolist()
            if self.lines is not None:
                texts = [self.lines.strip(t) for t in texts]
            ids = frame["doc_id"].astype(str).tolist()
            name = str(frame["organisation"].iloc[0]) if len(frame) else "?"
            for begin in range(0, max(len(texts), 1), config.chunk_documents):
                end = begin + config.chunk_documents
                yield shard, texts[begin:end], config, name, row + begin, ids[begin:end]
            row += len(texts)

    def flush(self, shard: int) -> None:
        """Count one finished shard's training terms and write its tokens, so they need not stay in memory."""
        meta = self.frames.pop(0)
        is_train = (meta["split"] == "train").to_numpy()
        for doc, train in zip(self.pending, is_train, strict=True):
            if train:
                self.df.update(set(doc))
                self.counts.update(doc)
        self.n_train += int(is_train.sum())
        self.documents_in += len(meta)
        if len(meta):
            self.org = str(meta["organisation"].iloc[0])
        path = self.first / f"part-{shard:05d}.parquet"
        write_parquet_atomic(meta[TOKEN_COLUMNS[:-1]].assign(tokens=[" ".join(d) for d in self.pending]), path)
        self.written.append(path)
        self.pending.clear()


def _tokenize_pass(
    raw: pd.DataFrame | ShardedTable, config: PreprocessConfig, first: Path, processes: int
) -> _FirstPass:
    """First pass: tokenise in parallel but flush shards in order, so the counts need no second read
    (after a pass counting repeated lines, when ``repeated_lines`` asks for it)."""
    lines = None if config.repeated_lines is None else RepeatedLines.count(raw, config.repeated_lines)
    state = _FirstPass(first, lines=lines)
    current = 0
    progress = tqdm(total=len(raw), desc="tokenise", unit="doc", leave=False)
    for shard, docs, cut in ordered_map(tokenize_chunk, state.chunks(raw, config), processes):
        while shard != current:
            state.flush(current)
            current += 1
        state.pending.extend(docs)
        state.truncated += cut
        progress.update(len(docs))
    if state.frames:
        state.flush(current)
    progress.close()
    return state


def _filter_pass(written: list[Path], keep: set[str], out_dir: Path) -> tuple[list[Path], int, int, int]:
    """Second pass: drop terms outside the document-frequency window and the documents left empty.

    Returns the written shards, the documents kept, the documents dropped as empty and the training documents kept.
    """
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
    return shards, documents_out, empty, train_out


def preprocess_shards(
    raw: pd.DataFrame | ShardedTable, config: PreprocessConfig, staging: Path | None = None
) -> PreprocessResult:
    """Tokenise, filter by document frequency and count the terms of one organisation."""
    staging = Path(tempfile.mkdtemp(prefix="fedtopic-tokens-", dir=staging))
    total = len(raw)
    # null (all cores) only pays off for large organisations; an explicit number is obeyed
    processes = config.processes or (resolve_processes(None) if total >= PARALLEL_MIN_DOCUMENTS else 1)
    state = _tokenize_pass(raw, config, staging / "pass1", processes)
    org, n_train, truncated = state.org, state.n_train, state.truncated
    if truncated:
        logger.warning(
            "preprocess %s: %d document(s) longer than 'preprocess.max_document_chars' = %s characters were "
            "truncated (first: %s)",
            org,
            len(truncated),
            f"{config.max_document_chars:,}",
            ", ".join(truncated[:5]),
        )
    if n_train == 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise CorpusError(f"organisation '{org}' has no training documents to preprocess")
    problem = _window_problem(config, n_train)
    if problem:  # a Flower node has no pipeline check before it: say it before the second pass
        shutil.rmtree(staging, ignore_errors=True)
        raise CorpusError(f"organisation '{org}' ({n_train} training documents): {problem}")
    min_docs, max_docs = document_frequency_window(config, n_train)
    keep = {t for t, n in state.df.items() if min_docs <= n <= max_docs}
    shards, documents_out, empty, train_out = _filter_pass(state.written, keep, staging / "out")
    if train_out == 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise CorpusError(
            f"organisation '{org}' ({n_train} training documents) has no training document left after "
            f"preprocessing: 'preprocess.min_df' = {config.min_df} ({min_docs} documents) and 'preprocess.max_df' = "
            f"{config.max_df} ({max_docs:g} documents) keep {len(keep)} terms; try "
            + document_frequency_suggestion(state.df, config, n_train)
        )
    term_counts = {t: c for t, c in state.counts.items() if t in keep}
    report = {
        "documents_in": state.documents_in,
        "documents_out": documents_out,
        "dropped_empty_after_cleaning": empty,
        "documents_truncated": len(truncated),
        "max_document_chars": config.max_document_chars,
        "truncated_doc_ids": truncated[:TRUNCATED_IDS_REPORTED],
        "terms_removed_by_document_frequency": len(state.df) - len(keep),
        "min_df_documents": min_docs,
        "max_df_documents": max_docs,
        "vocabulary_size": len(term_counts),
        "shards": len(shards),
        "processes": processes,
    }
    if state.lines is not None:
        report["repeated_lines"] = state.lines.report()
    logger.info("preprocess %s: %d -> %d documents, %d terms", org, state.documents_in, documents_out, len(term_counts))
    return PreprocessResult(ShardedTable(shards, staging=staging), term_counts, report)
