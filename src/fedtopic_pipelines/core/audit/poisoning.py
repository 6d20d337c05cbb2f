"""A hostile organisation: an honest endpoint whose replies are poisoned on the way out.

The curious-server attacks (:mod:`.attacks`) read what honest organisations send; this is the
other direction, an organisation that follows the protocol's shape but lies in what it sends,
so that a benchmark or a test can measure what the server's defences (the update checks, the
example-count capacity, ``privacy.robust_rule``, ``privacy.outlier_factor``) let through.
:class:`Hostile` wraps any endpoint (``core/federated/engine.py``'s ``Endpoint``: the in-process
:class:`~fedtopic_pipelines.core.site.MemoryEndpoint` or a test's own) and passes everything
through except what its attack changes:

* ``none``: nothing (the honest run, through the same wrapper).
* ``silent``: it prepares as an honest organisation would and then raises on every
  instruction, so the engine reports it failed and leaves it out: the reference against
  which the damage of the others is measured (the honest organisations' own federation).
* ``scale`` / ``sign_flip``: every tensor of its update times ``factor`` / ``-factor``:
  gradients, sparse row values (the rows themselves are kept), summed statistics (PC-TD's
  M_t) and auxiliary statistics (BatchNorm's; a negative variance is refused by the server's
  check). A weights update (FedAvg, NMF) is scaled as its change from the broadcast weights,
  ``w0 + factor (w - w0)`` (model replacement): weights themselves times 1000 would be a
  cruder, more visible attack than the one a weights rule invites.
* ``capacity``: it declares ``claimed`` training documents when it prepares (the count the
  server caps every later example count by) and claims that many examples in every update,
  to outweigh the others in the weighted mean.
* ``replay``: from its second round on it sends again, byte for byte, the update it sent the
  round before (so it stays at its first update: a captured message resent).

Validation requests (``action: evaluate``) pass through unchanged except for ``silent``: the
attack is on the model, not on the stopping rule.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, Literal, get_args

import torch

from fedtopic_pipelines.core.audit.attacks import copied
from fedtopic_pipelines.core.federated.engine import Endpoint
from fedtopic_pipelines.core.federated.messages import EVALUATE, Instruction, Update, UpdateKind

logger = logging.getLogger(__name__)

AttackName = Literal["none", "silent", "scale", "sign_flip", "capacity", "replay"]
ATTACKS: tuple[str, ...] = get_args(AttackName)
CLAIMED = 10**9  # the capacity attack's declared documents and examples
# what an organisation's query answers declare about its size (prepare's reply; hello's)
SIZE_KEYS = ("train_rows", "documents")


class SilentOrganisation(RuntimeError):
    """A hostile organisation's refusal to answer a round (the ``silent`` attack)."""


class Hostile:
    """An organisation's ``endpoint`` with ``attack`` applied to what it sends (module docstring).

    ``factor`` is the ``scale`` and ``sign_flip`` multiplier, ``claimed`` the ``capacity``
    attack's count. :attr:`attacked` counts the training updates it changed (or, silent, the
    instructions it refused), so a caller can tell an attack that never fired from one that
    did nothing.
    """

    def __init__(self, endpoint: Endpoint, attack: str, factor: float = 1000.0, claimed: int = CLAIMED) -> None:
        if attack not in ATTACKS:
            raise ValueError(f"unknown attack {attack!r}; known: {list(ATTACKS)}")
        if isinstance(claimed, bool) or not isinstance(claimed, int) or claimed < 1:
            raise ValueError(f"claimed must be a positive integer count, got {claimed!r}")
        self.endpoint = endpoint
        self.name = endpoint.name
        self.attack = attack
        self.factor = float(factor)
        self.claimed = claimed
        self.attacked = 0
        self._previous: Update | None = None

    def query(self, action: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """The endpoint's answer; under ``capacity`` with its size inflated to ``claimed``."""
        answer = self.endpoint.query(action, payload)
        if self.attack == "capacity":
            answer = {**answer, **{key: self.claimed for key in SIZE_KEYS if key in answer}}
        return answer

    def handle(self, instruction: Instruction) -> Update:
        """The endpoint's update with the attack applied (validation passes through, but for ``silent``)."""
        if self.attack == "silent":
            self.attacked += 1
            raise SilentOrganisation(f"organisation '{self.name}' stays silent in round {instruction.round}")
        if instruction.config.get("action") == EVALUATE:
            return self.endpoint.handle(instruction)
        honest = self.endpoint.handle(instruction)
        update = self._poison(honest, instruction)
        if update is not honest:
            self.attacked += 1
        return update

    def _poison(self, update: Update, instruction: Instruction) -> Update:
        if self.attack == "scale":
            return scaled(update, self.factor, instruction.state)
        if self.attack == "sign_flip":
            return scaled(update, -self.factor, instruction.state)
        if self.attack == "capacity":
            return dataclasses.replace(update, num_examples=self.claimed)
        if self.attack == "replay":
            if self._previous is None:  # its first round: honest, and kept (a copy: a strategy may clip in place)
                self._previous = copied(update)
                return update
            return self._previous
        return update


def scaled(update: Update, factor: float, reference: Mapping[str, torch.Tensor] | None = None) -> Update:
    """``update`` with every tensor times ``factor`` (dtypes kept, row indices untouched); a
    ``WEIGHTS`` update's tensors as ``reference + factor (w - reference)`` when ``reference``
    (the broadcast state) holds them."""

    def times(part: Mapping[str, torch.Tensor], around: Mapping[str, torch.Tensor] | None) -> dict[str, torch.Tensor]:
        out = {}
        for name, value in part.items():
            base = None if around is None else around.get(name)
            if base is None:
                out[name] = (value * factor).to(value.dtype)
            else:
                base = base.to(device=value.device, dtype=value.dtype)
                out[name] = (base + (value - base) * factor).to(value.dtype)
        return out

    weights = update.kind == UpdateKind.WEIGHTS and reference is not None
    return dataclasses.replace(
        update,
        tensors=times(update.tensors, reference if weights else None),
        statistics=times(update.statistics, None),
    )
