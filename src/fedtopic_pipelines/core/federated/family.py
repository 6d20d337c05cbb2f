"""The contract every federated model family fulfils, and what a local step returns.

A family is everything the engine needs to know about a kind of model, and nothing the
engine does itself: how to build the model from its config, which parameters are shared
(broadcast and aggregated) and which stay with the organisation, what a batch is and how
an organisation's batches are drawn, what one local computation sends (its
:class:`~fedtopic_pipelines.core.federated.messages.UpdateKind`), its loss terms, how it is
validated, which strategy aggregates it, and what evaluation reads from a trained model.
``core/families/`` holds the implementations and the registry that finds one by the
``family`` of ``train.model``; docs/architecture.md says how to add one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import pandas as pd
import torch
from torch import nn

from fedtopic_pipelines.core.capabilities import FamilyCapabilities
from fedtopic_pipelines.core.config import ConfigModel, TrainConfig
from fedtopic_pipelines.core.federated.messages import UpdateKind
from fedtopic_pipelines.core.federated.strategies import Strategy


@dataclass
class LocalStep:
    """One local computation's result, before it becomes an Update.

    ``tensors`` hold what the family's update kind carries (gradients, weights, row
    values or statistics) by shared-parameter name; ``row_indices`` the rows of sparse
    values; ``statistics`` auxiliary statistics reduced with the same weights (BatchNorm
    batch statistics); ``losses`` the named loss terms, ``loss`` being the total.
    """

    tensors: dict[str, torch.Tensor]
    num_examples: int
    losses: dict[str, float]
    statistics: dict[str, torch.Tensor] = field(default_factory=dict)
    row_indices: dict[str, torch.Tensor] = field(default_factory=dict)


class BatchStream(Protocol):
    """An organisation's seeded stream of batches, resumable from its state."""

    @property
    def max_examples(self) -> int: ...

    def state_dict(self) -> dict[str, torch.Tensor]: ...

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None: ...


class TopicModel(Protocol):
    """What evaluation reads from a trained topic model (ProdLDA, NMF, ...). A model whose family
    declares ``probabilistic`` also has ``word_distribution(bow)`` (completion perplexity)."""

    def topic_word(self) -> torch.Tensor: ...

    def doc_topic(self, bow: torch.Tensor) -> torch.Tensor: ...


class ModelFamily(Protocol):
    """A federated model family (see the module docstring). What it can do beyond this contract
    it declares: its :class:`~fedtopic_pipelines.core.capabilities.FamilyCapabilities`
    (``capabilities``, its config model's), and the optional protocols below that it
    implements (:class:`Streaming`, :class:`LocalRounds`, ...), which the engine checks with
    ``isinstance`` instead of probing for attributes."""

    name: str
    config_type: type[ConfigModel]
    update_kind: UpdateKind
    # Whether federated training equals centralized training on the concatenated batches
    # (the contract tests check it for families that claim it).
    exact_federation: bool
    # The named loss terms a local step reports; ``loss`` is the total. The server accepts
    # no other metric names.
    loss_names: tuple[str, ...]

    @property
    def capabilities(self) -> FamilyCapabilities:
        """What the family declares about itself (its config model's ``capabilities``)."""
        ...

    def create_model(self, vocab_size: int, config: TrainConfig, device: torch.device) -> nn.Module:
        """The model with its initial weights, drawn from ``config.seed`` (the same everywhere)."""
        ...

    def shared_names(self, model: nn.Module) -> list[str]:
        """Parameters that travel; the others stay with the organisation."""
        ...

    def validation_loss(self, model: nn.Module, data: Any, seed: int) -> tuple[float, int]:
        """Mean loss of the model (weights and running statistics as broadcast) on held-out
        ``data``, and how many documents that is."""
        ...

    def strategy(self, model: nn.Module, config: TrainConfig) -> Strategy:
        """The server strategy that owns the global ``model``."""
        ...

    def rows(self, data: Any) -> int:
        """How many documents ``data`` holds."""
        ...

    def select(self, data: Any, rows: Sequence[int]) -> Any:
        """The documents ``rows`` of ``data`` (hold-out splits, pooling)."""
        ...

    def concatenate(self, parts: Sequence[Any]) -> Any:
        """Several organisations' data as one (the centralized scenario's pool)."""
        ...

    def validate_data(self, name: str, data: Any, config: TrainConfig | None = None) -> None:
        """Raise naming the organisation if ``data`` cannot be trained on (too few documents,
        or, given ``config``, data the configured model cannot read)."""
        ...


