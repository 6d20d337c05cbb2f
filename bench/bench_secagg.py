"""Benchmark: what Flower's SecAgg+ costs per round on a loopback federation, secure against plain.

For 3 and 5 organisations (the smoke environment's small demo organisations and its small
ProdLDA, written to a temporary folder), one loopback federation each (``LocalFederation``:
TLS, node authentication, warm executors) runs the same job twice: plain FedSGD rounds, then
with ``privacy.secure_aggregation`` (Flower's ``SecAggPlusWorkflow`` / ``secaggplus_mod``,
``privacy.secagg`` defaults). Per round: messages the ServerApp sent and replies it received,
and seconds from the first push to the aggregate (``run.json``). The first run of each
federation also preprocesses the organisations' documents; only rounds are timed. Also the max
abs parameter difference of the secure model from the plain one. Prints a Markdown table.

``--grid`` runs the same jobs without processes: Flower's real ServerApp logic, ClientApp,
``secaggplus_mod`` and ``SecAggPlusWorkflow`` exchange real messages (each one copied, as a
transport would) on an in-process grid. Its rounds cost what the protocol computes (keys,
shares, masking, unmasking) without the SuperLink's round trips: set beside the loopback
figures, it says where a secure round's time goes.

    .venv/bin/python bench/bench_secagg.py [--rounds 5] [--organisations 3 5] [--grid]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_flower import smoke_data  # the same small demo organisations (bench/ is on the path when run)

from fedtopic_pipelines.flower.cli import demo_job, project_parameters
from fedtopic_pipelines.flower.deployment import LocalFederation, exit_on_sigterm
from fedtopic_pipelines.flower.federation import load_result

logger = logging.getLogger("bench")


def run_federation(params: dict, organisations: list[str], rounds: int, work: Path) -> dict[str, dict]:
    data = smoke_data({**params, "organisations": organisations}, work / "data")
    plain = demo_job({**params, "organisations": organisations}, rounds)
    train = dict(plain.train)
    train["engine"] = "flower"
    secure = type(plain)(
        plain.organisations,
        plain.preprocess,
        plain.vocab_consensus,
        {**train, "privacy": {**dict(train.get("privacy") or {}), "secure_aggregation": True}},
    )
    results = {}
    with LocalFederation(work / "fed", data) as federation:
        for name, job in (("plain", plain), ("secure", secure)):
            job_file = work / f"{name}.json"
            job_file.write_text(json.dumps(job.to_dict()))
            out = work / f"out-{name}"
            started = time.perf_counter()
            federation.submit({"job-file": str(job_file), "output-dir": str(out)}, timeout=3600)
            run = json.loads((out / "run.json").read_text())
            results[name] = {
                "wall": time.perf_counter() - started,
                "latencies": run["latencies_s"],
                "messages": run["messages"],
                "state": load_result(out)[1].state,
            }
            logger.info("%d organisations, %s: %s", len(organisations), name, run["latencies_s"])
    return results


def run_grid(params: dict, organisations: list[str], rounds: int, work: Path) -> dict[str, dict]:
    """The same two jobs on an in-process grid (no SuperLink, no SuperNode): seconds per round."""
    import copy

    from fedtopic_pipelines.flower.client_app import app as client_app
    from fedtopic_pipelines.flower.federation import run_flower_federation

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project root: its test grid
    from tests.flower.local_grid import LocalGrid

    class CopyingGrid(LocalGrid):  # each message copied, as a transport would (secaggplus_mod pops from it)
        def push_messages(self, messages):
            return super().push_messages([copy.deepcopy(m) for m in messages])

    paths = smoke_data({**params, "organisations": organisations}, work / "data")
    plain = demo_job({**params, "organisations": organisations}, rounds)
    results = {}
    for name, secure in (("plain", False), ("secure", True)):
        train = {**dict(plain.train), "engine": "flower"}
        if secure:
            train["privacy"] = {**dict(train.get("privacy") or {}), "secure_aggregation": True}
        job = type(plain)(plain.organisations, plain.preprocess, plain.vocab_consensus, train)
        nodes = {
            100 + i: {"organisation": org, "data-path": str(path), "cache-dir": str(work / name / "cache" / org)}
            for i, (org, path) in enumerate(paths.items())
        }
        result, engine = run_flower_federation(CopyingGrid(client_app, nodes), job)
        results[name] = {
            "latencies": list(engine.latencies),
            "messages": [{"sent": m.get("sent", 0), "received": m.get("received", 0)} for m in engine.messages],
            "state": result.model.state,
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--organisations", type=int, nargs="+", default=[3, 5])
    parser.add_argument("--grid", action="store_true", help="in-process grid: the protocol without the transport")
    args = parser.parse_args()
    exit_on_sigterm()  # a killed benchmark stops its federations
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logger.setLevel(logging.INFO)
    params = project_parameters("smoke")
    everyone = list(params["organisations"])
    rows = []
    for count in args.organisations:
        if count > len(everyone):
            raise SystemExit(f"the smoke environment has {len(everyone)} organisations, not {count}")
        with tempfile.TemporaryDirectory(prefix="bench_secagg_") as tmp:
            runner = run_grid if args.grid else run_federation
            results = runner(params, everyone[:count], args.rounds, Path(tmp))
        plain = results["plain"]["state"]
        difference = max(float((results["secure"]["state"][k] - plain[k]).abs().max()) for k in plain)
        for name, result in results.items():
            lat, messages = result["latencies"], result["messages"]
            rows.append(
                (
                    count,
                    name,
                    statistics.median(m["sent"] for m in messages),
                    statistics.median(m["received"] for m in messages),
                    statistics.median(lat),
                    min(lat),
                    max(lat),
                    difference if name == "secure" else 0.0,
                )
            )
    print(f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}")
    where = "an in-process grid (no processes)" if args.grid else "loopback with TLS and node authentication"
    print(f"smoke demo ProdLDA, {args.rounds} rounds per run, {where}\n")
    columns = ["organisations", "aggregation", "messages sent / round", "replies / round", "median s/round", "min"]
    columns += ["max", "max abs difference from plain"]
    print("| " + " | ".join(columns) + " |")
    print("|" + " --- |" * len(columns))
    for count, name, sent, received, median, low, high, difference in rows:
        print(
            f"| {count} | {name} | {sent:g} | {received:g} | {median:.2f} | {low:.2f} | {high:.2f} | {difference:.1e} |"
        )


if __name__ == "__main__":
    main()
