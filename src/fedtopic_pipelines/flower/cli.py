"""``make federation-up`` / ``federation-down`` / ``federation-demo``: a local Flower federation.

    python -m fedtopic_pipelines.flower.cli up      # SuperLink + one SuperNode (and executor) per organisation
    python -m fedtopic_pipelines.flower.cli down    # stop them
    python -m fedtopic_pipelines.flower.cli demo    # up, a short federated training, down, report

The organisations are those of the project's current corpus (``organisations`` in
``conf/base/parameters.yml``), and each SuperNode's data is that organisation's raw
shards in ``data/01_raw/organisations/<org>/`` (``kedro run --pipeline=ingest_demo``
writes them; ``demo`` runs it when they are missing). The federation's certificates, keys,
logs and caches live in ``.federation/`` (git-ignored). Among the keys, made once like the
certificates and kept across ``down`` and ``up``: the organisations' shared vocabulary key
(``.federation/keys/vocabulary.key``, mode 0600), which every SuperNode and its executor get as
``FEDTOPIC_VOCAB_KEY`` and the SuperLink and its ServerApps never do.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from fedtopic_pipelines.core.federated.participation import participation, participation_table
from fedtopic_pipelines.core.model_store import TrainedModel
from fedtopic_pipelines.flower.deployment import LocalFederation, exit_on_sigterm
from fedtopic_pipelines.flower.federation import Job, load_result

logger = logging.getLogger("fedtopic_pipelines.flower.cli")

PROJECT = Path(__file__).resolve().parents[3]
ROOT = PROJECT / ".federation"
REPORT = PROJECT / "data" / "08_reporting" / "federation_demo.json"
DEMO_ROUNDS = 10


def project_parameters(env: str | None = None) -> dict[str, Any]:
    """The Kedro parameters (``env`` over base), read as ``kedro run --env`` reads them (soft merge)."""
    from kedro.framework.startup import bootstrap_project

    from fedtopic_pipelines import pipeline_registry

    bootstrap_project(PROJECT)
    return dict(pipeline_registry.project_parameters(PROJECT, env))


def organisation_data(organisations: list[str]) -> dict[str, Path]:
    return {org: PROJECT / "data" / "01_raw" / "organisations" / org for org in organisations}


def ensure_demo_data(organisations: list[str]) -> dict[str, Path]:
    data = organisation_data(organisations)
    if not all(p.is_dir() and any(p.glob("*.parquet")) for p in data.values()):
        logger.info("organisations' raw shards missing: kedro run --pipeline=ingest_demo")
        kedro = Path(sys.executable).with_name("kedro")
        subprocess.run([str(kedro), "run", "--pipeline=ingest_demo"], cwd=PROJECT, check=True)
    return data


def up(args: argparse.Namespace) -> LocalFederation:
    params = project_parameters(args.env)
    if (ROOT / "federation.json").exists():
        raise SystemExit(f"a federation is already up ({ROOT / 'federation.json'}); run 'make federation-down' first")
    data = ensure_demo_data(list(params["organisations"]))
    federation = LocalFederation(ROOT, data, tls=not args.insecure, auth=not args.insecure)
    federation.start()
    logger.info(
        "SuperLink %s; the SuperNodes' vocabulary key in %s (not the SuperLink's); logs in %s; "
        "stop with 'make federation-down'",
        federation.address,
        federation.vocabulary_key_file,
        ROOT / "logs",
    )
    return federation


def down(_: argparse.Namespace) -> None:
    """Stop the processes recorded by ``up`` (each in its own session: their children go too)."""
    state_file = ROOT / "federation.json"
    if not state_file.exists():
        logger.info("no federation is up")
        return
    state = json.loads(state_file.read_text())
    for name, pid in state["pids"].items():
        try:
            os.killpg(pid, signal.SIGTERM)
            logger.info("stopped %s (pid %d)", name, pid)
        except ProcessLookupError:
            pass
    time.sleep(2)
    for pid in state["pids"].values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    state_file.unlink()


def demo_job(params: dict[str, Any], rounds: int) -> Job:
    """The project's parameters as a Flower job: the federated scenario for ``rounds`` rounds."""
    from fedtopic_pipelines.parameters import validate_parameters

    project = validate_parameters(params)  # checks every block as `kedro run` does
    train = project.train.replace(scenarios=("federated",), max_steps=rounds, max_epochs=None)
    organisations = list(params["organisations"])
    return Job(organisations, project.preprocess.to_params(), project.consensus.to_params(), train.to_params())


def in_process_matrices(job: Job, data: dict[str, Path]) -> tuple[Any, dict[str, Any]]:
    """The common vocabulary and each organisation's training matrix, built from the same raw
    shards by the same site steps the pipelines and the nodes run."""
    from fedtopic_pipelines.core.site import read_raw, run_sites

    preprocess, consensus, _ = job.configs()
    vocabulary, bows = run_sites({org: read_raw(data[org]) for org in job.organisations}, preprocess, consensus)
    return vocabulary, {org: bow.subset("train").matrix for org, bow in bows.items()}


