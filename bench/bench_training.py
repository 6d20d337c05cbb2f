"""Benchmark: centralized training throughput and federated / centralized wall-time ratio.

On the demo corpus (the chosen environment's parameters: 5 organisations, union
vocabulary), both scenarios run the same number of optimizer steps through the in-process
engine; each measurement is repeated and the two scenarios alternate so machine noise hits
both. Prints a Markdown table for docs/performance.md. ``--smoke`` runs the same code on
the smoke environment for a few steps (``make test`` runs it, so the benchmark cannot rot).

Two more measurements, on a synthetic bag of words of the demo's shape (V = 4,659, about 2 %
non-zero, five ghost batches of 64 documents per step, the base model):

* ``--layouts``: one training step (forward, backward, Adam) at 1 thread with the batch as the
  batch sources give it (sparse CSR) against the same batch densified, as before the sparse
  input layer; interleaved blocks in one process.
* ``--threads-policy``: step time of each thread policy (threads, ``OMP_WAIT_POLICY``), each
  in a fresh process (the OpenMP runtime reads its settings when torch loads), idle and with
  competing CPU-bound processes that this script starts itself, interleaved; the ratio of
  loaded to idle time is what a user sees on a busy host.

    .venv/bin/python bench/bench_training.py [--steps 200] [--repeats 5] [--env ENV] [--smoke]
    .venv/bin/python bench/bench_training.py --layouts [--steps 100] [--repeats 3]
    .venv/bin/python bench/bench_training.py --threads-policy [--steps 30] [--repeats 3] [--competitors 1]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
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


DEMO_SHAPE = {"vocab": 4659, "density": 0.02, "organisations": 5, "documents": 600}
# (label, torch threads or None for torch's default, OMP_WAIT_POLICY or None for the runtime's default)
POLICIES = (
    ("torch default threads", None, None),
    ("torch default threads, OMP_WAIT_POLICY=PASSIVE", None, "PASSIVE"),
    ("1 thread", 1, None),
)


def synthetic_step_setup(smoke: bool):
    """A model, its optimizer and a pooled ghost-batch stream of the demo's shape (smaller with ``smoke``)."""
    import numpy as np
    import scipy.sparse as sp

    from fedtopic_pipelines.core.config import ProdLDAConfig, TrainConfig
    from fedtopic_pipelines.core.families.prodlda import ProdLDAFamily

    vocab = 300 if smoke else DEMO_SHAPE["vocab"]
    rows = DEMO_SHAPE["organisations"] * DEMO_SHAPE["documents"]
    matrix = sp.random(rows, vocab, density=DEMO_SHAPE["density"], format="csr", random_state=0, dtype=np.float32)
    matrix.data = np.ceil(matrix.data * 3)  # counts 1 to 3
    config = TrainConfig(model=ProdLDAConfig(n_topics=20, hidden_sizes=(100, 100)), batch_size=64)
    family = ProdLDAFamily()
    model = family.create_model(vocab, config, torch.device("cpu"))
    stream = family.stream(matrix, config, 0, torch.device("cpu"), ghosts=DEMO_SHAPE["organisations"])
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.99, 0.999))
    return family, model, stream, optimizer


class Densified:
    """The same stream with every batch densified: the input path before the sparse input layer."""

    def __init__(self, stream) -> None:
        self.stream = stream

    def next_batches(self):
        return [(batch.to_dense(), noise) for batch, noise in self.stream.next_batches()]


def timed_steps(family, model, stream, optimizer, steps: int) -> float:
    """Seconds (process CPU time) per training step: forward, backward, optimizer."""
    start = time.process_time()
    for _ in range(steps):
        update = family.local_step(model, stream)
        for name, p in model.named_parameters():
            p.grad = update.tensors[name]
        optimizer.step()
    return (time.process_time() - start) / steps


def layouts(args) -> None:
    torch.set_num_threads(1)
    family, model, stream, optimizer = synthetic_step_setup(args.smoke)
    timed_steps(family, model, stream, optimizer, 3)  # warm-up
    sparse, dense = [], []
    for _ in range(args.repeats):
        dense.append(timed_steps(family, model, Densified(stream), optimizer, args.steps))
        sparse.append(timed_steps(family, model, stream, optimizer, args.steps))
    print(f"1 thread, torch {torch.__version__}, {args.steps} steps x {args.repeats} interleaved repeats (median)\n")
    print("| batch layout | CPU ms / step | steps / CPU-s |")
    print("| --- | --- | --- |")
    for name, values in (("dense (before)", dense), ("sparse CSR (now)", sparse)):
        med = statistics.median(values)
        print(f"| {name} | {1000 * med:.1f} | {1 / med:.1f} |")
    ratios = [d / s for d, s in zip(dense, sparse, strict=True)]
    spread = f"min {min(ratios):.2f}, max {max(ratios):.2f}"
    print(f"\nspeed-up sparse / dense: median {statistics.median(ratios):.2f}x ({spread})")


