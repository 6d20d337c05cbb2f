"""Scale study: the federated engine at 10, 50, 100 (and 1,000) organisations, in process and on Flower.

Why: the demo has five organisations; a consortium may have hundreds. This measures what grows
with the number of organisations N on the default federated model (ProdLDA, FedSGD, the base
parameters of ``conf/base/parameters_train.yml``): seconds per round, the process's peak memory,
bytes per round, and the rounds and seconds to a fixed pooled quality.

Data: the demo corpus as ``ingest_demo`` cuts it (20 Newsgroups, five organisations) is pooled,
train and test documents together, and split again into N organisations of equal size with
Dirichlet(alpha p) label skew over the 20 newsgroups (``dirichlet_label_partition``, the
project's own non-IID split: alpha 1, seed 42 by default; each organisation keeps every
document's train/test split). At 1,000 organisations each holds about 18 documents, 11 of them
for training.

In process (``--orgs``): every N runs in a fresh process (so its peak RSS, ``VmHWM``, is that N's).
Each organisation preprocesses its own documents (``Site.preprocess``) and vectorises them on
one FIXED vocabulary: the five demo organisations' consensus, the vocabulary ``kedro run``
trains on. So the model, and the bytes an update carries, are the same at every N, and only N
changes; the vocabulary the consensus of the N organisations would agree on (same floors) is
computed too and reported beside (``consensus_terms``). Training is what ``train_scenarios``
runs for the federated scenario (``run_federation`` on the ``InProcessEngine`` with one
``MemoryEndpoint`` per organisation, under ``compute_threads`` and ``deterministic_algorithms``),
called directly for its round observer, with torch at one thread. Every ``--every`` rounds the
model is scored with the evaluate pipeline's pooled NPMI (top ``evaluate.top_words`` words,
co-occurrences counted over every organisation's preprocessed texts, both splits, summed;
``coherence_by_model`` c_npmi, as ``bench_learning_curve.py``). Training stops at
``--rounds``, at ``--budget-s`` seconds of training, or (``--stop-at-target``) once the pooled
NPMI reaches every ``--targets`` level. Seconds per round (wall, and this process's CPU seconds, which
other work on the machine does not inflate) exclude the scoring. Bytes per round: the
history's ``RoundRecord.client_bytes`` summed over the organisations (what the updates
carried, uplink); the broadcast model's bytes times N (downlink) is computed, not measured.

Flower (``--flower-orgs``): each N's organisations are written as Parquet shards to a
temporary folder and served by ``LocalFederation`` (one SuperLink, one SuperNode and executor
per organisation, TLS and node authentication on, loopback); ``--flower-rounds`` rounds of the
same job are submitted as ``bench_flower.py`` does, and the ServerApp's round latencies read
from ``run.json``. While the run goes on, RSS is sampled every 0.5 s: SuperLink (its own
process), ServerApp, and the sum over every SuperNode and executor process. Before each
federation the script checks that the machine's used memory plus an estimate (``--node-mb``
per organisation) stays under ``--max-used-gb`` and skips that N otherwise. Here each node
runs the vocabulary consensus itself, so the Flower runs train on the N organisations'
consensus vocabulary. ``os.getloadavg()`` is recorded with every measurement.

Writes ``scale.json`` (everything), ``scale_curve.csv`` (every scored point), ``scale.csv``
(one row per N and engine) and ``scale.png`` (seconds per round and peak RSS against N) to
``--out``; prints the Markdown table.

    .venv/bin/python bench/bench_scale.py --orgs 10 50 100 --rounds 3000 --every 100 --targets 0.05 0.08 \
        --budget-s 600 --stop-at-target --flower-orgs 10 20 --flower-rounds 20 --out report
    .venv/bin/python bench/bench_scale.py --orgs 1000 --rounds 300 --every 100 --no-flower --out report/n1000
    .venv/bin/python bench/bench_scale.py --smoke --out /tmp/scale-smoke
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import logging
import multiprocessing
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import psutil
import torch
from common import ROOT, project_config
from tqdm.auto import tqdm

logger = logging.getLogger("bench.scale")
MB = 1024 * 1024


class Stop(Exception):
    """Raised by the round observer to end training early (target reached or budget spent)."""


def load() -> tuple[float, float, float]:
    return tuple(round(x, 2) for x in os.getloadavg())


def org_names(n: int) -> list[str]:
    return [f"org{i:04d}" for i in range(n)]


def split_documents(docs: pd.DataFrame, n: int, alpha: float, seed: int) -> tuple[dict[str, pd.DataFrame], dict]:
    """The pooled documents as ``n`` organisations of equal size with Dirichlet(alpha p) label skew."""
    from fedtopic_pipelines.core.ingest.partition import dirichlet_label_partition

    logging.getLogger("fedtopic_pipelines.core.ingest.partition").setLevel(logging.WARNING)
    names = org_names(n)
    partition = dirichlet_label_partition(docs["label"].tolist(), names, alpha, seed, "the pooled demo")
    tables = {
        name: docs.loc[partition.assignment == i].assign(organisation=name).reset_index(drop=True)
        for i, name in enumerate(names)
    }
    report = partition.report
    facts = {
        "documents_per_organisation": report["documents_per_organisation"],
        "left_over": report["remainder"],
        "mean_label_entropy_nats": report["mean_label_entropy_nats"],
        "corpus_label_entropy_nats": report["corpus_label_entropy_nats"],
    }
    return tables, facts


def peak_rss_mb() -> float:
    """This process's peak resident memory (``VmHWM``). Not ``ru_maxrss``: Linux carries that across
    ``execve``, so a spawned child would report its parent's peak at the fork when that is larger."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux


