"""The ClientApp: an organisation's node answers through the core :class:`FolderEndpoint`.

``node_config`` gives the node its organisation (``organisation``), its raw documents
(``data-path``: a folder of Parquet shards, as ``kedro run --pipelines=ingest_*`` writes
them, or one Parquet file) and a private cache folder (``cache-dir``). Everything the
node computes from its documents (tokens, bag-of-words matrix) stays in that cache, and
what it sends is what the same endpoint sends in process: a hello, its top-N vocabulary
proposal, its declared document counts, and one update of its family's kind per round.

A ClientApp may run in a fresh process for every message, so nothing is kept in memory:
the run's ``prepare`` payload and the client's position (its batch and noise streams,
the next round it expects) are kept in ``context.state`` (Flower keeps it per node and
run), the data in the cache.

Secure rounds (``privacy.secure_aggregation``) arrive as Flower's SecAgg+ messages of type
``train``: the ``train`` handler runs under Flower's ``secaggplus_mod``, which answers the
protocol's key stages itself and calls the handler only to get the update it then masks
(``flower/secagg.py``). Every other message type passes the mod untouched.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp

from fedtopic_pipelines.core.federated.messages import UpdateKind
from fedtopic_pipelines.core.site import HELLO, PREPARE, VOCABULARY, FolderEndpoint
from fedtopic_pipelines.flower import secagg
from fedtopic_pipelines.flower.records import decode_config, encode_config, record_to_instruction, update_to_record

logger = logging.getLogger(__name__)

app = ClientApp()

JOB, CLIENT = "fedtopic.prepare", "fedtopic.client"


def endpoint_of(context: Context) -> FolderEndpoint:
    config = context.node_config
    for key in ("organisation", "data-path"):
        if key not in config:
            raise ValueError(f"node_config has no '{key}' (flower-supernode --node-config \"{key}='...'\")")
    data = Path(str(config["data-path"]))
    cache = Path(str(config.get("cache-dir", data.parent / f".fedtopic-cache-{config['organisation']}")))
    return FolderEndpoint(str(config["organisation"]), data, cache)


def _payload(message: Message) -> dict:
    return decode_config(message.content.config_records.get("payload", ConfigRecord()))


def _reply(message: Message, answer: dict) -> Message:
    return Message(RecordDict({"reply": encode_config(answer)}), reply_to=message)


@app.query(HELLO)
def hello(message: Message, context: Context) -> Message:
    return _reply(message, endpoint_of(context).query(HELLO, {}))


@app.query(VOCABULARY)
def vocabulary(message: Message, context: Context) -> Message:
    return _reply(message, endpoint_of(context).query(VOCABULARY, _payload(message)))


@app.query(PREPARE)
def prepare(message: Message, context: Context) -> Message:
    payload = _payload(message)
    answer = endpoint_of(context).query(PREPARE, payload)
    context.state[JOB] = ConfigRecord({"payload": json.dumps(payload)})
    if CLIENT in context.state:
        del context.state[CLIENT]  # a new run (or a resumed one): the client starts from its round 0
    return _reply(message, answer)


def _endpoint(context: Context, round_: int) -> FolderEndpoint:
    """The endpoint with its client, as it was after its last message (rebuilt from the cache)."""
    if JOB not in context.state:
        raise RuntimeError("training message before 'query.prepare': this node does not know the run's vocabulary")
    endpoint = endpoint_of(context)
    endpoint.prepare(json.loads(str(context.state[JOB]["payload"])))
    saved = context.state.get(CLIENT)
    if saved is not None:
        state = {name: torch.from_numpy(array.numpy().copy()) for name, array in saved.items()}
        if int(state["next_round"]) <= round_:  # else a resumed run asks for an earlier round: replay from 0
            endpoint.client.load_state_dict(state)
    return endpoint


def train_round(message: Message, context: Context) -> Message:
    """One round: this node's update at the broadcast parameters (its family's kind)."""
    instruction = record_to_instruction(message.content)
    endpoint = _endpoint(context, instruction.round)
    update = endpoint.handle(instruction)
    context.state[CLIENT] = ArrayRecord(endpoint.client.state_dict())
    return Message(update_to_record(update), reply_to=message)


@app.train(mods=[secaggplus_mod])
def secure_train_round(message: Message, context: Context) -> Message:
    """A secure round's update, which ``secaggplus_mod`` quantises and masks before it leaves the node."""
    instruction = secagg.fitins_to_instruction(message.content)
    endpoint = _endpoint(context, instruction.round)
    update = endpoint.handle(instruction)
    context.state[CLIENT] = ArrayRecord(endpoint.client.state_dict())
    return Message(secagg.update_to_fitres(update, secagg.reduction(instruction), context), reply_to=message)


for _kind in UpdateKind:  # train.gradients, train.weights, ...: whichever the family's strategy sends
    if _kind is not UpdateKind.METRICS:
        app.train(_kind.value)(train_round)


@app.evaluate()
def evaluate(message: Message, context: Context) -> Message:
    """Validation loss of the broadcast model on this organisation's held-out documents."""
    instruction = record_to_instruction(message.content)
    update = _endpoint(context, instruction.round).handle(instruction)
    return Message(update_to_record(update), reply_to=message)