def policy_worker(args) -> None:
    """One policy's measurement in a fresh process: wall seconds per step, as JSON on stdout."""
    if args.worker_threads:
        torch.set_num_threads(args.worker_threads)
    family, model, stream, optimizer = synthetic_step_setup(args.smoke)
    timed_steps(family, model, stream, optimizer, 2)  # warm-up
    start = time.perf_counter()
    timed_steps(family, model, stream, optimizer, args.steps)
    wall = (time.perf_counter() - start) / args.steps
    print(json.dumps({"wall_s": wall, "threads": torch.get_num_threads()}))


def threads_policy(args) -> None:
    """Idle and loaded step times of every policy, interleaved; competitors started here."""
    results: dict[tuple[str, bool], list[float]] = {}
    threads_of: dict[str, int] = {}
    # with no competitor the loaded pass would repeat the idle one: it is not run
    passes = (False, True) if args.competitors else (False,)
    for _ in range(args.repeats):
        for loaded in passes:
            competitors = []
            if loaded:
                burn = "while True: pass"
                competitors = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(args.competitors)]
                time.sleep(0.5)
            try:
                for label, threads, wait in POLICIES:
                    env = {k: v for k, v in os.environ.items() if k not in {"OMP_WAIT_POLICY", "OMP_NUM_THREADS"}}
                    if wait:
                        env["OMP_WAIT_POLICY"] = wait
                    command = [sys.executable, __file__, "--worker", "--steps", str(args.steps)]
                    command += ["--worker-threads", str(threads or 0)] + (["--smoke"] if args.smoke else [])
                    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True, timeout=600)
                    out = json.loads(done.stdout.strip().splitlines()[-1])
                    results.setdefault((label, loaded), []).append(out["wall_s"])
                    threads_of[label] = out["threads"]
            finally:
                for process in competitors:
                    process.kill()
                    process.wait()
    cores = os.cpu_count() or 1
    print(
        f"{cores} cores, torch {torch.__version__}, {args.competitors} competing CPU-bound process(es), "
        f"{args.steps} steps x {args.repeats} interleaved repeats (median wall time per step of "
        f"{DEMO_SHAPE['organisations']} x 64 documents)\n"
    )
    print("| policy | threads | idle ms / step | loaded ms / step | loaded / idle | fair-share bound |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, _, _ in POLICIES:
        idle = statistics.median(results[(label, False)])
        t = threads_of[label]
        if not args.competitors:  # nothing competed: no loaded figures
            print(f"| {label} | {t} | {1000 * idle:.0f} | - | - | - |")
            continue
        busy = statistics.median(results[(label, True)])
        # the cores it had idle against its fair share with the competitors: the slowdown a loss of CPU explains
        share = min(t, cores * t / (t + args.competitors))
        bound = min(t, cores) / share
        print(f"| {label} | {t} | {1000 * idle:.0f} | {1000 * busy:.0f} | {busy / idle:.2f} | {bound:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=None, help="steps per measurement")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--env", default=None, help="Kedro environment (default: base)")
    parser.add_argument("--smoke", action="store_true", help="smoke sizes, few steps, 1 repeat")
    parser.add_argument("--layouts", action="store_true", help="sparse against dense batches, 1 thread")
    parser.add_argument("--threads-policy", action="store_true", help="thread policies, idle and loaded")
    parser.add_argument("--competitors", type=int, default=1, help="competing CPU-bound processes (--threads-policy)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker-threads", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    defaults = (30, 3) if args.threads_policy or args.worker else (100, 3) if args.layouts else (200, 5)
    args.steps = args.steps or (3 if args.smoke else defaults[0])
    args.repeats = args.repeats or (1 if args.smoke else defaults[1])
    logging.basicConfig(level=logging.WARNING)
    if args.worker:
        return policy_worker(args)
    if args.layouts:
        return layouts(args)
    if args.threads_policy:
        return threads_policy(args)
    if args.smoke:
        args.env = "smoke"
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
        f"{project.train.threads or torch.get_num_threads()} threads (train.threads), "
        f"device {'cuda' if torch.cuda.is_available() else 'cpu'}"
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
