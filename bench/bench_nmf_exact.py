"""Benchmark: FedNMF exact (family ``nmf_exact``) through the federation engine, against scikit-learn's
``NMF(solver="cd")`` on the pooled documents: iterations, loss, equality and wall time to convergence.

On one document-term matrix (``--corpus``: SMS Spam or Rotten Tomatoes, vectorised as
``bench_nmf.py`` does, raw counts, split into ``--clients`` random shards; or the demo's
organisations), FedNMF exact runs as a user runs it: ``run_federation`` with the in-process engine,
one endpoint per organisation, the project's default privacy screen, every update validated. Its
time counts every organisation's work and the server's in one process (preparation included:
each organisation's checks, its float64 copy and transpose, its initial W).

1. **Equality**: scikit-learn's ``NMF(init="custom")`` from the federation's own initial W (the
   organisations' draws, stacked) and H (the server's), same ``--tol`` and ``--max-iter``:
   iterations, the largest relative difference of H, both reconstruction errors.
2. **Time to scikit-learn's converged loss**: ``--repeats`` fits of each, alternated (A B, then
   B A, ...), median seconds and the median of the pairwise ratios. Both start from the same W
   and H, so they reach the same loss at the same iteration.
3. **Context**: scikit-learn with its own initialisations (``random`` and the default
   ``nndsvda``, which FedNMF exact does not offer: it needs the pooled SVD): time, iterations, loss.

``--threads`` BLAS threads for both (threadpoolctl); the load average is printed before and after.

    .venv/bin/python bench/bench_nmf_exact.py --corpus spam
    .venv/bin/python bench/bench_nmf_exact.py --corpus rt
    .venv/bin/python bench/bench_nmf_exact.py --smoke
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))


def config(args):
    from fedtopic_pipelines.core.config import TrainConfig

    return TrainConfig.from_params(
        {
            "model": {"family": "nmf_exact", "n_topics": args.topics},
            "max_steps": args.max_iter,
            "tolerance": args.tol,
            "seed": args.init_seed,
            "device": "cpu",
            "scenarios": ["federated"],
        }
    )


def vocabulary(parts):
    import numpy as np
    import pandas as pd

    counts = np.asarray(sum(p.sum(axis=0) for p in parts)).ravel()
    return pd.DataFrame({"term": [f"t{j}" for j in range(counts.size)], "frequency": counts})


def federated_fit(parts, args):
    """(seconds, H, rounds, reconstruction error) of one federation through the engine."""
    from fedtopic_pipelines.core.federated.engine import InProcessEngine
    from fedtopic_pipelines.core.federation import run_federation
    from fedtopic_pipelines.core.site import MemoryEndpoint

    names = [f"org{i}" for i in range(len(parts))]
    train = config(args)
    words = vocabulary(parts)
    started = time.perf_counter()
    engine = InProcessEngine([MemoryEndpoint(n, p) for n, p in zip(names, parts, strict=True)])
    result = run_federation(engine, names, train, vocabulary=words, progress=False)
    seconds = time.perf_counter() - started
    history = result.model.history
    h = result.model.to_model().ht.detach().numpy().T.copy()
    return seconds, h, len(history), float(history[-1].metrics["reconstruction_error"])


def initial_factors(parts, args):
    """The federation's initial W (each organisation's draw, in order) and H (the server's)."""
    import numpy as np
    import torch

    from fedtopic_pipelines.core.families import get_family
    from fedtopic_pipelines.core.seeds import derive_seed

    family = get_family("nmf_exact")
    train = config(args)
    cpu = torch.device("cpu")
    vocab = parts[0].shape[1]
    server = family.create_model(vocab, train, cpu)
    family.prepare_server_model(server, vocabulary(parts), {f"org{i}": p.shape[0] for i, p in enumerate(parts)}, train)
    ws = []
    for stream, part in enumerate(parts):
        model = family.create_model(vocab, train, cpu)
        family.init_local(model, part, train, derive_seed(train.seed, 6000, stream))
        ws.append(model.doc_weights.detach().numpy().copy())
    return np.vstack(ws), server.ht.detach().numpy().T.copy()


def sklearn_fit(matrix, args, init: str, w0=None, h0=None):
    """(seconds, H, n_iter, reconstruction error) of one scikit-learn fit."""
    from sklearn.decomposition import NMF
    from sklearn.exceptions import ConvergenceWarning

    seed = None if init == "custom" else args.init_seed
    model = NMF(args.topics, init=init, solver="cd", tol=args.tol, max_iter=args.max_iter, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        started = time.perf_counter()
        if init == "custom":
            model.fit_transform(matrix, W=w0.copy(), H=h0.copy())
        else:
            model.fit_transform(matrix)
        seconds = time.perf_counter() - started
    return seconds, model.components_, int(model.n_iter_), float(model.reconstruction_err_)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=("demo", "spam", "rt"), default="spam")
    parser.add_argument("--topics", type=int, default=50)
    parser.add_argument("--clients", type=int, default=10, help="spam, rt: random equal shards")
    parser.add_argument("--tol", type=float, default=1e-4, help="scikit-learn's default")
    parser.add_argument("--max-iter", type=int, default=1000)
    parser.add_argument("--init-seed", type=int, default=0, help="the run's seed (the initial W and H)")
    parser.add_argument("--repeats", type=int, default=5, help="alternated timed fits of each")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=42, help="the shards' seed")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--smoke", action="store_true", help="the demo's smoke corpus, 5 topics, 1 timed fit each")
    args = parser.parse_args()
    if args.smoke:
        args.corpus, args.topics, args.repeats = "demo", 5, 1
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, str(args.threads))
    logging.basicConfig(level=logging.WARNING)
    import numpy as np
    import scipy.sparse as sp
    from threadpoolctl import threadpool_limits

    from bench.bench_nmf import load_corpus

    corpus = load_corpus(args.corpus, args.smoke, args.clients, args.seed)
    logging.getLogger("fedtopic_pipelines").setLevel(logging.WARNING)
    parts = [corpus.matrix[rows].tocsr() for rows in corpus.organisations.values()]
    pooled = sp.vstack(parts).tocsr().astype(np.float64)
    print(f"corpus: {corpus.source}")
    print(
        f"matrix: {pooled.shape[0]} documents x {pooled.shape[1]} terms ({pooled.nnz} non-zeros), float64, "
        f"{args.topics} topics, {len(parts)} organisations "
        f"({min(p.shape[0] for p in parts)}-{max(p.shape[0] for p in parts)} documents), tol {args.tol}, "
        f"{args.threads} BLAS thread(s)"
    )
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    out: dict = {"corpus": args.corpus, "shape": list(pooled.shape), "topics": args.topics, "clients": len(parts)}
    with threadpool_limits(args.threads):
        w0, h0 = initial_factors(parts, args)
        _, h_fed, it_fed, err_fed = federated_fit(parts, args)
        _, h_ref, it_ref, err_ref = sklearn_fit(pooled, args, "custom", w0, h0)
        relative = float(np.abs(h_fed - h_ref).max() / max(np.abs(h_ref).max(), 1e-300))
        print(
            f"equality (same initial W and H): iterations federated {it_fed} / scikit-learn {it_ref}; "
            f"max |dH| / max |H| {relative:.2e}; reconstruction error {err_fed:.10g} / {err_ref:.10g}"
        )
        out["equality"] = {
            "iterations": [it_fed, it_ref],
            "h_relative": relative,
            "reconstruction_error": [err_fed, err_ref],
        }
        fed, ref, ratios = [], [], []
        for i in range(args.repeats):
            order = ("fed", "ref") if i % 2 == 0 else ("ref", "fed")
            pair = {}
            for which in order:
                if which == "fed":
                    pair["fed"] = federated_fit(parts, args)[0]
                else:
                    pair["ref"] = sklearn_fit(pooled, args, "custom", w0, h0)[0]
            fed.append(pair["fed"])
            ref.append(pair["ref"])
            ratios.append(pair["fed"] / pair["ref"])
        print(
            f"time to the converged loss ({args.repeats} alternated pairs): federated "
            f"{statistics.median(fed):.3f} s, scikit-learn {statistics.median(ref):.3f} s, "
            f"ratio (median of pairs) {statistics.median(ratios):.2f}x "
            f"[{min(ratios):.2f}-{max(ratios):.2f}]"
        )
        out["seconds"] = {"federated": fed, "sklearn": ref, "ratios": ratios}
        out["context"] = {}
        for init in ("random", "nndsvda"):
            seconds, _, iterations, error = sklearn_fit(pooled, args, init)
            print(f"context: scikit-learn init={init}: {seconds:.3f} s, {iterations} iterations, error {error:.6g}")
            out["context"][init] = {"seconds": seconds, "iterations": iterations, "reconstruction_error": error}
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
