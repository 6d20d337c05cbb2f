"""Benchmark: one full-scale point of gFedNTM's synthetic experiment (issue 3, part 8).

Generates the paper's setting (L = 5 organisations x (10,000 + 1,000) documents, V = 5000,
K = 50) with the base parameters of ``conf/base/parameters_synthetic.yml``, then trains
and scores all three scenarios. Reports the generator's wall time (repeated) next to a
reference measured in the same run, a per-document Python loop drawing the same kind of
documents, then the wall time of each stage, and the process's peak resident memory.
``--smoke`` runs the same code on the smoke environment's tiny organisations.

    .venv/bin/python bench/bench_synthetic.py [--n-shared 10] [--generate-only] [--env ENV] [--smoke]
"""

from __future__ import annotations

import argparse
import logging
import platform
import resource
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from common import project_config

from fedtopic_pipelines.core.synthetic import generate
from fedtopic_pipelines.experiments.config import SweepPoint
from fedtopic_pipelines.experiments.synthetic import run_point

ROOT = Path(__file__).resolve().parents[1]
logger = logging.getLogger("bench")


def loop_reference(beta: np.ndarray, alpha: np.ndarray, n_docs: int, rng: np.random.Generator) -> float:
    """Seconds per document of the textbook generator: one Python iteration per word."""
    start = time.perf_counter()
    for _ in range(n_docs):
        theta = rng.dirichlet(alpha)
        for _ in range(rng.integers(150, 251)):
            topic = rng.choice(theta.size, p=theta)
            rng.choice(beta.shape[1], p=beta[topic])
    return (time.perf_counter() - start) / n_docs


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-shared", type=int, default=10)
    parser.add_argument("--generate-repeats", type=int, default=3)
    parser.add_argument("--generate-only", action="store_true")
    parser.add_argument("--env", default=None, help="Kedro environment (default: base)")
    parser.add_argument("--smoke", action="store_true", help="smoke environment, K' = 2, 1 generator repeat")
    args = parser.parse_args()
    if args.smoke:
        args.env, args.n_shared, args.generate_repeats = "smoke", 2, 1
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    _, project = project_config(args.env, {"synthetic": {"repetitions": 1}})
    config = project.synthetic
    point = SweepPoint("n_shared", args.n_shared, 0)
    generator = point.generator_config(config)
    n_docs = generator.n_organisations * (generator.n_train + generator.n_validation)

    times = []
    for _ in range(args.generate_repeats):
        start = time.perf_counter()
        corpus = generate(generator)
        times.append(time.perf_counter() - start)
    gen_s = statistics.median(times)
    alpha = np.full(generator.n_topics, generator.document_prior)
    per_doc_loop = loop_reference(corpus.beta, alpha, 20, np.random.default_rng(0))
    print(f"\nmachine: {platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}")
    print(f"generation of {n_docs} documents, V={generator.vocab_size}, K={generator.n_topics}, K'={args.n_shared}")
    print("| generator | wall time (s) | documents / s |")
    print("| --- | --- | --- |")
    print(
        f"| vectorised (median of {len(times)}: {', '.join(f'{t:.2f}' for t in times)}) | {gen_s:.2f} | "
        f"{n_docs / gen_s:,.0f} |"
    )
    loop_total = per_doc_loop * n_docs
    print(f"| per-word Python loop (20 documents, extrapolated) | {loop_total:.0f} | {1 / per_doc_loop:,.0f} |")
    print(f"ratio loop / vectorised: {per_doc_loop * n_docs / gen_s:.0f}x; peak RSS so far {peak_rss_mib():.0f} MiB")
    if args.generate_only:
        return
    del corpus

    start = time.perf_counter()
    result = run_point(config, point)
    total = time.perf_counter() - start
    print("\n| stage | wall time (s) |")
    print("| --- | --- |")
    for stage, seconds in result.timings.items():
        print(f"| {stage.removesuffix('_s')} | {seconds:.1f} |")
    print(f"| total point | {total:.1f} ({total / 60:.1f} min) |")
    print(f"peak RSS {peak_rss_mib():.0f} MiB")
    print("\n| model | steps | best step | stopped early | DSS | TSS |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in result.rows:
        print(
            f"| {row['model']} | {row['steps']} | {row['best_step']} | {row['stopped_early']} | "
            f"{row['dss']:.1f} | {row['tss']:.2f} |"
        )
    print(f"TSS baseline {result.rows[0]['tss_baseline']:.2f} +- {result.rows[0]['tss_baseline_std']:.2f}")


if __name__ == "__main__":
    main()