def model_bytes(model: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


class Observer:
    """After every round: its seconds (scoring excluded); every ``every`` rounds the pooled NPMI.
    Raises :class:`Stop` at the last target (when asked) or once ``budget_s`` of training is spent."""

    def __init__(
        self, scorer: Callable[[Any], float], every: int, total: int, targets: list, stop: bool, budget_s: float
    ) -> None:
        self.scorer, self.every, self.total, self.targets, self.stop, self.budget_s = (
            scorer, every, total, sorted(targets), stop, budget_s,
        )  # fmt: skip
        self.seconds: list[float] = []
        self.cpu_seconds: list[float] = []  # this process's CPU time: what a round costs, whatever else runs
        self.points: list[dict[str, Any]] = []
        self.reached: dict[str, Any] = {}  # target (as text) -> the first scored round at or above it
        self.server = None
        self.stopped = ""
        self.train_seconds = 0.0
        self._last, self._last_cpu = time.perf_counter(), time.process_time()

    def __call__(self, server) -> None:
        now = time.perf_counter()
        self.cpu_seconds.append(time.process_time() - self._last_cpu)
        self.seconds.append(now - self._last)
        self.train_seconds += now - self._last
        self.server = server
        done = server.next_round
        over = self.train_seconds >= self.budget_s
        if done % self.every == 0 or done == self.total or over:
            npmi = self.scorer(server.strategy.model)
            rss = psutil.Process().memory_info().rss / MB
            point = {"round": done, "train_seconds": round(self.train_seconds, 3), "npmi": npmi, "rss_mb": rss}
            self.points.append({**point, "loss": float(server.history[-1].loss), "loadavg": load()})
            logger.info("round %d: pooled NPMI %.4f, %.1f s training, RSS %.0f MB", done, npmi, self.train_seconds, rss)
            for target in self.targets:
                if f"{target:g}" not in self.reached and npmi >= target:
                    self.reached[f"{target:g}"] = {"round": done, "train_seconds": round(self.train_seconds, 3)}
            if self.stop and len(self.reached) == len(self.targets):
                self.stopped = "every target reached"
                raise Stop
            if over:
                self.stopped = f"budget of {self.budget_s:g} s spent"
                raise Stop
        self._last, self._last_cpu = time.perf_counter(), time.process_time()


def in_process(n: int, docs: pd.DataFrame, vocabulary: pd.DataFrame, texts: list[list[str]], args: dict) -> dict:
    """One N in this (fresh) process: split, each organisation's site steps, FedSGD with scoring."""
    from fedtopic_pipelines.core.compute import compute_threads, deterministic_algorithms
    from fedtopic_pipelines.core.config import EvaluateConfig, from_mapping
    from fedtopic_pipelines.core.federated.engine import InProcessEngine
    from fedtopic_pipelines.core.federation import run_federation
    from fedtopic_pipelines.core.metrics.scoring import PooledScorer
    from fedtopic_pipelines.core.site import MemoryEndpoint, Site
    from fedtopic_pipelines.core.vocab.consensus import exchange_vocabulary

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(1)
    params, project = project_config(args["env"])
    logging.getLogger("fedtopic_pipelines").setLevel(logging.WARNING)
    logger.setLevel(logging.INFO)
    started = time.perf_counter()
    tables, facts = split_documents(docs, n, args["alpha"], args["seed"])
    terms = vocabulary["term"].tolist()
    sites = {org: Site(org) for org in tables}
    results, matrices = {}, {}
    with contextlib.redirect_stderr(io.StringIO()):  # the site steps' own bars, one per organisation
        for org in tqdm(tables, desc=f"N={n}: site steps", file=sys.__stderr__):
            results[org] = sites[org].preprocess(tables[org], project.preprocess)
            matrices[org] = sites[org].vectorise(results[org].tokens, terms)[0].subset("train").matrix
            results[org].tokens.discard()
    proposals = {org: sites[org].propose(results[org].term_counts, project.consensus) for org in tables}
    try:
        consensus_terms = len(exchange_vocabulary(proposals, project.consensus)[0].vocabulary)
    except Exception as error:  # the floors may leave nothing: that is a finding, not a crash
        consensus_terms = f"failed: {error}"
    del results, proposals
    empty = [org for org, m in matrices.items() if m.shape[0] == 0]
    matrices = {org: m for org, m in matrices.items() if m.shape[0] > 0}
    rows = [m.shape[0] for m in matrices.values()]
    prep_seconds = time.perf_counter() - started
    rss_before = psutil.Process().memory_info().rss / MB
    config = project.train.replace(scenarios=("federated",), max_steps=args["rounds"], max_epochs=None, threads=1)
    # the demo's texts, counted once: co-occurrences are counted within documents, so the sum over
    # any organisations' counts equals the count over all their texts at once
    evaluate = from_mapping(EvaluateConfig, params["evaluate"], "evaluate")
    scorer = PooledScorer(terms, {}, {"pooled": texts}, evaluate).npmi
    stop, budget = args["stop_at_target"], args["budget_s"]
    observer = Observer(scorer, args["every"], args["rounds"], args["targets"], stop, budget)
    logger.info(
        "N=%d: %d organisations with training documents (%d without), %s-%s training documents each, "
        "site steps %.1f s, RSS %.0f MB before training",
        n, len(matrices), len(empty), min(rows), max(rows), prep_seconds, rss_before,
    )  # fmt: skip
    load_before = load()
    endpoints = [MemoryEndpoint(org, m) for org, m in matrices.items()]
    with contextlib.suppress(Stop), compute_threads(config.threads), deterministic_algorithms():
        run_federation(
            InProcessEngine(endpoints),
            list(matrices),
            config,
            vocabulary=vocabulary,
            name=f"federated N={n}",
            progress=True,
            on_round_end=observer,
        )
    history = observer.server.history
    uplink = [sum(r.client_bytes.values()) for r in history]
    final = observer.points[-1] if observer.points else {}
    return {
        "n": n,
        "engine": "in-process",
        **facts,
        "organisations_with_training_documents": len(matrices),
        "organisations_without": len(empty),
        "training_documents": int(sum(rows)),
        "training_documents_per_organisation": {"min": min(rows), "median": statistics.median(rows), "max": max(rows)},
        "vocabulary_terms": len(terms),
        "consensus_terms": consensus_terms,
        "site_steps_seconds": round(prep_seconds, 2),
        "rounds": len(history),
        "stopped": observer.stopped or "rounds done",
        "median_round_s": statistics.median(observer.seconds),
        "mean_round_s": statistics.fmean(observer.seconds),
        "median_round_cpu_s": statistics.median(observer.cpu_seconds),
        "train_seconds": round(observer.train_seconds, 2),
        "rss_before_training_mb": round(rss_before, 1),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "ru_maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "uplink_bytes_per_round": statistics.median(uplink),
        "model_bytes": model_bytes(observer.server.strategy.model),
        "downlink_bytes_per_round_computed": model_bytes(observer.server.strategy.model) * len(matrices),
        "target_npmi": args["targets"],
        "reached": observer.reached,
        "final_round": final.get("round"),
        "final_npmi": final.get("npmi"),
        "points": observer.points,
        "loadavg_before": load_before,
        "loadavg_after": load(),
    }


def run_isolated(n: int, docs: pd.DataFrame, vocabulary: pd.DataFrame, texts: list, args: dict) -> dict:
    """:func:`in_process` in a fresh process, so its peak RSS is that N's alone."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(1, maxtasksperchild=1) as pool:  # leaving the block (SIGTERM too) terminates the child
        return pool.apply_async(in_process, (n, docs, vocabulary, texts, args)).get()


class RssSampler(threading.Thread):
    """Samples a federation's processes every ``period`` s: SuperLink, ServerApp, nodes (sum)."""

    def __init__(self, federation, period: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.federation, self.period = federation, period
        self.peak = {"superlink_mb": 0.0, "serverapp_mb": 0.0, "nodes_mb": 0.0, "system_used_gb": 0.0}
        self.done = threading.Event()

    @staticmethod
    def _tree_rss(pid: int) -> float:
        try:
            root = psutil.Process(pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0.0
        total = 0.0
        for process in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                total += process.memory_info().rss
        return total / MB

    def sample(self) -> None:
        processes = dict(self.federation.processes)
        now = {
            "superlink_mb": self._tree_rss(processes["superlink"].pid) if "superlink" in processes else 0.0,
            "nodes_mb": sum(
                self._tree_rss(p.pid) for name, p in processes.items() if name.startswith(("supernode-", "executor-"))
            ),
            "system_used_gb": (psutil.virtual_memory().total - psutil.virtual_memory().available) / 1024**3,
        }
        with contextlib.suppress(psutil.NoSuchProcess):
            now["serverapp_mb"] = sum(p.memory_info().rss for p in self.federation.serverapps()) / MB
        for key, value in now.items():
            self.peak[key] = max(self.peak[key], value)

    def run(self) -> None:
        while not self.done.wait(self.period):
            with contextlib.suppress(Exception):  # a process ending mid-sample
                self.sample()


def superlink_own_rss(federation) -> float:
    """The SuperLink process alone (its children are the SuperExec and the ServerApps)."""
    with contextlib.suppress(psutil.NoSuchProcess, KeyError):
        return psutil.Process(federation.processes["superlink"].pid).memory_info().rss / MB
    return 0.0


def flower(n: int, docs: pd.DataFrame, params: dict, args: argparse.Namespace, work: Path) -> dict:
    """N organisations' shards in ``work``, one loopback federation, one run of ``--flower-rounds`` rounds."""
    from fedtopic_pipelines.flower.cli import demo_job, in_process_matrices, in_process_training
    from fedtopic_pipelines.flower.deployment import LocalFederation
    from fedtopic_pipelines.flower.federation import load_result

    memory = psutil.virtual_memory()
    used_gb = (memory.total - memory.available) / 1024**3
    needed_gb = n * args.node_mb / 1024 + 1.0
    if used_gb + needed_gb > args.max_used_gb:
        reason = f"skipped: {used_gb:.1f} GB used + about {needed_gb:.1f} GB needed > {args.max_used_gb:g} GB"
        logger.warning("Flower N=%d %s", n, reason)
        return {"n": n, "engine": "Flower", "stopped": reason}
    tables, facts = split_documents(docs, n, args.alpha, args.seed)
    data = {}
    for org, table in tables.items():
        data[org] = work / f"raw-{n}" / org
        data[org].mkdir(parents=True)
        table.to_parquet(data[org] / "part-00000.parquet")
    job = demo_job({**params, "organisations": list(tables)}, args.flower_rounds, "exact")  # FedSGD
    job_file = work / f"job-{n}.json"
    job_file.write_text(json.dumps(job.to_dict()))
    federation = LocalFederation(work / f"flower-{n}", data)
    out = work / f"flower-{n}" / "out"
    load_before = load()
    started = time.perf_counter()
    with federation:
        start_seconds = time.perf_counter() - started
        idle_superlink = superlink_own_rss(federation)
        sampler = RssSampler(federation)
        sampler.start()
        try:
            submitted = time.perf_counter()
            federation.submit({"job-file": str(job_file), "output-dir": str(out)}, timeout=args.flower_timeout_s)
            run_seconds = time.perf_counter() - submitted
        finally:
            sampler.done.set()
            sampler.join()
        superlink_after = superlink_own_rss(federation)
    _, model, run = load_result(out)
    latencies = run["latencies_s"]
    uplink = [sum(r.client_bytes.values()) for r in model.history]
    vocabulary, matrices = in_process_matrices(job, data)  # the same job in process, for the ratio
    _, in_process_round_s = in_process_training(job, vocabulary, matrices, threads=federation.node_threads())
    state_bytes = sum(t.numel() * t.element_size() for t in model.state.values())
    return {
        "n": n,
        "engine": "Flower",
        **facts,
        "vocabulary_terms": len(vocabulary),
        "rounds": len(latencies),
        "stopped": "rounds done",
        "threads_per_node": federation.node_threads(),
        "federation_start_s": round(start_seconds, 1),
        "run_wall_s": round(run_seconds, 1),
        "median_round_s": statistics.median(latencies),
        "min_round_s": min(latencies),
        "max_round_s": max(latencies),
        "in_process_round_s_same_job": in_process_round_s,
        "superlink_rss_mb_idle": round(idle_superlink, 1),
        "superlink_rss_mb_after": round(superlink_after, 1),
        "peak_superlink_tree_mb": round(sampler.peak["superlink_mb"], 1),
        "peak_serverapp_mb": round(sampler.peak["serverapp_mb"], 1),
        "peak_nodes_total_mb": round(sampler.peak["nodes_mb"], 1),
        "peak_system_used_gb": round(sampler.peak["system_used_gb"], 2),
        "uplink_bytes_per_round": statistics.median(uplink),
        "model_bytes": state_bytes,
        "downlink_bytes_per_round_computed": state_bytes * n,
        "loadavg_before": load_before,
        "loadavg_after": load(),
    }


def fmt_bytes(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value / MB:.1f} MB" if value >= MB else f"{value / 1024:.0f} KB"


def table(results: list[dict], targets: list[float]) -> str:
    columns = ["N", "engine", "rounds", "median s/round", "CPU s/round", "peak RSS", "uplink/round (measured)"]
    columns += ["downlink/round (computed)", *(f"NPMI {t:g} at (round, train s)" for t in targets)]
    columns += ["final pooled NPMI", "loadavg"]
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for r in results:
        if "median_round_s" not in r:
            lines.append(f"| {r['n']} | {r['engine']} | {r['stopped']} |" + " |" * (len(columns) - 3))
            continue
        if r["engine"] == "Flower":
            rss = (
                f"SuperLink {r['superlink_rss_mb_after']:.0f} MB, ServerApp {r['peak_serverapp_mb']:.0f} MB, "
                f"nodes {r['peak_nodes_total_mb'] / 1024:.1f} GB"
            )
            reached, final = ["(not scored)"] * len(targets), ""
        else:
            rss = f"{r['peak_rss_mb']:.0f} MB"
            hits = [r["reached"].get(f"{t:g}") for t in targets]
            reached = [f"{h['round']}, {h['train_seconds']:.0f} s" if h else f"not in {r['rounds']}" for h in hits]
            final = f"{r['final_npmi']:.4f} (round {r['final_round']})" if r["final_npmi"] is not None else ""
        cells = [
            str(r["n"]), r["engine"], str(r["rounds"]), f"{r['median_round_s']:.3f}",
            f"{r['median_round_cpu_s']:.3f}" if "median_round_cpu_s" in r else "", rss,
            fmt_bytes(r["uplink_bytes_per_round"]), fmt_bytes(r["downlink_bytes_per_round_computed"]), *reached,
            final, " ".join(f"{x:.2f}" for x in r["loadavg_after"]),
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for engine, marker in (("in-process", "o"), ("Flower", "s")):
        rows = sorted((r for r in results if r["engine"] == engine and "median_round_s" in r), key=lambda r: r["n"])
        if not rows:
            continue
        ns = [r["n"] for r in rows]
        ax1.plot(ns, [r["median_round_s"] for r in rows], marker=marker, label=engine)
        if engine == "in-process":
            ax2.plot(ns, [r["peak_rss_mb"] for r in rows], marker=marker, label="in-process (whole process)")
        else:
            ax2.plot(ns, [r["peak_nodes_total_mb"] for r in rows], marker=marker, label="Flower: all nodes")
            ax2.plot(ns, [r["superlink_rss_mb_after"] for r in rows], marker=marker, ls="--", label="Flower: SuperLink")
            ax2.plot(ns, [r["peak_serverapp_mb"] for r in rows], marker=marker, ls=":", label="Flower: ServerApp")
    for ax, label in ((ax1, "median seconds per round"), (ax2, "peak RSS (MB)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("organisations N")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("FedSGD ProdLDA on the re-split demo: scale with the number of organisations")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(results: list[dict], setup: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "scale.json").write_text(json.dumps({"setup": setup, "results": results}, indent=1, default=str))
    with (out / "scale_curve.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["n", "round", "train_seconds", "npmi", "loss", "rss_mb", "loadavg_1m"])
        for r in results:
            for p in r.get("points", []):
                writer.writerow(
                    [r["n"], p["round"], p["train_seconds"], p["npmi"], p["loss"], p["rss_mb"], p["loadavg"][0]]
                )
    scalar = sorted({k for r in results for k, v in r.items() if not isinstance(v, list | dict)})
    with (out / "scale.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=scalar, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(results)
    plot(results, out / "scale.png")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--orgs", type=int, nargs="*", default=None, help="in-process N (default 10 50 100)")
    parser.add_argument("--rounds", type=int, default=3000, help="at most this many FedSGD rounds per N")
    parser.add_argument("--every", type=int, default=100, help="score the pooled NPMI every this many rounds")
    parser.add_argument("--targets", type=float, nargs="+", default=[0.05, 0.08], help="pooled NPMI levels to reach")
    parser.add_argument("--stop-at-target", action="store_true", help="stop an N's training at the highest target")
    parser.add_argument("--budget-s", type=float, default=600, help="at most this many training seconds per N")
    parser.add_argument("--alpha", type=float, default=1.0, help="Dirichlet label-skew concentration")
    parser.add_argument("--seed", type=int, default=42, help="the split's seed")
    parser.add_argument("--flower-orgs", type=int, nargs="*", default=None, help="Flower N (default 10 20; none: skip)")
    parser.add_argument("--flower-rounds", type=int, default=20)
    parser.add_argument("--flower-timeout-s", type=float, default=1800)
    parser.add_argument("--no-flower", action="store_true")
    parser.add_argument("--node-mb", type=float, default=450, help="memory estimate per Flower organisation")
    parser.add_argument("--max-used-gb", type=float, default=18, help="skip a Flower N that would use more")
    parser.add_argument("--env", default=None, help="Kedro environment of the parameters (default base)")
    parser.add_argument("--out", type=Path, default=ROOT / "data/08_reporting/bench_scale")
    parser.add_argument("--smoke", action="store_true", help="N 3 and 2 (Flower), a few rounds, smoke data")
    args = parser.parse_args()
    if args.smoke:  # N given explicitly (an empty list included) is kept
        args.env, args.rounds, args.every, args.targets = "smoke", 6, 3, [-1.0]
        args.flower_rounds, args.budget_s = 2, 60
    args.orgs = ([3] if args.smoke else [10, 50, 100]) if args.orgs is None else args.orgs
    args.flower_orgs = ([2] if args.smoke else [10, 20]) if args.flower_orgs is None else args.flower_orgs
    if args.no_flower:
        args.flower_orgs = []
    return args


def main() -> None:
    from bench_learning_curve import demo_data

    from fedtopic_pipelines.flower.deployment import exit_on_sigterm

    args = parse_args()
    exit_on_sigterm()  # a killed benchmark stops its federations
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.set_num_threads(1)
    params, project = project_config(args.env)
    logger.setLevel(logging.INFO)
    # the five demo organisations through the site steps: their consensus vocabulary (fixed for every
    # in-process N) and every document's preprocessed tokens (the texts pooled NPMI is counted on)
    from common import demo_tables

    with contextlib.redirect_stderr(io.StringIO()):
        docs = pd.concat(demo_tables(params).values(), ignore_index=True)
        vocabulary, _, _, texts = demo_data(params, project)
    texts = [t for org_texts in texts.values() for t in org_texts]
    logger.info("pooled demo: %d documents (%d texts scored), %d terms", len(docs), len(texts), len(vocabulary))
    setup = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "documents": len(docs),
        "labels": int(docs["label"].nunique()),
        "vocabulary_terms": len(vocabulary),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "memory_total_gb": round(psutil.virtual_memory().total / 1024**3, 1),
        "loadavg_start": load(),
    }
    job_args = {k: getattr(args, k) for k in ("env", "alpha", "seed", "rounds", "every", "targets", "budget_s")}
    job_args["stop_at_target"] = args.stop_at_target
    results: list[dict] = []
    for n in args.orgs:
        logger.info("in process, N=%d (load %s)", n, load())
        try:
            results.append(run_isolated(n, docs, vocabulary, texts, job_args))
        except Exception as error:  # an N that does not fit is reported, not fatal
            logger.exception("in process N=%d failed", n)
            results.append({"n": n, "engine": "in-process", "stopped": f"failed: {type(error).__name__}: {error}"})
        write(results, setup, args.out)
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as tmp:
        for n in args.flower_orgs:
            logger.info("Flower, N=%d (load %s)", n, load())
            try:
                results.append(flower(n, docs, params, args, Path(tmp)))
            except Exception as error:
                logger.exception("Flower N=%d failed", n)
                results.append({"n": n, "engine": "Flower", "stopped": f"failed: {type(error).__name__}: {error}"})
            write(results, setup, args.out)
    setup["loadavg_end"] = load()
    write(results, setup, args.out)
    logger.info("wrote %s", args.out)
    print(f"\n{os.cpu_count()} cores, torch {torch.__version__}, {len(docs)} pooled demo documents")
    targets = " and ".join(f"{t:g}" for t in args.targets)
    print(f"Dirichlet label skew alpha {args.alpha:g} seed {args.seed}; target pooled NPMI {targets}\n")
    print(table(results, args.targets))


if __name__ == "__main__":
    main()
