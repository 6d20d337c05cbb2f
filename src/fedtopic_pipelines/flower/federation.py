"""What the ServerApp does, on any ``Grid``: find the organisations, agree on a vocabulary, train.

1. ``query.hello``: every node names its organisation (from its ``node_config``).
2. ``query.vocabulary``: every node preprocesses its own documents and proposes its top-N
   terms with their counts; the server merges them (``merge_vocabularies``).
3. ``query.prepare``: every node vectorises its documents against the common vocabulary
   and reports how many training documents it has.
4. Training rounds: the same :class:`FederatedServer` and :class:`FedSGD` strategy as the
   in-process engine, with a :class:`GridEngine` carrying the messages.

The job (parameters, organisations in order, where to write) comes from one JSON file;
the organisations' order fixes their seeds, exactly as in ``train_scenarios``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from fedtopic_pipelines.core.config import ConsensusConfig, FlowerConfig, TrainConfig, from_mapping
from fedtopic_pipelines.core.federated.server import FederatedServer
from fedtopic_pipelines.core.federated.strategies import FedSGD
from fedtopic_pipelines.core.training import TrainedModel, federated_stopping, new_global_model, resolve_device
from fedtopic_pipelines.core.vocab.consensus import merge_vocabularies
from fedtopic_pipelines.flower.engine import GridEngine, exchange

logger = logging.getLogger(__name__)


class FederationError(RuntimeError):
    """The federation cannot go on; the message names the organisation or node and the stage."""


@dataclass(frozen=True)
class Job:
    """One training run on Flower: the Kedro parameter blocks and the organisations, in order."""

    organisations: list[str]
    preprocess: dict[str, Any]
    vocab_consensus: dict[str, Any]
    train: dict[str, Any]
    flower: FlowerConfig = field(default_factory=FlowerConfig)

    @classmethod
    def from_file(cls, path: Path) -> Job:
        return cls.from_dict(json.loads(Path(path).read_text()))

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Job:
        flower = from_mapping(FlowerConfig, raw.get("flower"), "train.flower")
        return cls(raw["organisations"], raw["preprocess"], raw["vocab_consensus"], raw["train"], flower)

    def to_dict(self) -> dict[str, Any]:
        return {
            "organisations": self.organisations,
            "preprocess": self.preprocess,
            "vocab_consensus": self.vocab_consensus,
            "train": self.train,
            "flower": asdict(self.flower),
        }


@dataclass
class FederationResult:
    vocabulary: pd.DataFrame
    model: TrainedModel
    nodes: dict[str, int]
    latencies: list[float]
    stage_reports: dict[str, dict[str, Any]]


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def wait_for_nodes(grid: Grid, count: int, timeout_s: float, poll_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= count:
            return nodes
        if time.monotonic() >= deadline:
            raise FederationError(f"{len(nodes)} of {count} organisations' nodes connected within {timeout_s:g} s")
        time.sleep(max(poll_s, 0.1))


def ask(
    grid: Grid, nodes: dict[int, str], action: str, contents: dict[int, RecordDict], timeout_s: float, poll_s: float
) -> dict[str, ConfigRecord]:
    """A query stage: every node must answer with a ``reply`` ConfigRecord, or the run stops naming it."""
    messages = [Message(content=contents[node], dst_node_id=node, message_type=f"query.{action}") for node in nodes]
    replies, missing = exchange(grid, messages, timeout_s, poll_s)
    answers: dict[str, ConfigRecord] = {}
    for node, name in nodes.items():
        reply = replies.get(node)
        if reply is None:
            raise FederationError(f"stage '{action}': node {node} ({name}) failed: {missing.get(node)}")
        if reply.has_error():
            raise FederationError(f"stage '{action}': node {node} ({name}) failed: {reply.error.reason}")
        if "reply" not in reply.content.config_records:
            raise FederationError(f"stage '{action}': node {node} ({name}) sent no 'reply' record")
        answers[name] = reply.content.config_records["reply"]
    return answers


def run_federation(grid: Grid, job: Job) -> FederationResult:
    """Consensus, then training; returns the vocabulary and the trained model."""
    cfg = job.flower
    train_config = TrainConfig.from_params(job.train)
    consensus = from_mapping(ConsensusConfig, job.vocab_consensus, "vocab_consensus")
    all_nodes = wait_for_nodes(grid, len(job.organisations), cfg.connect_timeout_s, cfg.poll_s)

    named = _names(grid, all_nodes, cfg)
    nodes = _order(named, job.organisations)

    params = ConfigRecord({"preprocess": _json(job.preprocess), "vocab_consensus": _json(job.vocab_consensus)})
    proposals_raw = ask(
        grid, nodes, "vocabulary", {n: RecordDict({"config": params}) for n in nodes}, cfg.stage_timeout_s, cfg.poll_s
    )
    proposals = {}
    for org in job.organisations:
        record = proposals_raw[org]
        terms, counts = list(record["terms"]), list(record["counts"])
        if len(terms) != len(counts):
            raise FederationError(f"stage 'vocabulary': {org} sent {len(terms)} terms but {len(counts)} counts")
        proposals[org] = dict(zip(terms, (int(c) for c in counts), strict=True))
        logger.info("organisation %s proposes %d terms", org, len(terms))
    vocabulary = merge_vocabularies(proposals, consensus.merge)
    terms = vocabulary["term"].tolist()
    logger.info("common vocabulary (%s): %d terms", consensus.merge, len(terms))

    prepared = ask(
        grid,
        nodes,
        "prepare",
        {
            node: RecordDict(
                {
                    "config": ConfigRecord(
                        {
                            "preprocess": _json(job.preprocess),
                            "train": _json(job.train),
                            "terms": terms,
                            "index": job.organisations.index(org),
                        }
                    )
                }
            )
            for node, org in nodes.items()
        },
        cfg.stage_timeout_s,
        cfg.poll_s,
    )
    rows = {org: int(prepared[org]["train_rows"]) for org in job.organisations}
    device = resolve_device(train_config.device)
    global_model = new_global_model(len(terms), train_config, device)
    validate = train_config.validation_fraction > 0
    server = FederatedServer(
        FedSGD(global_model, train_config.optimizer),
        federated_stopping(train_config, max(rows.values()), validate),
        name="federated",
    )
    engine = GridEngine(grid, nodes, cfg.round_timeout_s, cfg.poll_s)
    checkpoints = Checkpoints(job, terms) if cfg.checkpoint_every else None
    if checkpoints is not None and (saved := checkpoints.load()) is not None:
        server.resume(saved)
        logger.info("resumed from %s at round %d", checkpoints.path, server.next_round)
    history = server.run(engine, on_round_end=None if checkpoints is None else checkpoints.maybe_save)
    state = {k: v.detach().cpu().clone() for k, v in global_model.state_dict().items()}
    model = TrainedModel(
        "federated",
        "federated",
        list(job.organisations),
        len(terms),
        train_config,
        state,
        history,
        server.stopped_early,
        server.best_round,
    )
    return FederationResult(
        vocabulary,
        model,
        {org: node for node, org in nodes.items()},
        list(engine.latencies),
        {"prepare": {org: dict(prepared[org]) for org in job.organisations}},
    )


class Checkpoints:
    """The server's state every ``checkpoint_every`` rounds, for a restarted ServerApp to resume from.

    Written atomically (temporary file, then rename) to ``checkpoint_dir/<job digest>.pt``;
    the digest covers the job and the vocabulary, so a changed job never resumes from an
    unrelated run. The nodes rejoin at the checkpoint's round by replaying their streams.
    """

    def __init__(self, job: Job, terms: list[str]) -> None:
        what = {k: v for k, v in job.to_dict().items() if k != "flower"}  # timeouts may change on restart
        digest = hashlib.sha256(json.dumps([what, terms], sort_keys=True, default=str).encode())
        self.every = job.flower.checkpoint_every
        self.path = Path(str(job.flower.checkpoint_dir)) / f"federated-{digest.hexdigest()[:16]}.pt"

    def load(self) -> dict[str, Any] | None:
        return torch.load(self.path, weights_only=False) if self.path.is_file() else None

    def maybe_save(self, server: FederatedServer) -> None:
        if server.next_round % self.every and not server.stopped_early:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".partial")
        torch.save(server.checkpoint(), partial)
        partial.replace(self.path)
        logger.info("checkpoint after round %d: %s", server.next_round - 1, self.path)


def _names(grid: Grid, nodes: list[int], cfg: FlowerConfig) -> dict[int, str]:
    messages = [Message(content=RecordDict(), dst_node_id=n, message_type="query.hello") for n in nodes]
    replies, missing = exchange(grid, messages, cfg.stage_timeout_s, cfg.poll_s)
    names = {}
    for node in nodes:
        reply = replies.get(node)
        if reply is None or reply.has_error():
            reason = missing.get(node) if reply is None else reply.error.reason
            raise FederationError(f"stage 'hello': node {node} failed: {reason}")
        names[node] = str(reply.content.config_records["reply"]["organisation"])
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


def save_result(result: FederationResult, folder: Path) -> None:
    """Write the vocabulary, the model and the run facts where the submitter reads them."""
    folder.mkdir(parents=True, exist_ok=True)
    result.vocabulary.to_parquet(folder / "vocabulary.parquet")
    torch.save(result.model, folder / "model.pt")
    (folder / "run.json").write_text(
        json.dumps({"nodes": result.nodes, "latencies_s": result.latencies, "stages": result.stage_reports}, indent=2)
    )
