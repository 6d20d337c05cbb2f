"""The Flower engine: one core instruction -> one Flower message per organisation's node.

``GridEngine.broadcast`` pushes the messages and pulls the replies itself, every
``poll_s`` seconds until ``timeout_s``: ``Grid.send_and_receive`` sleeps 3 s between
pulls, more than a whole FedSGD round should take. A node that does not answer in time,
answers with an error, or sends a reply that cannot be read as an update is reported in
``Replies.failures`` with the reason; the server then leaves it out of the round and the
remaining organisations' weights are renormalised (eq. 2 divides by the accepted sizes).

The timeout also bounds the pull of a reply's arrays, without touching Flower: a node
killed while uploading leaves a reply whose arrays never arrive, and Flower's
``pull_messages`` retries that pull for minutes. ``exchange`` therefore pulls each reply
in a worker thread of its own and stops waiting for them at the deadline (see its docstring).

With ``privacy.secure_aggregation`` a training round is Flower's SecAgg+ instead
(``flower/secagg.py``): four exchanges per round, and the server receives one aggregate
update (client id ``secure_aggregate``), never an organisation's own. Validation rounds stay
plain messages (a loss per organisation, no tensors).
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.run import RunNotRunningException

from fedtopic_pipelines.core.federated.engine import FederationError
from fedtopic_pipelines.core.federated.messages import EVALUATE, Instruction, Replies, Update
from fedtopic_pipelines.flower.records import (
    MalformedRecord,
    decode_config,
    encode_config,
    instruction_to_record,
    record_to_update,
)
from fedtopic_pipelines.flower.secagg import SecAggSettings, secure_round

logger = logging.getLogger(__name__)


def message_type(instruction: Instruction) -> str:
    """``train.<kind>`` for a training round, ``evaluate`` for a validation round."""
    action = str(instruction.config.get("action", "gradients"))
    return "evaluate" if action == EVALUATE else f"train.{action}"


def _pull(grid: Grid, message_id: str, done: queue.SimpleQueue) -> None:
    """``grid.pull_messages`` of one reply, in a worker thread; the result, or what it raised, goes to ``done``."""
    try:
        done.put((message_id, list(grid.pull_messages([message_id])), None))
    except BaseException as exc:  # handed to the exchange that started the pull, if it still waits
        done.put((message_id, [], exc))


class _Pulls:
    """One exchange's replies: those in, those being pulled, whose turn is next, and why nodes failed.

    A separate object per exchange: its queue is read by it alone, so a late pull writes where no one reads.
    """

    def __init__(self, node_of: dict[str, int], missing: dict[int, str]) -> None:
        self.node_of = node_of
        self.missing = missing
        self.replies: dict[int, Message] = {}
        self.arrived: dict[int, float] = {}  # node -> time.monotonic() when its reply was in
        self.pending = set(node_of)
        self.turns = collections.deque(node_of)  # whose reply is pulled next
        self.pulling: set[str] = set()  # message ids whose reply a pull is fetching
        self.done: queue.SimpleQueue = queue.SimpleQueue()  # this exchange's only: late pulls write where no one reads

    def take(self, result: tuple[str, list[Message], BaseException | None]) -> None:
        """Count one finished pull: its replies, or its node's failure (a stopped run ends the exchange)."""
        message_id, pulled, error = result
        self.pulling.discard(message_id)
        if error is not None:
            if isinstance(error, RunNotRunningException) or not isinstance(error, Exception):
                raise error  # the run was stopped (or the process is exiting): nothing more to pull
            # anything else (an object its node uploaded that does not inflate, a transport
            # error) is that node's failure for this exchange, not the end of the run
            self.pending.discard(message_id)
            self.missing[self.node_of[message_id]] = f"its reply could not be pulled: {type(error).__name__}: {error}"
            return
        for reply in pulled:
            mid = reply.metadata.reply_to_message_id
            if mid in self.pending:
                self.pending.discard(mid)
                self.replies[self.node_of[mid]] = reply
                self.arrived[self.node_of[mid]] = time.monotonic()

    def next_turn(self) -> str | None:
        """The next message id in turn whose reply is neither in nor being pulled, if any."""
        for _ in range(len(self.turns)):
            mid = self.turns.popleft()
            if mid not in self.pending:
                continue  # answered: out of the rotation
            self.turns.append(mid)
            if mid not in self.pulling:
                return mid
        return None

    def collect(self, grid: Grid, start: float, deadline: float, poll_s: float) -> None:
        """Start one pull every ``poll_s`` and take what they bring until all replies are in or ``deadline``."""
        next_pull = start
        while self.pending:
            now = time.monotonic()
            if now >= deadline:
                break
            if now >= next_pull and (mid := self.next_turn()) is not None:
                self.pulling.add(mid)
                threading.Thread(
                    target=_pull, args=(grid, mid, self.done), daemon=True, name="fedtopic-pull-reply"
                ).start()
                next_pull = now + poll_s
                continue
            wake = next_pull if len(self.pulling) < len(self.pending) else deadline  # all pulled: wait for one to end
            try:
                self.take(self.done.get(timeout=max(0.0, min(wake, deadline) - now)))
            except queue.Empty:
                continue
        while self.pending and self.pulling:  # pulls that ended by now count; the others are left behind
            try:
                self.take(self.done.get_nowait())
            except queue.Empty:
                break


