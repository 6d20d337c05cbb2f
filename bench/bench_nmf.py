"""Benchmark: NMF by SGD (seed 004) against scikit-learn's NMF on the same matrix, and the local
training time of one federated round per organisation.

On the demo corpus's pooled training bag of words (counts; the organisations' matrices as the
pipelines build them, ``common.demo_matrices``), with the same number of topics:

1. scikit-learn ``NMF(init='random', solver='cd')`` (coordinate descent, the classical
   reference), fitted afresh with ``max_iter`` = each of ``--sklearn-iters``: its seconds and
   its loss, the mean over documents of ||x_j - W h_j||^2 (eq. 3 without MI);
2. ours, centralized NMF by SGD (``core/models/nmf.local_epochs`` on the pooled matrix), epoch
   by epoch up to ``--epochs``; the loss is measured between epochs, outside the timing;
3. for each scikit-learn point, the seconds ours needs to reach that loss, and the ratio;
4. one federated round's local training per organisation (``--local-epochs`` over its own
   matrix, with and without the MI term): seconds per client.

One torch thread and one BLAS thread (``--threads``) for both; ``time.perf_counter``.

    .venv/bin/python bench/bench_nmf.py [--topics 50] [--epochs 30] [--smoke]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

logger = logging.getLogger("bench_nmf")


def sklearn_points(matrix, topics: int, iters: list[int], seed: int) -> list[tuple[int, float, float]]:
    """(max_iter, seconds, loss) of scikit-learn's coordinate-descent NMF, each fitted afresh."""
    import numpy as np
    from sklearn.decomposition import NMF

    points = []
    for n in iters:
        nmf = NMF(n_components=topics, init="random", solver="cd", max_iter=n, tol=0.0, random_state=seed)
        started = time.perf_counter()
        h = nmf.fit_transform(matrix)
        seconds = time.perf_counter() - started
        residual = np.asarray(matrix - h @ nmf.components_)
        loss = float(np.square(residual).sum()) / matrix.shape[0]
        points.append((n, seconds, loss))
    return points


def ours_curve(matrix, topics: int, epochs: int, batch: int, lr: float, seed: int) -> list[tuple[int, float, float]]:
    """(epoch, cumulative training seconds, loss) of centralized NMF by SGD."""
    import torch

    from fedtopic_pipelines.core.models.nmf import NMFModel, local_epochs, mean_reconstruction, nmf_init

    mean = float(matrix.mean())
    model = NMFModel(matrix.shape[1], topics, with_critic=False, x_mean=mean, seed=seed)
    h = nmf_init(mean, (matrix.shape[0], topics), torch.Generator().manual_seed(seed + 1), torch.float32)
    generator = torch.Generator().manual_seed(seed + 2)
    curve, elapsed = [(0, 0.0, mean_reconstruction(model, h, matrix))], 0.0
    for epoch in range(1, epochs + 1):
        started = time.perf_counter()
        local_epochs(model, h, matrix, 1, batch, lr, 0.0, generator)
        elapsed += time.perf_counter() - started
        curve.append((epoch, elapsed, mean_reconstruction(model, h, matrix)))
    return curve


def round_seconds(matrices: dict, topics: int, epochs: int, batch: int, lr: float, mi: float, seed: int) -> dict:
    """Seconds of one federated round's local training (ClientUpdate) at each organisation."""
    import torch

    from fedtopic_pipelines.core.models.nmf import NMFModel, local_epochs, nmf_init

    vocab = next(iter(matrices.values())).shape[1]
    model = NMFModel(vocab, topics, with_critic=mi > 0, x_mean=1.0, seed=seed)
    seconds = {}
    for org, matrix in matrices.items():
        h = nmf_init(
            float(matrix.mean()), (matrix.shape[0], topics), torch.Generator().manual_seed(seed), torch.float32
        )
        started = time.perf_counter()
        local_epochs(model, h, matrix, epochs, batch, lr, mi, torch.Generator().manual_seed(seed))
        seconds[org] = time.perf_counter() - started
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=50)
    parser.add_argument("--epochs", type=int, default=30, help="our SGD epochs over the pooled matrix")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--sklearn-iters", default="5,20,100,400")
    parser.add_argument("--local-epochs", type=int, default=1)
    parser.add_argument("--mi-weight", type=float, default=0.1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--smoke", action="store_true", help="the smoke corpus, a few epochs")
    args = parser.parse_args()
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    if args.smoke:
        args.topics, args.epochs, args.sklearn_iters, args.batch = 5, 2, "2,5", 16
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import scipy.sparse as sp
    import torch
    from threadpoolctl import threadpool_limits

    from bench.common import demo_matrices, project_config

    torch.set_num_threads(args.threads)
    params, project = project_config("smoke" if args.smoke else None)
    _, matrices = demo_matrices(params, project)
    matrices = {org: sp.csr_matrix(m, dtype="float32") for org, m in matrices.items()}
    pooled = sp.vstack(list(matrices.values())).tocsr()
    logger.info(
        "matrix: %d documents x %d terms (%d non-zeros), %d topics; %d thread(s)",
        pooled.shape[0],
        pooled.shape[1],
        pooled.nnz,
        args.topics,
        args.threads,
    )
    iters = [int(x) for x in args.sklearn_iters.split(",")]
    with threadpool_limits(args.threads):
        reference = sklearn_points(pooled, args.topics, iters, args.seed)
        curve = ours_curve(pooled, args.topics, args.epochs, args.batch, args.lr, args.seed)
        rounds = {
            mi: round_seconds(matrices, args.topics, args.local_epochs, args.batch, args.lr, mi, args.seed)
            for mi in (0.0, args.mi_weight)
        }
    logger.info("| scikit-learn max_iter | its seconds | its loss | ours: epochs to reach it | ours: seconds | ratio |")
    logger.info("|---|---|---|---|---|---|")
    for n, seconds, loss in reference:
        reached = next(((e, s) for e, s, ours in curve if ours <= loss), None)
        if reached is None:
            logger.info(
                "| %d | %.2f | %.4f | not in %d (ours: %.4f) | | |", n, seconds, loss, args.epochs, curve[-1][2]
            )
        else:
            logger.info(
                "| %d | %.2f | %.4f | %d | %.2f | %.2fx |",
                n,
                seconds,
                loss,
                reached[0],
                reached[1],
                reached[1] / seconds,
            )
    logger.info("ours per epoch: %s", ", ".join(f"{e}: {v:.4f} ({s:.1f} s)" for e, s, v in curve))
    for mi, seconds in rounds.items():
        logger.info(
            "one round, %d local epoch(s), MI weight %s: seconds per client %s",
            args.local_epochs,
            mi,
            ", ".join(f"{org} {s:.2f} ({matrices[org].shape[0]} docs)" for org, s in seconds.items()),
        )


if __name__ == "__main__":
    main()
