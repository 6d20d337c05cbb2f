"""Benchmark: centralized training throughput and federated / centralized wall-time ratio.

On the demo corpus (the chosen environment's parameters: 5 organisations, union
vocabulary), both scenarios run the same number of optimizer steps through the in-process
engine; each measurement is repeated and the two scenarios alternate so machine noise hits
both. Prints a Markdown table for docs/performance.md. ``--smoke`` runs the same code on
the smoke environment for a few steps (``make test`` runs it, so the benchmark cannot rot).

    .venv/bin/python bench/bench_training.py [--steps 200] [--repeats 5] [--env ENV] [--smoke]
"""

from __future__ import annotations

import argparse
import logging
import platform
import statistics
import time

import torch
from common import demo_matrices, project_config

from fedtopic_pipelines.core.training import train_scenarios

logger = logging.getLogger("bench")


def time_scenario(matrices: dict, vocabulary, env: str | None, scenario: str, steps: int) -> float:
    _, project = project_config(env, {"train": {"scenarios": [scenario], "max_steps": steps, "max_epochs": None}})
    start = time.perf_counter()
    train_scenarios(matrices, project.train, progress=False, vocabulary=vocabulary)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--env", default=None, help="Kedro environment (default: base)")
    parser.add_argument("--smoke", action="store_true", help="smoke environment, 3 steps, 1 repeat")
    args = parser.parse_args()
    if args.smoke:
        args.env, args.steps, args.repeats = "smoke", 3, 1
    logging.basicConfig(level=logging.WARNING)
    params, project = project_config(args.env)
    vocabulary, matrices = demo_matrices(params, project)
    n_orgs = len(matrices)
    docs_per_step = n_orgs * project.train.batch_size
    time_scenario(matrices, vocabulary, args.env, "centralized", min(10, args.steps))  # warm-up
    central, federated = [], []
    for _ in range(args.repeats):
        central.append(time_scenario(matrices, vocabulary, args.env, "centralized", args.steps))
        federated.append(time_scenario(matrices, vocabulary, args.env, "federated", args.steps))
    c_med, f_med = statistics.median(central), statistics.median(federated)
    ratios = [f / c for f, c in zip(federated, central, strict=True)]
    logger.info("done")
    print(
        f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, device {'cuda' if torch.cuda.is_available() else 'cpu'}"
    )
    print(
        f"demo corpus ({args.env or 'base'}): {n_orgs} organisations, V = {len(vocabulary)}, "
        f"K = {project.train.model.n_topics}, {args.steps} steps x {docs_per_step} documents, "
        f"{args.repeats} repeats (median)\n"
    )
    print("| scenario | median wall time (s) | documents / s | steps / s |")
    print("| --- | --- | --- | --- |")
    for name, med in (("centralized", c_med), ("federated (in-process)", f_med)):
        print(f"| {name} | {med:.2f} | {args.steps * docs_per_step / med:.0f} | {args.steps / med:.1f} |")
    print(
        f"\nratio federated / centralized: median of per-repeat ratios {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}); ratio of medians {f_med / c_med:.3f}"
    )


if __name__ == "__main__":
    main()
