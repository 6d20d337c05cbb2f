"""Benchmark: what Flower's SecAgg+ costs per round on a loopback federation, secure against plain.

For 3 and 5 organisations (the smoke environment's small demo organisations and its small
ProdLDA, written to a temporary folder), one loopback federation each (``LocalFederation``:
TLS, node authentication, warm executors) runs the same job twice: plain FedSGD rounds, then
with ``privacy.secure_aggregation`` (Flower's ``SecAggPlusWorkflow`` / ``secaggplus_mod``,
``privacy.secagg`` defaults). Per round: messages the ServerApp sent and replies it received,
and seconds from the first push to the aggregate (``run.json``). The first run of each
federation also preprocesses the organisations' documents; only rounds are timed. Also the max
abs parameter difference of the secure model from the plain one. Prints a Markdown table.

    .venv/bin/python bench/bench_secagg.py [--rounds 5] [--organisations 3 5]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--organisations", type=int, nargs="+", default=[3, 5])
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
            results = run_federation(params, everyone[:count], args.rounds, Path(tmp))
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
    print(f"smoke demo ProdLDA, {args.rounds} rounds per run, loopback with TLS and node authentication\n")
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
