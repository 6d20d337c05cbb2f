"""Benchmark: the two largest costs of evaluation and logging, before and after, in one process.

1. **Completion perplexity** of one ProdLDA (the demo's shape: V = 1,976, 20 topics, hidden
   (100, 100), LayerNorm) on a held-out matrix of the demo's density (``--documents`` x V, 2 %
   non-zero, counts 1-3): the previous implementation (dense batches: ``toarray`` and
   ``target * log(p)`` over every word) against the current one (sparse CSR batches into the
   encoder, the held-out words' log-probabilities gathered), each at torch's default threads and
   at 1 thread (``evaluate.threads``). Both give the same number up to float rounding (printed).
2. **Metric logging** of a run's per-round history (``--metrics`` values: ``--keys`` keys x
   steps) into a fresh MLflow sqlite store: kedro-mlflow's ``MlflowMetricsHistoryDataset`` (one
   ``log_metric`` call, one SQL commit, per value) against ``BatchedMetricsHistoryDataset``
   (``log_batch``, 1,000 values a call). The logged values are read back and compared.

Alternated repeats (A B, then B A, ...); medians and the median of the pairs' ratios.

    .venv/bin/python bench/bench_evaluation.py [--repeats 5]
    .venv/bin/python bench/bench_evaluation.py --smoke
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def dense_perplexity(model, bow, seed: int = 0, batch_size: int = 512) -> float:
    """The implementation before sparse batches (for the comparison only)."""
    import numpy as np
    import torch

    from fedtopic_pipelines.core.metrics.perplexity import split_tokens

    observed, held_out = split_tokens(bow, seed)
    usable = (np.asarray(observed.sum(1)).ravel() > 0) & (np.asarray(held_out.sum(1)).ravel() > 0)
    observed, held_out = observed[usable], held_out[usable]
    log_likelihood, tokens = 0.0, 0.0
    for start in range(0, observed.shape[0], batch_size):
        seen = torch.from_numpy(observed[start : start + batch_size].toarray())
        target = torch.from_numpy(held_out[start : start + batch_size].toarray())
        word_dist = model.word_distribution(seen)
        log_likelihood += float((target * torch.log(word_dist + 1e-10)).sum())
        tokens += float(target.sum())
    return math.exp(-log_likelihood / tokens)


def alternate(a, b, repeats: int) -> tuple[list[float], list[float]]:
    """Seconds of ``a()`` and ``b()``, alternated (A B, then B A, ...)."""
    first, second = [], []
    for i in range(repeats):
        for which in ("a", "b") if i % 2 == 0 else ("b", "a"):
            started = time.perf_counter()
            (a if which == "a" else b)()
            (first if which == "a" else second).append(time.perf_counter() - started)
    return first, second


def summary(name: str, before: list[float], after: list[float]) -> dict:
    ratios = [x / y for x, y in zip(before, after, strict=True)]
    row = {
        "what": name,
        "before_s": statistics.median(before),
        "after_s": statistics.median(after),
        "speedup": statistics.median(ratios),
        "range": [min(ratios), max(ratios)],
    }
    print(
        f"| {name} | {row['before_s']:.3f} | {row['after_s']:.3f} | {row['speedup']:.2f}x "
        f"[{row['range'][0]:.2f}-{row['range'][1]:.2f}] |"
    )
    return row


def perplexity_rows(args) -> list[dict]:
    import numpy as np
    import scipy.sparse as sp
    import torch

    from fedtopic_pipelines.core.compute import compute_threads
    from fedtopic_pipelines.core.config import ProdLDAConfig
    from fedtopic_pipelines.core.metrics.perplexity import completion_perplexity
    from fedtopic_pipelines.core.models.prodlda import ProdLDA

    rng = np.random.default_rng(0)
    vocab = args.vocab
    bow = sp.random(args.documents, vocab, density=0.02, format="csr", random_state=rng, dtype=np.float32)
    bow.data = rng.integers(1, 4, bow.nnz).astype(np.float32)
    config = ProdLDAConfig(n_topics=20, hidden_sizes=(100, 100), normalization="layer")
    model = ProdLDA.create(vocab, config, 0).eval()
    old, new = dense_perplexity(model, bow), completion_perplexity(model, bow)
    print(f"perplexity: dense {old:.10g}, sparse {new:.10g} (relative difference {abs(old - new) / old:.1e})")
    rows = []
    default = torch.get_num_threads()
    for threads in dict.fromkeys((default, 1)):
        with compute_threads(threads):
            before, after = alternate(
                lambda: dense_perplexity(model, bow), lambda: completion_perplexity(model, bow), args.repeats
            )
        rows.append(summary(f"completion perplexity, {args.documents} documents, {threads} thread(s)", before, after))
    with compute_threads(1):
        dense_default = []
        for _ in range(args.repeats):
            with compute_threads(default):
                started = time.perf_counter()
                dense_perplexity(model, bow)
                dense_default.append(time.perf_counter() - started)
        _, sparse_one = alternate(lambda: None, lambda: completion_perplexity(model, bow), args.repeats)
    rows.append(
        summary(f"completion perplexity: dense at {default} thread(s) -> sparse at 1", dense_default, sparse_one)
    )
    return rows


def logging_rows(args) -> list[dict]:
    import mlflow
    from kedro_mlflow.io.metrics import MlflowMetricsHistoryDataset

    from fedtopic_pipelines.mlflow_metrics import BatchedMetricsHistoryDataset

    steps = max(1, args.metrics // args.keys)
    history = {
        f"train.federated.m{k}": [{"step": s, "value": float(k + s / 7)} for s in range(steps)]
        for k in range(args.keys)
    }
    with tempfile.TemporaryDirectory() as tmp:
        mlflow.set_tracking_uri(f"sqlite:///{Path(tmp) / 'mlflow.db'}")
        mlflow.set_experiment("bench")
        runs: dict[str, list[str]] = {"one": [], "batch": []}

        def save(kind: str):
            def run() -> None:
                with mlflow.start_run() as active:
                    runs[kind].append(active.info.run_id)
                    cls = MlflowMetricsHistoryDataset if kind == "one" else BatchedMetricsHistoryDataset
                    cls().save(history)

            return run

        save("one")()  # warm-up: the store's tables
        before, after = alternate(save("one"), save("batch"), args.repeats)
        client = mlflow.tracking.MlflowClient()
        for key in list(history)[:3]:
            one = [(m.step, m.value) for m in client.get_metric_history(runs["one"][-1], key)]
            batch = [(m.step, m.value) for m in client.get_metric_history(runs["batch"][-1], key)]
            assert sorted(one) == sorted(batch), key
    print(f"logged values read back equal ({args.keys} keys x {steps} steps)")
    return [summary(f"metric logging, {args.keys * steps} values", before, after)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=1500, help="held-out documents (the demo: ~1,500 each)")
    parser.add_argument("--vocab", type=int, default=1976)
    parser.add_argument("--metrics", type=int, default=3000, help="values logged")
    parser.add_argument("--keys", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--smoke", action="store_true", help="small sizes, 1 repeat")
    args = parser.parse_args()
    if args.smoke:
        args.documents, args.metrics, args.repeats = 200, 60, 1
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print("| what | before (s) | after (s) | speed-up [range] |\n|---|---|---|---|")
    rows = perplexity_rows(args) + logging_rows(args)
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
