"""Streaming, multi-process preprocessing equals the in-memory algorithm."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from fedtopic_pipelines.core.config import PreprocessConfig
from fedtopic_pipelines.core.ingest.common import ShardedTable, write_parquet_atomic
from fedtopic_pipelines.core.text.demo import CorpusError
from fedtopic_pipelines.core.text.preprocess import preprocess_shards
from fedtopic_pipelines.core.text.tokenize import tokenize_documents

WORDS = [
    "rocket",
    "orbit",
    "launch",
    "engine",
    "hockey",
    "puck",
    "skate",
    "goal",
    "disk",
    "drive",
    "memory",
    "cache",
    "the",
    "and",
    "42",
    "x",
]


def corpus(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "doc_id": [f"o:{i}" for i in range(n)],
            "organisation": "o",
            "text": [" ".join(rng.choice(WORDS, rng.integers(0, 12))) for _ in range(n)],
            "label": "",
            "split": np.where(rng.random(n) < 0.2, "test", "train"),
        }
    )


def sharded(frame: pd.DataFrame, tmp_path, size: int) -> ShardedTable:
    paths = []
    for i, begin in enumerate(range(0, len(frame), size)):
        write_parquet_atomic(frame.iloc[begin : begin + size], tmp_path / f"part-{i:05d}.parquet")
        paths.append(tmp_path / f"part-{i:05d}.parquet")
    return ShardedTable(paths)


def document_frequency_vocabulary(docs: list[list[str]], min_df: int, max_df: float) -> set[str]:
    """Terms in at least ``min_df`` and at most ``max_df`` (a fraction) of ``docs``, counted in memory."""
    df: Counter[str] = Counter()
    for doc in docs:
        df.update(set(doc))
    return {t for t, n in df.items() if min_df <= n <= max_df * len(docs)}


def test_the_in_memory_reference_applies_both_limits() -> None:
    docs = [["a", "b", "c"], ["a", "b"], ["a", "d"], ["a"]]
    assert document_frequency_vocabulary(docs, min_df=2, max_df=0.75) == {"b"}  # a: 4/4 > 0.75; c, d: 1


def reference(frame: pd.DataFrame, config: PreprocessConfig) -> tuple[list[str], dict[str, int]]:
    """The in-memory algorithm: tokenise all, vocabulary on train, filter, drop empty, count train."""
    docs = tokenize_documents(frame["text"], config)
    train = [d for d, s in zip(docs, frame["split"], strict=True) if s == "train"]
    keep = document_frequency_vocabulary(train, config.min_df, config.max_df)
    kept = [" ".join(t for t in d if t in keep) for d in docs]
    counts: Counter[str] = Counter()
    for text, split in zip(kept, frame["split"], strict=True):
        if split == "train":
            counts.update(text.split())
    return [k for k in kept if k], dict(counts)


@pytest.mark.parametrize("processes", [1, 2])
def test_sharded_and_parallel_equal_the_in_memory_algorithm(tmp_path, processes) -> None:
    frame = corpus(900)
    config = PreprocessConfig(min_df=3, max_df=0.3, processes=processes, chunk_documents=100)
    result = preprocess_shards(sharded(frame, tmp_path, 250), config)
    tokens = result.tokens.to_frame()
    expected_tokens, expected_counts = reference(frame, config)
    assert tokens["tokens"].tolist() == expected_tokens
    assert result.term_counts == expected_counts
    assert list(result.term_counts) == list(expected_counts)  # same order: the consensus breaks ties by it
    assert result.report["documents_in"] == 900
    assert result.report["documents_out"] + result.report["dropped_empty_after_cleaning"] == 900
    assert result.report["shards"] == len(result.tokens.paths) <= 4
    assert result.report["processes"] == processes
    result.tokens.discard()
    assert not result.tokens.staging.exists()


def test_a_plain_table_is_one_shard(tmp_path) -> None:
    frame = corpus(50, seed=1)
    config = PreprocessConfig(min_df=1, max_df=1.0)
    assert preprocess_shards(frame, config).tokens.to_frame()["tokens"].tolist() == reference(frame, config)[0]


def test_no_training_document_left_is_named() -> None:
    frame = corpus(20).assign(text="the and 42", organisation="hospital")
    with pytest.raises(CorpusError, match="organisation 'hospital' has no training document left"):
        preprocess_shards(frame, PreprocessConfig(min_df=1))
    with pytest.raises(CorpusError, match="organisation 'hospital' has no training documents"):
        preprocess_shards(frame.assign(split="test"), PreprocessConfig(min_df=1))


def test_synthetic_terms_survive_with_the_whitespace_tokenizer() -> None:
    config = PreprocessConfig(tokenizer="whitespace", alphabetic_only=False, stopwords="none", min_token_length=1)
    assert tokenize_documents(["term12 term3 term12"], config) == [["term12", "term3", "term12"]]
    assert tokenize_documents(["term12 term3"], PreprocessConfig()) == [[]]