def in_process_training(
    job: Job, vocabulary: Any, matrices: dict[str, Any], threads: int | None = None
) -> tuple[dict[str, torch.Tensor], float]:
    """The job's federated scenario on the in-process engine: its parameters and the seconds per round.

    ``threads``: torch's compute threads for the run (default: as configured). Equal
    parameters need equal arithmetic: with another thread count the sums inside a matrix
    product are ordered differently, and Adam's normalised steps turn those last-bit
    differences into differences of the order of the learning rate.
    """
    from fedtopic_pipelines.core.training import train_scenarios

    _, _, config = job.configs()
    config = config.replace(threads=threads or config.threads or torch.get_num_threads())
    started = time.perf_counter()
    model = train_scenarios(matrices, config, progress=False, vocabulary=vocabulary)["federated"]
    seconds = (time.perf_counter() - started) / max(1, len(model.history))
    return model.state, seconds


def supernodes(federation: LocalFederation) -> dict[str, list[str]]:
    """The organisations whose SuperNode this federation started, and those whose SuperNode still runs:
    a node that died shows here even when the run's rounds went on without it."""
    started = [org for org in federation.organisations if f"supernode-{org}" in federation.processes]
    running = [org for org in started if federation.processes[f"supernode-{org}"].poll() is None]
    return {"started": started, "running": running}


def run_report(
    run: dict[str, Any], model: TrainedModel, organisations: list[str], nodes: dict[str, list[str]]
) -> dict[str, Any]:
    """Who was there: the SuperNodes started (``nodes``, from :func:`supernodes`), those that joined
    the run, and per round which organisations took part and which were left out, and why."""
    return {
        "nodes": len(run["nodes"]),  # joined the run (every organisation's node, or it does not start)
        "nodes_started": len(nodes["started"]),
        "supernodes": nodes,
        "organisations": organisations,
        "rounds": len(model.history),
        "participation": participation(model.history, organisations),
        "participation_by_round": participation_table(model.history, organisations),
    }


def demo(args: argparse.Namespace) -> None:
    params = project_parameters(args.env)
    job = demo_job(params, args.rounds)
    work = ROOT / "demo-run"
    work.mkdir(parents=True, exist_ok=True)
    (work / "job.json").write_text(json.dumps(job.to_dict(), indent=2))
    federation = up(args)
    try:
        started = time.perf_counter()
        run_id = federation.submit({"job-file": str(work / "job.json"), "output-dir": str(work / "out")}, timeout=3600)
        wall = time.perf_counter() - started
        nodes = supernodes(federation)
    finally:
        federation.stop()
    _, model, run = load_result(work / "out")
    vocabulary, matrices = in_process_matrices(job, organisation_data(job.organisations))
    # the nodes' arithmetic, then the in-process engine as `kedro run` runs it
    expected, _ = in_process_training(job, vocabulary, matrices, threads=federation.node_threads())
    _, in_process_round_s = in_process_training(job, vocabulary, matrices)
    difference = max(float((model.state[k] - expected[k]).abs().max()) for k in expected)
    latencies = run["latencies_s"]
    report = {
        "run_id": run_id,
        **run_report(run, model, job.organisations, nodes),
        "round_latency_median_s": statistics.median(latencies),
        "round_latency_s": latencies,
        "in_process_round_s": in_process_round_s,
        "run_wall_s": wall,
        "threads_per_node": federation.node_threads(),
        "tls": federation.tls,
        "node_auth": federation.auth,
        "max_abs_parameter_difference_vs_in_process": difference,
    }
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(report, indent=2))
    totals = report["participation"]["totals"]
    logger.info(
        "federation demo: %d nodes started, %d rounds, %d organisation-rounds taken part, %d left out, "
        "median round %.2f s (in process %.3f s), TLS %s, auth %s, max |difference| %.2e -> %s",
        report["nodes_started"],
        report["rounds"],
        totals["took_part"],
        sum(totals.values()) - totals["took_part"],
        report["round_latency_median_s"],
        in_process_round_s,
        report["tls"],
        report["node_auth"],
        difference,
        REPORT,
    )


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    parser = argparse.ArgumentParser(prog="python -m fedtopic_pipelines.flower.cli", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["up", "down", "demo"])
    parser.add_argument("--env", default=None, help="Kedro environment whose parameters to use (default: base)")
    parser.add_argument("--rounds", type=int, default=DEMO_ROUNDS, help="demo: FedSGD rounds")
    parser.add_argument("--insecure", action="store_true", help="no TLS and no node authentication (debugging only)")
    args = parser.parse_args(argv)
    exit_on_sigterm()  # `demo` stops its federation when interrupted
    {"up": up, "down": down, "demo": demo}[args.command](args)


if __name__ == "__main__":
    main()
