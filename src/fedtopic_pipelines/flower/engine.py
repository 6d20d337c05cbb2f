"""The Flower engine: one core instruction -> one Flower message per organisation's node.

``GridEngine.broadcast`` pushes the messages and pulls the replies itself, every
``poll_s`` seconds until ``timeout_s``: ``Grid.send_and_receive`` sleeps 3 s between
pulls, more than a whole FedSGD round should take. A node that does not answer in time,
answers with an error, or sends a reply that cannot be read as an update is reported in
``Replies.failures`` with the reason; the server then leaves it out of the round and the
remaining organisations' weights are renormalised (eq. 2 divides by the accepted sizes).

The timeout also bounds the pull of a reply's arrays (``PULL_DEADLINE``): a node killed
while uploading leaves a reply whose arrays never arrive, and Flower would otherwise
retry that pull for minutes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid

from fedtopic_pipelines.core.federated.engine import FederationError
from fedtopic_pipelines.core.federated.messages import EVALUATE, Instruction, Replies, Update
from fedtopic_pipelines.flower.records import (
    MalformedRecord,
    decode_config,
    encode_config,
    instruction_to_record,
    record_to_update,
)

logger = logging.getLogger(__name__)

# ``time.monotonic()`` by which the current exchange must hold its replies, arrays included.
PULL_DEADLINE: ContextVar[float | None] = ContextVar("fedtopic_pull_deadline", default=None)


def pull_time_left(default: float) -> float:
    """Seconds left to pull a reply's arrays: until the exchange's deadline, else ``default``."""
    deadline = PULL_DEADLINE.get()
    return default if deadline is None else max(0.0, deadline - time.monotonic())


def message_type(instruction: Instruction) -> str:
    """``train.<kind>`` for a training round, ``evaluate`` for a validation round."""
    action = str(instruction.config.get("action", "gradients"))
    return "evaluate" if action == EVALUATE else f"train.{action}"


def exchange(
    grid: Grid, messages: list[Message], timeout_s: float, poll_s: float = 0.01
) -> tuple[dict[int, Message], dict[int, str]]:
    """Push ``messages`` and pull their replies until all came or ``timeout_s`` passed.

    Returns the replies by destination node and, for every node without a reply, why.
    """
    start = time.monotonic()
    deadline = start + timeout_s
    nodes = [m.metadata.dst_node_id for m in messages]
    ids = list(grid.push_messages(messages))
    node_of = {mid: node for mid, node in zip(ids, nodes, strict=True) if mid}
    missing = {node: "the SuperLink did not store the message" for node, mid in zip(nodes, ids, strict=True) if not mid}
    replies: dict[int, Message] = {}
    pending = set(node_of)
    token = PULL_DEADLINE.set(deadline)
    try:
        while pending:
            # One last pull after the deadline: a pull can block until the deadline on a reply
            # whose arrays never finish, while other replies arrive in time behind it.
            last = time.monotonic() >= deadline
            for reply in grid.pull_messages(list(pending)):
                mid = reply.metadata.reply_to_message_id
                if mid in pending:
                    pending.discard(mid)
                    replies[node_of[mid]] = reply
            if not pending or last:
                break
            time.sleep(poll_s)
    finally:
        PULL_DEADLINE.reset(token)
    missing.update({node_of[mid]: f"no reply within {timeout_s:g} s" for mid in pending})
    return replies, missing


class GridEngine:
    """Synchronous fan-out over a Flower ``Grid`` to the nodes of ``organisations`` (node id -> name).

    ``query`` carries a stage before training (``query.<action>`` messages); a node that does
    not answer it, or answers with an error, stops the federation naming the organisation.
    ``broadcast`` carries a round; a node that fails it is left out of that round.
    """

    def __init__(
        self,
        grid: Grid,
        organisations: Mapping[int, str],
        timeout_s: float,
        poll_s: float = 0.01,
        stage_timeout_s: float = 1800.0,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"the round timeout must be > 0 s, got {timeout_s}")
        self.grid = grid
        self.organisations = dict(organisations)
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.stage_timeout_s = stage_timeout_s
        self.latencies: list[float] = []

    def query(self, action: str, payloads: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        nodes = {node: org for node, org in self.organisations.items() if org in payloads}
        messages = [
            Message(
                content=RecordDict({"payload": encode_config(dict(payloads[org]))}),
                dst_node_id=node,
                message_type=f"query.{action}",
            )
            for node, org in nodes.items()
        ]
        replies, missing = exchange(self.grid, messages, self.stage_timeout_s, self.poll_s)
        answers: dict[str, dict[str, Any]] = {}
        for node, org in nodes.items():
            reply = replies.get(node)
            if reply is None:
                raise FederationError(f"stage '{action}': node {node} ({org}) failed: {missing.get(node)}")
            if reply.has_error():
                raise FederationError(f"stage '{action}': node {node} ({org}) failed: {reply.error.reason}")
            try:
                answers[org] = decode_config(reply.content.config_records.get("reply"))
            except MalformedRecord as exc:
                raise FederationError(f"stage '{action}': node {node} ({org}) sent a malformed reply: {exc}") from None
        return answers

    def broadcast(self, instruction: Instruction) -> Replies:
        start = time.perf_counter()
        content = instruction_to_record(instruction)
        kind = message_type(instruction)
        messages = [Message(content=content, dst_node_id=node, message_type=kind) for node in self.organisations]
        replies, missing = exchange(self.grid, messages, self.timeout_s, self.poll_s)
        failures = {self.organisations[node]: reason for node, reason in missing.items()}
        updates: list[Update] = []
        for node, org in self.organisations.items():  # in order, so averaging adds as in-process
            reply = replies.get(node)
            if reply is None:
                continue
            if reply.has_error():
                failures[org] = f"error reply (code {reply.error.code}): {reply.error.reason}"
                continue
            try:
                updates.append(record_to_update(reply.content, org))
            except MalformedRecord as exc:
                failures[org] = f"malformed reply: {exc}"
        self.latencies.append(time.perf_counter() - start)
        return Replies(updates, failures)
