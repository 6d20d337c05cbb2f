"""The in-process engine: calls each organisation's endpoint directly (default, tests, benchmarks).

An engine does two things: ask every organisation a *query* (a stage before training:
its vocabulary proposal, its preparation) and *broadcast* a round's instruction. The
Flower engine (``flower/engine.py``) does the same between processes and machines; both
reach the same endpoint objects (``core/site.py``), so the federation entry
point (``core/federation.py``) runs unchanged on either.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from fedtopic_pipelines.core.federated.messages import Instruction, Replies, Update

logger = logging.getLogger(__name__)


class FederationError(RuntimeError):
    """The federation cannot go on; the message names the organisation and the stage."""


class Endpoint(Protocol):
    """What answers the server for one organisation."""

    name: str

    def query(self, action: str, payload: Mapping[str, Any]) -> dict[str, Any]: ...

    def handle(self, instruction: Instruction) -> Update: ...


class Engine(Protocol):
    """Moves the server's queries and instructions to the organisations and back."""

    def query(self, action: str, payloads: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]: ...

    def broadcast(self, instruction: Instruction, to: Sequence[str] | None = None) -> Replies: ...


class InProcessEngine:
    """Synchronous fan-out to endpoints living in this process.

    As on Flower, an organisation whose endpoint raises during a round is reported as a
    failure of that round (with the exception) and left out, and one that fails a query
    stage stops the federation naming it. As on Flower, an update is attributed to the
    endpoint that returned it, whatever ``client_id`` it claims.
    """

    def __init__(self, endpoints: Sequence[Endpoint]) -> None:
        names = [e.name for e in endpoints]
        if len(set(names)) != len(names):
            raise ValueError(f"organisation names must be unique, got {names}")
        self.endpoints = {e.name: e for e in endpoints}

    def query(self, action: str, payloads: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        answers = {}
        for name, payload in payloads.items():
            try:
                answers[name] = self.endpoints[name].query(action, payload)
            except Exception as exc:
                raise FederationError(f"stage '{action}': organisation '{name}' failed: {exc}") from exc
        return answers

    def broadcast(self, instruction: Instruction, to: Sequence[str] | None = None) -> Replies:
        """The instruction to every endpoint, or (client sampling) to those named in ``to``."""
        updates, failures, seconds = [], {}, {}
        chosen = self.endpoints if to is None else {n: e for n, e in self.endpoints.items() if n in set(to)}
        for name, endpoint in chosen.items():
            start = time.perf_counter()
            try:
                update = endpoint.handle(instruction)
                updates.append(dataclasses.replace(update, client_id=name) if isinstance(update, Update) else update)
                seconds[name] = time.perf_counter() - start
            except Exception as exc:  # a failed organisation is left out of the round, as on Flower
                logger.exception("organisation '%s' failed in round %d", name, instruction.round)
                failures[name] = f"{type(exc).__name__}: {exc}"
        return Replies(updates, failures, seconds=seconds)