@runtime_checkable
class Streaming(Protocol):
    """A family trained one mini-batch per round (FedSGD): its organisations draw seeded,
    resumable batch streams (ProdLDA, CombinedTM, ZeroShotTM, Word2Vec). Under a weights rule
    its local epochs are these steps repeated. A family without it computes every round itself
    (:class:`LocalRounds`)."""

    def stream(
        self, data: Any, config: TrainConfig, seed: int, device: torch.device, ghosts: int | None = None
    ) -> BatchStream:
        """An organisation's batch stream over its ``data``; with ``ghosts``, the centralized
        trainer's stream over the pooled data, that many ghost batches per step."""
        ...

    def local_step(self, model: nn.Module, stream: BatchStream) -> LocalStep:
        """One local computation at the model's current shared parameters."""
        ...

    def replay(self, model: nn.Module, stream: BatchStream, steps: int) -> None:
        """Advance ``stream`` (and every random draw a step makes) by ``steps`` without sending."""
        ...

    def max_update_examples(self, rows: int, config: TrainConfig, ghosts: int | None = None) -> int:
        """The most examples one update may claim from a client with ``rows`` documents."""
        ...

    def steps_per_epoch(self, rows: int, config: TrainConfig, ghosts: int | None = None) -> int:
        """Rounds in one pass over ``rows`` documents (stopping rules in epochs)."""
        ...


@runtime_checkable
class PooledNorm(Protocol):
    """A streaming family whose model can normalise over every organisation's batch of a step
    (``pooled_batch``): it computes one exchange of the step (``core/federated/pooled.py``) on
    its stream, from the broadcast ``state`` (parameters and the sums and derivatives exchanged
    so far). Every exchange but the last (``phase`` 2G, the gradient) leaves the stream where
    it was, so that each one sees the same documents and draws."""

    def pooled_step(
        self, model: nn.Module, stream: BatchStream, state: Mapping[str, torch.Tensor], phase: int, total: float
    ) -> LocalStep: ...


@runtime_checkable
class LocalRounds(Protocol):
    """A family whose round is its own local computation over all an organisation's documents
    (NMF's local epochs on W and H, PC-TD's E-step), seeded by the round."""

    def local_update(self, model: nn.Module, data: Any, config: TrainConfig, seed: int) -> LocalStep: ...


@runtime_checkable
class LocalState(Protocol):
    """A family with parameters that never leave an organisation (NMF's H, PC-TD's p(z|d)):
    drawn here, sized to its documents."""

    def init_local(self, model: nn.Module, data: Any, config: TrainConfig, seed: int) -> None: ...


@runtime_checkable
class WeightsStrategy(Protocol):
    """A family whose weights rule needs its own projection or checks (NMF: W >= 0)."""

    def weights_strategy(self, model: nn.Module, config: TrainConfig) -> Strategy: ...


@runtime_checkable
class PrivateSteps(Protocol):
    """A family with per-document gradients: sample-level DP-SGD (clip each, noise the sum)."""

    def private_step(
        self, model: nn.Module, stream: BatchStream, bound: float, std: float, generator: torch.Generator
    ) -> LocalStep: ...


@runtime_checkable
class ClientModel(Protocol):
    """A family whose client needs no tables of its own until the broadcast (Word2Vec)."""

    def create_client_model(self, vocab_size: int, config: TrainConfig, device: torch.device) -> nn.Module: ...


@runtime_checkable
class EpochExamples(Protocol):
    """A family whose epoch is counted in examples other than documents (Word2Vec's pairs):
    each organisation declares them when it prepares."""

    def epoch_examples(self, data: Any, config: TrainConfig) -> int: ...


@runtime_checkable
class ServerPreparation(Protocol):
    """A family whose server model reads what the consensus told the server: the vocabulary's
    summed counts and the organisations' declared document counts (ProdLDA's background
    log-frequency, PC-TD's similarity matrix over the terms, NMF's initial scale)."""

    def prepare_server_model(
        self, model: nn.Module, vocabulary: pd.DataFrame, rows: Mapping[str, int], config: TrainConfig
    ) -> None: ...
