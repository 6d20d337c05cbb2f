"""The messages exchanged between the server and the clients.

They hold only tensors, counts and scalar metrics: never documents or tokens. The Flower
app converts them to and from Flower records one to one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import torch


class UpdateKind(StrEnum):
    """What a client's update carries; each strategy accepts one kind."""

    GRADIENTS = "gradients"  # FedSGD: gradient of one local mini-batch (gFedNTM, Fed-W2V)
    WEIGHTS = "weights"  # FedAvg / FedOpt: weights after E local epochs (FedNMF)
    SPARSE_ROWS = "sparse_rows"  # row-indexed gradients: indices + values (Fed-W2V sec. 4.5.1)
    STATISTICS = "statistics"  # EM sufficient statistics (PC-TD)
    POOLED_NORM = "pooled_norm"  # pooled BatchNorm's sums and derivatives before a FedSGD step (pooled.py)
    METRICS = "metrics"  # evaluation only: scalar metrics on local validation documents, no tensors


# the client id of the one update a secure-aggregation round yields (the sum of the organisations'
# updates, flower/secagg.py); no organisation may bear this name (pipeline_registry reserves it)
SECURE_AGGREGATE = "secure_aggregate"
EVALUATE = "evaluate"  # Instruction.config["action"]: validate the broadcast state, send only metrics


@dataclass(frozen=True)
class Instruction:
    """Server -> client: the global state at ``round`` and what to compute on it."""

    round: int
    state: dict[str, torch.Tensor]
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Update:
    """Client -> server: one client's contribution to a round.

    ``tensors`` maps parameter names to gradients, weights, row values or statistics
    (per ``kind``); ``row_indices`` carries the row numbers for ``SPARSE_ROWS``;
    ``statistics`` holds auxiliary batch statistics averaged with the same weights
    (BatchNorm means and variances for ProdLDA); ``num_examples`` is the weight n_l of
    gFedNTM eq. 2. ``round`` is the round of the instruction it answers: the server refuses
    an update of another round (stale, or a replay of an earlier one) and one without it.
    """

    client_id: str
    kind: UpdateKind
    tensors: dict[str, torch.Tensor]
    num_examples: int
    row_indices: dict[str, torch.Tensor] = field(default_factory=dict)
    statistics: dict[str, torch.Tensor] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    round: int | None = None

    @property
    def nbytes(self) -> int:
        """The bytes of its tensors, row indices and statistics (what it costs on the wire,
        before any record framing)."""
        parts = (self.tensors, self.row_indices, self.statistics)
        return sum(int(t.numel()) * t.element_size() for part in parts for t in part.values())


@dataclass(frozen=True)
class Replies:
    """What an engine collected for one instruction: the updates and who failed, and why.
    ``contributors``: in a secure-aggregation round, the organisations summed into its one
    update with the example counts they declared (each is checked against its own capacity).
    ``seconds``: how long each organisation that answered took, as the engine can tell (Flower:
    from the messages on the SuperLink to its reply pulled; in process, where the organisations
    answer one after the other: its own computation); empty where it cannot (SecAgg+)."""

    updates: list[Update]
    failures: dict[str, str] = field(default_factory=dict)
    contributors: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
