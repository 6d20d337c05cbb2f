"""The ClientApp: an organisation's node answers with the core :class:`Site` and its client.

``node_config`` gives the node its organisation (``organisation``), its raw documents
(``data-path``: a folder of Parquet shards, as ``kedro run --pipeline=ingest_*`` writes
them, or one Parquet file) and a private cache folder (``cache-dir``). Everything the
node computes from its documents (tokens, bag-of-words matrix) stays in that cache.

A ClientApp may run in a fresh process for every message, so nothing is kept in memory:
the run's settings and the position of the client's batch and noise streams are kept in
``context.state`` (Flower keeps it per node and run), the data in the cache.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from fedtopic_pipelines.core.config import ConsensusConfig, PreprocessConfig, TrainConfig, from_mapping
from fedtopic_pipelines.core.federated.client import GradientClient
from fedtopic_pipelines.core.federated.site import Site
from fedtopic_pipelines.flower.records import record_to_instruction, update_to_record

logger = logging.getLogger(__name__)

app = ClientApp()

JOB, STREAMS = "fedtopic.job", "fedtopic.streams"


def site_of(context: Context) -> Site:
    config = context.node_config
    for key in ("organisation", "data-path"):
        if key not in config:
            raise ValueError(f"node_config has no '{key}' (flower-supernode --node-config \"{key}='...'\")")
    data = Path(str(config["data-path"]))
    cache = Path(str(config.get("cache-dir", data.parent / f".fedtopic-cache-{config['organisation']}")))
    return Site(str(config["organisation"]), data, cache)


def _reply(message: Message, **values) -> Message:
    return Message(RecordDict({"reply": ConfigRecord(values)}), reply_to=message)


@app.query("hello")
def hello(message: Message, context: Context) -> Message:
    site = site_of(context)
    return _reply(message, organisation=site.name, documents=len(site.raw))


@app.query("vocabulary")
def vocabulary(message: Message, context: Context) -> Message:
    config = message.content.config_records["config"]
    preprocess = from_mapping(PreprocessConfig, json.loads(str(config["preprocess"])), "preprocess")
    consensus = from_mapping(ConsensusConfig, json.loads(str(config["vocab_consensus"])), "vocab_consensus")
    proposal = site_of(context).proposal(preprocess, consensus)
    return _reply(message, terms=list(proposal), counts=[int(c) for c in proposal.values()])


@app.query("prepare")
def prepare(message: Message, context: Context) -> Message:
    config = message.content.config_records["config"]
    job = {
        "preprocess": str(config["preprocess"]),
        "train": str(config["train"]),
        "terms": list(config["terms"]),
        "index": int(config["index"]),
    }
    prepared = _prepared(site_of(context), job)
    context.state[JOB] = ConfigRecord(job)
    if STREAMS in context.state:
        del context.state[STREAMS]
    return _reply(
        message,
        train_rows=int(prepared.train.shape[0]),
        validation_rows=0 if prepared.validation is None else int(prepared.validation.shape[0]),
        dropped_no_vocabulary_term=json.dumps(prepared.report.get("dropped_no_vocabulary_term", {})),
    )


def _prepared(site: Site, job: dict):
    preprocess = from_mapping(PreprocessConfig, json.loads(job["preprocess"]), "preprocess")
    train = TrainConfig.from_params(json.loads(job["train"]))
    return site.prepare(preprocess, list(job["terms"]), train, int(job["index"]))


def _client(context: Context) -> GradientClient:
    if JOB not in context.state:
        raise RuntimeError("training message before 'query.prepare': this node does not know the run's vocabulary")
    job = dict(context.state[JOB])
    site = site_of(context)
    train = TrainConfig.from_params(json.loads(str(job["train"])))
    return site.client(_prepared(site, job), train, int(job["index"]))


@app.train("gradients")
def gradients(message: Message, context: Context) -> Message:
    """One FedSGD round: the gradient of this round's mini-batch at the broadcast weights."""
    instruction = record_to_instruction(message.content)
    client = _client(context)
    source = client.sources[0]
    saved = context.state.get(STREAMS)
    if saved is not None and int(context.state[JOB + ".next_round"]["round"]) == instruction.round:
        source.load_state_dict(_tensors(saved))
    else:  # a resumed run, or the first round: replay the streams up to this round
        client.skip(instruction.round)
    update = client.handle(instruction)
    context.state[STREAMS] = ArrayRecord(source.state_dict())
    context.state[JOB + ".next_round"] = ConfigRecord({"round": instruction.round + 1})
    return Message(update_to_record(update), reply_to=message)


@app.evaluate()
def evaluate(message: Message, context: Context) -> Message:
    """Validation loss of the broadcast model on this organisation's held-out documents."""
    update = _client(context).handle(record_to_instruction(message.content))
    return Message(update_to_record(update), reply_to=message)


def _tensors(record: ArrayRecord) -> dict[str, torch.Tensor]:
    return {name: torch.from_numpy(array.numpy().copy()) for name, array in record.items()}
