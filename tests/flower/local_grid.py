"""A Grid that delivers each message to a ClientApp in this process (Flower's own app and records).

Flower 1.42 simulates only on Ray; this grid runs the real ``ClientApp`` object with real
``Message``/``Context`` objects, so the ServerApp logic and the records are tested without
processes. The loopback deployment tests cover the processes.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

from fedtopic_pipelines.core.vocab.privacy import KEY_ENV

CLIENT_APP_RAISED_EXCEPTION = 2
NO_KEY = ""  # ``vocab_key=NO_KEY``: nodes started without the organisations' key


@contextlib.contextmanager
def node_environment(key: str) -> Iterator[None]:
    """``FEDTOPIC_VOCAB_KEY`` set to ``key`` (unset when empty) while a node answers, then as it was."""
    before = os.environ.pop(KEY_ENV, None)
    if key:
        os.environ[KEY_ENV] = key
    try:
        yield
    finally:
        os.environ.pop(KEY_ENV, None)
        if before is not None:
            os.environ[KEY_ENV] = before


def set_task_identity() -> None:
    """``Message(...)`` reads the task identity a Flower process sets; set one for tests."""
    TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = 1


class LocalGrid(Grid):
    """Node id -> node_config; ``on_send`` sees every (node, message, reply) pair (privacy test).

    ``vocab_key``: the organisations' shared key the nodes hold (default: a fresh one per grid,
    made as ``make federation-up`` makes it; :data:`NO_KEY`: none).
    """

    def __init__(
        self,
        client_app: ClientApp,
        node_configs: Mapping[int, dict],
        on_send: Callable[[int, Message, Message], None] | None = None,
        drop: Callable[[int, Message], bool] | None = None,
        vocab_key: str | None = None,
    ) -> None:
        set_task_identity()
        self.vocab_key = secrets.token_hex(32) if vocab_key is None else vocab_key
        self.app = client_app
        self.contexts = {
            node: Context(run_id=1, node_id=node, node_config=dict(cfg), state=RecordDict(), run_config={})
            for node, cfg in node_configs.items()
        }
        self.on_send = on_send
        self.drop = drop
        self._replies: dict[str, Message] = {}
        self._count = 0
        self._run = None

    @property
    def run(self):
        return self._run

    def set_run(self, run_id: int) -> None:
        self._run = run_id

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for message in messages:
            self._count += 1
            mid = f"m{self._count}"
            message.metadata.__dict__["_message_id"] = mid
            node = message.metadata.dst_node_id
            ids.append(mid)
            if self.drop is not None and self.drop(node, message):
                continue  # the node never answers
            try:
                with node_environment(self.vocab_key):
                    reply = self.app(message, self.contexts[node])
            except Exception as exc:  # a deployment answers with an error reply
                reply = Message(Error(CLIENT_APP_RAISED_EXCEPTION, repr(exc)), reply_to=message)
            if self.on_send is not None:
                self.on_send(node, message, reply)
            self._replies[mid] = reply
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(i) for i in list(message_ids) if i in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))
