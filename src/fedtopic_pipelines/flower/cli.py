"""``make federation-up`` / ``federation-down`` / ``federation-demo``: a local Flower federation.

    python -m fedtopic_pipelines.flower.cli up      # SuperLink + one SuperNode (and executor) per organisation
    python -m fedtopic_pipelines.flower.cli down    # stop them
    python -m fedtopic_pipelines.flower.cli demo    # up, the federated model by train.flower.schedule, down,
                                                    # scored beside the in-process FedSGD model

The organisations are those of the project's current corpus (``organisations`` in
``conf/base/parameters.yml``), and each SuperNode's data is that organisation's raw
shards in ``data/01_raw/organisations/<org>/`` (``kedro run --pipelines=ingest_demo``
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
from dataclasses import dataclass
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
        logger.info("organisations' raw shards missing: kedro run --pipelines=ingest_demo")
        kedro = Path(sys.executable).with_name("kedro")
        subprocess.run([str(kedro), "run", "--pipelines=ingest_demo"], cwd=PROJECT, check=True)
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


def demo_job(params: dict[str, Any], rounds: int | None = None, schedule: str | None = None) -> Job:
    """The project's parameters as a Flower job: the federated scenario as the Flower engine
    trains it (``train.flower.schedule``, or ``schedule``), for ``rounds`` rounds (None: the
    schedule's; under ``exact``, ``train.max_steps``)."""
    from fedtopic_pipelines.parameters import validate_parameters

    project = validate_parameters(params)  # checks every block as `kedro run` does
    train = project.train.replace(scenarios=("federated",))
    if schedule is not None:
        train = train.replace(flower=train.flower.replace(schedule=schedule))
    train = train.flower_training()
    if rounds is not None:
        train = train.replace(max_steps=rounds, max_epochs=None)
    organisations = list(params["organisations"])
    return Job(organisations, project.preprocess.to_params(), project.consensus.to_params(), train.to_params())


def exact_job(params: dict[str, Any]) -> Job:
    """The federated scenario as ``kedro run`` trains it in process (the base FedSGD): the reference
    the demo's Flower model is scored beside."""
    return demo_job(params, schedule="exact")


@dataclass
class DemoData:
    """What the demo's in-process references read: the common vocabulary, each organisation's
    training matrix, held-out split (with labels) and preprocessed texts (both splits)."""

    vocabulary: Any
    matrices: dict[str, Any]
    tests: dict[str, Any]
    texts: dict[str, list[list[str]]]


def demo_data(job: Job, data: dict[str, Path]) -> DemoData:
    """Built from the same raw shards by the same site steps the pipelines and the nodes run."""
    from fedtopic_pipelines.core.site import read_raw, run_sites

    preprocess, consensus, _ = job.configs()
    raw = {org: read_raw(data[org]) for org in job.organisations}
    vocabulary, bows, texts = run_sites(raw, preprocess, consensus, texts="all")
    matrices = {org: bow.subset("train").matrix for org, bow in bows.items()}
    return DemoData(vocabulary, matrices, {org: bow.subset("test") for org, bow in bows.items()}, texts)


def in_process_matrices(job: Job, data: dict[str, Path]) -> tuple[Any, dict[str, Any]]:
    """The common vocabulary and each organisation's training matrix (:func:`demo_data`)."""
    built = demo_data(job, data)
    return built.vocabulary, built.matrices


def in_process_model(
    job: Job, vocabulary: Any, matrices: dict[str, Any], threads: int | None = None
) -> tuple[Any, float]:
    """The job's federated scenario on the in-process engine: the trained model and its wall seconds.

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
    return model, time.perf_counter() - started


def in_process_training(
    job: Job, vocabulary: Any, matrices: dict[str, Any], threads: int | None = None
) -> tuple[dict[str, torch.Tensor], float]:
    """The job's federated scenario in process (:func:`in_process_model`): its parameters and the seconds per round."""
    model, seconds = in_process_model(job, vocabulary, matrices, threads)
    return model.state, seconds / max(1, len(model.history))


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


def quality(models: dict[str, TrainedModel], data: DemoData, params: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each model's pooled NPMI, topic diversity, redundancy and mean per-organisation macro-F1,
    as the evaluate pipeline computes them (summed over the organisations)."""
    from fedtopic_pipelines.core.config import EvaluateConfig, from_mapping
    from fedtopic_pipelines.core.metrics.scoring import PooledScorer

    config = from_mapping(EvaluateConfig, params.get("evaluate"), "evaluate")
    scorer = PooledScorer(data.vocabulary["term"].tolist(), data.tests, data.texts, config)
    hidden = ("topics", "duplicate_pairs_detail")
    return {
        name: {k: v for k, v in scorer(model.to_model()).items() if k not in hidden} for name, model in models.items()
    }


def demo(args: argparse.Namespace) -> None:
    params = project_parameters(args.env)
    job = demo_job(params, args.rounds, args.schedule)
    _, _, flower_config = job.configs()
    work = ROOT / "demo-run"
    work.mkdir(parents=True, exist_ok=True)
    (work / "job.json").write_text(json.dumps(job.to_dict(), indent=2))
    logger.info(
        "federation demo: %d rounds of %s (%s) on Flower; a round costs seconds on the stock SuperNode",
        flower_config.max_steps,
        flower_config.rule,
        f"{flower_config.aggregation.local_steps} local steps" if flower_config.aggregation.local_steps else "exact",
    )
    federation = up(args)
    try:
        started = time.perf_counter()
        run_id = federation.submit({"job-file": str(work / "job.json"), "output-dir": str(work / "out")}, timeout=86400)
        wall = time.perf_counter() - started
        nodes = supernodes(federation)
    finally:
        federation.stop()
    _, model, run = load_result(work / "out")
    data = demo_data(job, organisation_data(job.organisations))
    # the nodes' arithmetic, then the in-process engine as `kedro run` runs it (one run when they agree)
    logger.info("federation demo: the same job in process, to check the Flower model against")
    same, same_wall = in_process_model(job, data.vocabulary, data.matrices, threads=federation.node_threads())
    if federation.node_threads() != (flower_config.threads or torch.get_num_threads()):
        _, same_wall = in_process_model(job, data.vocabulary, data.matrices)
    difference = max(float((model.state[k] - same.state[k]).abs().max()) for k in same.state)
    logger.info("federation demo: the exact in-process model (kedro run's federated scenario), to score beside it")
    exact, exact_wall = in_process_model(exact_job(params), data.vocabulary, data.matrices)
    scores = quality({"flower": model, "in_process_exact": exact}, data, params)
    latencies = run["latencies_s"]
    report = {
        "run_id": run_id,
        **run_report(run, model, job.organisations, nodes),
        "round_latency_median_s": statistics.median(latencies),
        "round_latency_s": latencies,
        "in_process_round_s": same_wall / max(1, len(same.history)),
        "run_wall_s": wall,
        "threads_per_node": federation.node_threads(),
        "tls": federation.tls,
        "node_auth": federation.auth,
        "max_abs_parameter_difference_vs_in_process": difference,
        "quality": {
            "flower": {
                "schedule": schedule_facts(flower_config),
                "wall_s": wall,
                "in_process_wall_s": same_wall,
                **scores["flower"],
            },
            "in_process_exact": {
                "schedule": schedule_facts(exact.config),
                "wall_s": exact_wall,
                **scores["in_process_exact"],
            },
        },
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
        report["in_process_round_s"],
        report["tls"],
        report["node_auth"],
        difference,
        REPORT,
    )
    for name, row in report["quality"].items():
        logger.info(
            "federation demo: %-16s %5d rounds of %-7s %6.0f s: pooled NPMI %.4f, topic diversity %.3f, "
            "%d duplicate pair(s), macro-F1 %.3f",
            name,
            row["schedule"]["rounds"],
            row["schedule"]["rule"],
            row["wall_s"],
            row["npmi"],
            row["topic_diversity"],
            row["duplicate_topic_pairs"],
            row["macro_f1"],
        )


def schedule_facts(config: Any) -> dict[str, Any]:
    """How a federated model was trained: rule, rounds, local steps, optimiser."""
    return {
        "rule": config.rule,
        "rounds": config.max_steps,
        "local_steps": config.aggregation.local_steps,
        "eta": config.aggregation.eta,
        "optimizer": config.optimizer.name,
        "lr": config.optimizer.lr,
    }


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    parser = argparse.ArgumentParser(prog="python -m fedtopic_pipelines.flower.cli", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["up", "down", "demo"])
    parser.add_argument("--env", default=None, help="Kedro environment whose parameters to use (default: base)")
    parser.add_argument(
        "--rounds", type=int, default=None, help="demo: rounds (default: train.flower's schedule, 300 in base)"
    )
    parser.add_argument(
        "--schedule",
        choices=["local_steps", "exact"],
        default=None,
        help="demo: how the Flower model trains (default: train.flower.schedule; exact: as in process, FedSGD)",
    )
    parser.add_argument("--insecure", action="store_true", help="no TLS and no node authentication (debugging only)")
    args = parser.parse_args(argv)
    exit_on_sigterm()  # `demo` stops its federation when interrupted
    {"up": up, "down": down, "demo": demo}[args.command](args)


if __name__ == "__main__":
    main()
