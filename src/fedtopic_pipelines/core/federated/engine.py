"""The in-process engine: calls each client directly (default, tests, benchmarks).

The Flower app is the other engine: it carries the same Instruction/Update messages
between processes and machines.
"""

from __future__ import annotations

from collections.abc import Sequence

from fedtopic_pipelines.core.federated.client import Client
from fedtopic_pipelines.core.federated.messages import Instruction, Replies


class InProcessEngine:
    """Synchronous fan-out to clients living in this process; a client's exception propagates."""

    def __init__(self, clients: Sequence[Client]) -> None:
        ids = [c.client_id for c in clients]
        if len(set(ids)) != len(ids):
            raise ValueError(f"client ids must be unique, got {ids}")
        self.clients = list(clients)

    def broadcast(self, instruction: Instruction) -> Replies:
        return Replies([client.handle(instruction) for client in self.clients])
