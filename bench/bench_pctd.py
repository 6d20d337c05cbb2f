"""Benchmark: PC-TD's EM iteration (seed 002) against one pass of gensim's LdaModel on the same
pooled corpus and number of topics; the memory of M_t and of eq. 13's R at a large vocabulary.

Issue 18, part 8 (started: the family and pipeline do not exist yet, so this times the core
steps a federated iteration is made of, on the pooled documents, in one process):

1. **Corpus**: gensim's ``lee_background.cor`` (300 news articles, the setting of issue 18),
   tokenised with gensim's ``simple_preprocess`` and its stop-word list, words in at least
   ``--min-count`` documents; units of ``--unit-length`` consecutive words.
2. **One EM iteration** (eq. 5, 7, 10, then 11 and 13 at the server) on the pooled units:
   without noise, with ``--sigma`` drawn in K dimensions (``projected``, the default) and,
   for reference, drawn on every count (``per_entry``, eq. 4 literally). Median of
   ``--repeats`` iterations after one warm-up.
3. **gensim** ``LdaModel`` with the same K, one pass over the same bag of words
   (``passes=1, update_every=0``: batch, one E-step over every document then one M-step),
   median of ``--repeats`` fits. Ratio: our seconds over gensim's.
4. **Memory** (``--memory``): M_t as sent (K x V float64) at ``--vocab`` x ``--topics``, and
   tracemalloc's peak of one projected E-step over ``--units`` random units at that size;
   R from GloVe 6B 50-d over the ``--vocab`` most frequent GloVe words (its ``--frequent``
   first, ``--neighbours`` above ``--threshold``): entries and bytes.

One BLAS thread (``--threads``); ``time.perf_counter``.

    .venv/bin/python bench/bench_pctd.py
    .venv/bin/python bench/bench_pctd.py --memory
    .venv/bin/python bench/bench_pctd.py --smoke
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

logger = logging.getLogger("bench_pctd")


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--unit-length", type=int, default=3)
    parser.add_argument("--min-count", type=int, default=2)
    parser.add_argument("--sigma", type=float, default=0.25)
    parser.add_argument("--tau", type=float, default=0.3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--memory", action="store_true", help="also measure M_t and R at --vocab x --topics-memory")
    parser.add_argument("--vocab", type=int, default=50_000)
    parser.add_argument("--topics-memory", type=int, default=100)
    parser.add_argument("--units", type=int, default=20_000)
    parser.add_argument("--frequent", type=int, default=5000)
    parser.add_argument("--neighbours", type=int, default=20)
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="tiny settings, for the test suite")
    args = parser.parse_args()
    if args.smoke:
        args.topics, args.repeats, args.vocab, args.units, args.frequent = 5, 1, 2000, 500, 300
    return args


def _timed(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _lee(min_count: int):
    from gensim.parsing.preprocessing import STOPWORDS
    from gensim.test.utils import datapath
    from gensim.utils import simple_preprocess

    with open(datapath("lee_background.cor"), encoding="utf-8") as handle:
        docs = [[t for t in simple_preprocess(line) if t not in STOPWORDS] for line in handle if line.strip()]
    df: dict[str, int] = {}
    for doc in docs:
        for term in set(doc):
            df[term] = df.get(term, 0) + 1
    vocabulary = sorted((t for t, c in df.items() if c >= min_count), key=lambda t: (-df[t], t))
    return docs, vocabulary


def _similarity(vocabulary, frequent: int, neighbours: int, threshold: float):
    from fedtopic_pipelines.core.models.pctd import similarity_matrix
    from fedtopic_pipelines.core.text.word_vectors import load_word_vectors

    return similarity_matrix(vocabulary, load_word_vectors(), frequent, neighbours, threshold)


def time_iterations(args: argparse.Namespace) -> None:
    import numpy as np
    from gensim.corpora import Dictionary
    from gensim.models import LdaModel

    from fedtopic_pipelines.core.models.pctd import SemanticUnits, e_step, random_distributions, server_step

    docs, vocabulary = _lee(args.min_count)
    units = SemanticUnits.from_tokens(docs, vocabulary, args.unit_length)
    r = _similarity(vocabulary, min(len(vocabulary), 5000), 20, 0.5)
    rng = np.random.default_rng(args.seed)
    phi = random_distributions(args.topics, len(vocabulary), rng)
    theta = random_distributions(units.n_docs, args.topics, rng)
    tokens = int(units.counts.sum())
    logger.info(
        "lee_background: %d documents, %d terms, %d tokens in %d units of %d; K = %d; R has %d entries",
        units.n_docs,
        len(vocabulary),
        tokens,
        units.n_units,
        args.unit_length,
        args.topics,
        r.nnz,
    )

    def iteration(sigma: float, noise: str):
        def run():
            step = e_step(units, phi, theta, sigma, rng, noise)
            server_step(step.statistics, r, args.tau)

        return run

    rows = {
        "PC-TD, no noise": _timed(iteration(0.0, "projected"), args.repeats),
        f"PC-TD, sigma {args.sigma} (projected)": _timed(iteration(args.sigma, "projected"), args.repeats),
        f"PC-TD, sigma {args.sigma} (per entry)": _timed(iteration(args.sigma, "per_entry"), args.repeats),
    }
    index = {t: i for i, t in enumerate(vocabulary)}
    dictionary = Dictionary([vocabulary])
    bow = [sorted(dictionary.doc2bow([t for t in doc if t in index]), key=lambda x: x[0]) for doc in docs]

    def lda():
        LdaModel(bow, id2word=dictionary, num_topics=args.topics, passes=1, update_every=0, random_state=args.seed)

    reference = _timed(lda, args.repeats)
    logger.info("gensim LdaModel, one pass (batch): %.4f s", reference)
    logger.info("| method | seconds per iteration | / gensim's pass |")
    logger.info("| --- | ---: | ---: |")
    logger.info("| gensim LdaModel, 1 pass | %.4f | 1.00 |", reference)
    for name, seconds in rows.items():
        logger.info("| %s | %.4f | %.2f |", name, seconds, seconds / reference)


def memory(args: argparse.Namespace) -> None:
    import numpy as np
    import scipy.sparse as sp

    from fedtopic_pipelines.core.models.pctd import SemanticUnits, e_step, random_distributions
    from fedtopic_pipelines.core.text.word_vectors import load_word_vectors

    v, k = args.vocab, args.topics_memory
    rng = np.random.default_rng(args.seed)
    ids = rng.integers(0, v, size=args.units * args.unit_length)
    units = SemanticUnits(
        sp.csr_matrix(
            (np.ones(ids.size), (np.repeat(np.arange(args.units), args.unit_length), ids)), shape=(args.units, v)
        ),
        np.arange(args.units) // 10,
        (args.units + 9) // 10,
    )
    phi = random_distributions(k, v, rng)
    theta = random_distributions(units.n_docs, k, rng)
    tracemalloc.start()
    step = e_step(units, phi, theta, args.sigma, rng, "projected")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    logger.info(
        "M_t at V = %d, K = %d: %.1f MB as sent (float64); one projected E-step over %d units: peak %.1f MB",
        v,
        k,
        step.statistics.nbytes / 1e6,
        args.units,
        peak / 1e6,
    )
    vectors = load_word_vectors()
    words = list(vectors.index_to_key[:v])
    start = time.perf_counter()
    r = _similarity(words, args.frequent, args.neighbours, args.threshold)
    seconds = time.perf_counter() - start
    nbytes = r.data.nbytes + r.indices.nbytes + r.indptr.nbytes
    logger.info(
        "R over %d GloVe words (%d frequent, %d neighbours above %.2f): %d entries, %.1f MB in CSR, built in %.1f s",
        v,
        args.frequent,
        args.neighbours,
        args.threshold,
        r.nnz,
        nbytes / 1e6,
        seconds,
    )


def main() -> None:
    args = _args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(args.threads))
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    logging.getLogger("gensim").setLevel(logging.ERROR)
    time_iterations(args)
    if args.memory or args.smoke:
        memory(args)


if __name__ == "__main__":
    main()