def exchange(
    grid: Grid,
    messages: list[Message],
    timeout_s: float,
    poll_s: float = 0.01,
    seconds: dict[int, float] | None = None,
) -> tuple[dict[int, Message], dict[int, str]]:
    """Push ``messages`` and pull their replies until all came or ``timeout_s`` passed.

    Returns the replies by destination node and, for every node without a reply, why; fills
    ``seconds`` (when given) with each reply's time from the end of the push to its pull.
    The timeout counts from the end of the push: a grid whose push takes long (the
    in-process test grid runs the ClientApps inside ``push_messages``) still gets its
    replies pulled.

    Flower's ``pull_messages`` returns replies only with all their arrays: it takes every
    reply that is there from the SuperLink (each is handed out once), then pulls their
    arrays one reply after the other, retrying arrays still uploading (1 s backoff,
    doubling to 10 s) until they come or the SuperLink drops the upload session (180 s
    in Flower 1.42). A node killed mid-upload would hold the round that long, and with it
    every reply taken in the same pull. So, without changing Flower:

    * each pull asks for one reply and runs in a daemon thread; every ``poll_s`` one more
      starts, for the next reply in turn that is neither in nor being pulled (one request
      per ``poll_s``, as a single pull of all would make). A pull held by a half-uploaded
      reply holds only that reply: the others are pulled beside it;
    * at the deadline the pulls still running are left behind and their nodes reported
      "no reply within T s". Each exchange collects results on a queue of its own, so a
      pull that ends later cannot put replies (or an exception) into a later round;
    * a pull that raises because the run is no longer running ends the exchange with that
      exception; any other exception of a pull is its node's failure for this exchange.

    Concurrent pulls share the grid's one ``RuntimeHttpClient``. That is safe: its
    ``httpx.Client`` "can be shared between threads" (httpx docs; httpcore guards its
    connection pool with a lock), Flower's retry invoker guards its state with locks,
    and Flower itself already calls this client from several threads (``pull_objects``
    and ``push_objects`` use thread pools). ``HttpGrid`` creates its client lazily; the
    first call, ``push_messages`` below, happens in this thread, before any pull starts.
    """
    nodes = [m.metadata.dst_node_id for m in messages]
    ids = list(grid.push_messages(messages))
    start = time.monotonic()  # the nodes have timeout_s from when their messages are on the SuperLink
    pulls = _Pulls(
        {mid: node for mid, node in zip(ids, nodes, strict=True) if mid},
        {node: "the SuperLink did not store the message" for node, mid in zip(nodes, ids, strict=True) if not mid},
    )
    pulls.collect(grid, start, start + timeout_s, poll_s)
    pulls.missing.update({pulls.node_of[mid]: f"no reply within {timeout_s:g} s" for mid in pulls.pending})
    if seconds is not None:
        seconds.update({node: at - start for node, at in pulls.arrived.items()})
    return pulls.replies, pulls.missing


class GridEngine:
    """Synchronous fan-out over a Flower ``Grid`` to the nodes of ``organisations`` (node id -> name).

    ``query`` carries a stage before training (``query.<action>`` messages); a node that does
    not answer it, or answers with an error, stops the federation naming the organisation.
    ``broadcast`` carries a round; a node that fails it is left out of that round.

    With ``secagg`` (the settings of ``privacy.secagg``, when ``privacy.secure_aggregation`` is on)
    every training round runs Flower's SecAgg+ workflow over the nodes. ``latencies`` holds each
    round's seconds, ``messages`` each round's messages sent and replies received.
    """

    def __init__(
        self,
        grid: Grid,
        organisations: Mapping[int, str],
        timeout_s: float,
        poll_s: float = 0.01,
        stage_timeout_s: float = 1800.0,
        secagg: SecAggSettings | None = None,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"the round timeout must be > 0 s, got {timeout_s}")
        self.grid = grid
        self.organisations = dict(organisations)
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.stage_timeout_s = stage_timeout_s
        self.secagg = secagg
        self.latencies: list[float] = []
        self.messages: list[dict[str, int]] = []

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

    def broadcast(self, instruction: Instruction, to: Sequence[str] | None = None) -> Replies:
        """One round's instruction to every node, or (client sampling) to the organisations in ``to``."""
        start = time.perf_counter()
        kind = message_type(instruction)
        nodes = {n: o for n, o in self.organisations.items() if to is None or o in set(to)}
        if self.secagg is not None and kind != "evaluate":
            secure, counts = secure_round(
                self.grid, nodes, instruction, self.secagg, kind, self.timeout_s, self.poll_s, exchange
            )
            self.latencies.append(time.perf_counter() - start)
            self.messages.append({"secure": 1, **counts})
            return secure
        content = instruction_to_record(instruction)
        messages = [Message(content=content, dst_node_id=node, message_type=kind) for node in nodes]
        took: dict[int, float] = {}
        replies, missing = exchange(self.grid, messages, self.timeout_s, self.poll_s, took)
        failures = {self.organisations[node]: reason for node, reason in missing.items()}
        updates: list[Update] = []
        for node, org in nodes.items():  # in order, so averaging adds as in-process
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
            except Exception as exc:  # a reply no check foresaw is still only this organisation's failure
                failures[org] = f"unreadable reply: {type(exc).__name__}: {exc}"
        self.latencies.append(time.perf_counter() - start)
        self.messages.append({"secure": 0, "sent": len(messages), "received": len(replies), "stages": 1})
        return Replies(updates, failures, seconds={self.organisations[n]: s for n, s in took.items()})
