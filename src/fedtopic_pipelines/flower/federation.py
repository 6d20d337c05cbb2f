"""What the ServerApp does, on any ``Grid``: find the organisations' nodes, then run the core federation.

1. ``query.hello``: every node names its organisation (from its ``node_config``); the
   nodes are put in the job's organisation order, which fixes their seeds exactly as in
   process.
2. :func:`~fedtopic_pipelines.core.federation.run_federation`, the same entry
   point the Kedro train node uses, over a :class:`GridEngine`: the vocabulary stage (each
   node sends only its top-N proposal), the prepare stage, and the rounds with checkpoints.

The job (the parameter blocks and the organisations in order) comes from one JSON file;
the result is written where the submitter reads it (:func:`save_result`).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from flwr.app import Message, RecordDict
from flwr.serverapp import Grid

from fedtopic_pipelines.core.config import ConsensusConfig, FlowerConfig, PreprocessConfig, TrainConfig, from_mapping
from fedtopic_pipelines.core.federated.engine import FederationError
from fedtopic_pipelines.core.federation import FederationResult, run_federation
from fedtopic_pipelines.core.model_store import TrainedModel
from fedtopic_pipelines.flower.engine import GridEngine, exchange
from fedtopic_pipelines.flower.records import decode_config
from fedtopic_pipelines.flower.secagg import SecAggSettings

logger = logging.getLogger(__name__)

MODEL_FILE, VOCABULARY_FILE, RUN_FILE = "model.safetensors", "vocabulary.parquet", "run.json"

__all__ = ["FederationError", "Job", "load_result", "run_flower_federation", "save_result"]


@dataclass(frozen=True)
class Job:
    """One training run on Flower: the Kedro parameter blocks and the organisations, in order."""

    organisations: list[str]
    preprocess: dict[str, Any]
    vocab_consensus: dict[str, Any]
    train: dict[str, Any]

    @classmethod
    def from_file(cls, path: Path) -> Job:
        return cls.from_dict(json.loads(Path(path).read_text()))

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Job:
        unknown = sorted(set(raw) - {"organisations", "preprocess", "vocab_consensus", "train"})
        if unknown:
            raise FederationError(f"the job has unknown entries {unknown}")
        job = cls(list(raw["organisations"]), dict(raw["preprocess"]), dict(raw["vocab_consensus"]), dict(raw["train"]))
        job.configs()  # refuse a bad job before any node is asked anything
        return job

    def to_dict(self) -> dict[str, Any]:
        return {
            "organisations": self.organisations,
            "preprocess": self.preprocess,
            "vocab_consensus": self.vocab_consensus,
            "train": self.train,
        }

    def configs(self) -> tuple[PreprocessConfig, ConsensusConfig, TrainConfig]:
        """The job's parameter blocks, validated as ``kedro run`` validates them."""
        return (
            from_mapping(PreprocessConfig, self.preprocess, "preprocess"),
            from_mapping(ConsensusConfig, self.vocab_consensus, "vocab_consensus"),
            TrainConfig.from_params(self.train),
        )


def wait_for_nodes(grid: Grid, count: int, timeout_s: float, poll_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= count:
            return nodes
        if time.monotonic() >= deadline:
            raise FederationError(f"{len(nodes)} of {count} organisations' nodes connected within {timeout_s:g} s")
        time.sleep(max(poll_s, 0.1))


def _names(grid: Grid, nodes: list[int], cfg: FlowerConfig) -> dict[int, str]:
    messages = [Message(content=RecordDict(), dst_node_id=n, message_type="query.hello") for n in nodes]
    replies, missing = exchange(grid, messages, cfg.stage_timeout_s, cfg.poll_s)
    names = {}
    for node in nodes:
        reply = replies.get(node)
        if reply is None or reply.has_error():
            reason = missing.get(node) if reply is None else reply.error.reason
            raise FederationError(f"stage 'hello': node {node} failed: {reason}")
        answer = decode_config(reply.content.config_records.get("reply"))
        if not isinstance(answer.get("organisation"), str):
            raise FederationError(f"stage 'hello': node {node} did not name its organisation")
        names[node] = answer["organisation"]
    return names


def _order(named: dict[int, str], organisations: list[str]) -> dict[int, str]:
    """Node ids in the job's organisation order; every organisation exactly once."""
    by_name: dict[str, int] = {}
    for node, name in named.items():
        if name in by_name:
            raise FederationError(f"organisation '{name}' is served by two nodes ({by_name[name]} and {node})")
        by_name[name] = node
    unknown = sorted(set(by_name) - set(organisations))
    missing = [o for o in organisations if o not in by_name]
    if unknown or missing:
        raise FederationError(
            f"nodes serve organisations {sorted(by_name)}; the job expects {organisations} "
            f"(missing {missing}, unknown {unknown})"
        )
    return {by_name[o]: o for o in organisations}


def connect(
    grid: Grid, organisations: list[str], cfg: FlowerConfig, secagg: SecAggSettings | None = None
) -> GridEngine:
    """Wait for every organisation's node, learn which is which, and return the engine over them
    (with ``secagg``, one whose training rounds run Flower's SecAgg+)."""
    all_nodes = wait_for_nodes(grid, len(organisations), cfg.connect_timeout_s, cfg.poll_s)
    nodes = _order(_names(grid, all_nodes, cfg), organisations)
    return GridEngine(grid, nodes, cfg.round_timeout_s, cfg.poll_s, stage_timeout_s=cfg.stage_timeout_s, secagg=secagg)


def run_flower_federation(grid: Grid, job: Job) -> tuple[FederationResult, GridEngine]:
    """Consensus, preparation and training of ``job`` on the nodes of ``grid``."""
    preprocess, consensus, config = job.configs()
    config = config.flower_training()  # the job's schedule on Flower (a job built by the project says exact already)
    engine = connect(grid, job.organisations, config.flower, SecAggSettings.of(config.privacy))
    result = run_federation(engine, job.organisations, config, preprocess=preprocess, consensus=consensus)
    return result, engine


def save_result(result: FederationResult, engine: GridEngine, folder: Path) -> None:
    """Write the vocabulary, the model and the run facts where the submitter reads them."""
    folder.mkdir(parents=True, exist_ok=True)
    result.vocabulary.to_parquet(folder / VOCABULARY_FILE)
    result.model.save(folder / MODEL_FILE)
    facts = {
        "nodes": {org: node for node, org in engine.organisations.items()},
        "latencies_s": list(engine.latencies),
        "messages": list(engine.messages),
        "secure_aggregation": engine.secagg is not None,
        "stages": {"prepare": result.prepared},
    }
    (folder / RUN_FILE).write_text(json.dumps(facts, indent=2))


def load_result(folder: Path) -> tuple[pd.DataFrame, TrainedModel, dict[str, Any]]:
    """What :func:`save_result` wrote: vocabulary, model (safetensors, no pickle) and run facts."""
    folder = Path(folder)
    return (
        pd.read_parquet(folder / VOCABULARY_FILE),
        TrainedModel.load(folder / MODEL_FILE),
        json.loads((folder / RUN_FILE).read_text()),
    )
