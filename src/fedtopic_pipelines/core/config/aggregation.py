"""How updates are optimised and combined: ``train.optimizer`` and ``train.aggregation``."""

from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from fedtopic_pipelines.core.config.base import ConfigError, ConfigModel, PositiveFloat, PositiveInt

Unit = Annotated[float, Field(ge=0.0, lt=1.0)]


class OptimizerConfig(ConfigModel):
    """The optimizer that consumes gradients: at the server on the averaged gradient under
    FedSGD (gFedNTM eq. 3, with Adam), at each organisation during its local epochs under a
    weights rule (``train.aggregation``).

    ``sgd`` and ``adagrad`` serve every family (on sparse rows they update only the rows a
    round touched); ``sparse_adam`` (torch's lazy Adam) only the sparse-row family (Word2Vec).
    """

    block: ClassVar[str] = "train.optimizer"

    name: Literal["adam", "sgd", "adagrad", "sparse_adam"] = "adam"
    lr: PositiveFloat = 2e-3
    betas: tuple[Unit, Unit] = (0.99, 0.999)


class AggregationConfig(ConfigModel):
    """How the server combines the organisations' updates (``train.aggregation``).

    ``rule``: ``fedsgd`` (gFedNTM: every round one local mini-batch's gradient, averaged by
    batch size, and one step of ``train.optimizer`` at the server) or a weights rule
    (Reddi et al. 2021, "Adaptive Federated Optimization"; seed 004 Algorithm 1): each
    sampled organisation trains ``local_epochs`` epochs with ``train.optimizer`` as its local
    optimiser and sends its weights; the server averages them by document count (``fedavg``)
    or takes one FedAdagrad / FedYogi / FedAdam step on the pseudo-gradient (the average
    minus the current weights) with learning rate ``eta``, ``beta_1``, ``beta_2`` and
    ``tau``. null: the family's own (``fedsgd`` for the gradient and sparse-row families,
    ``fedavg`` for NMF). ``eta`` and ``beta_1`` null: Flower 1.42's defaults for the rule
    (eta 0.1 for FedAdagrad and FedAdam, 0.01 for FedYogi; beta_1 0.9, and 0 for FedAdagrad,
    whose Flower implementation has no momentum); docs/fedopt.md.

    ``local_steps`` E: instead of whole epochs, each sampled organisation takes E steps of
    ``train.batch_size`` documents per round (McMahan et al.'s FedAvg counts local work in
    steps too); a family whose local update runs whole epochs (NMF) refuses it.

    ``client_fraction`` C: each round samples floor(C K) of the K organisations with a
    generator seeded by ``train.seed`` and the round (seed 004 Algorithm 1, line 4-5).
    """

    block: ClassVar[str] = "train.aggregation"

    rule: Literal["fedsgd", "fedavg", "fedadagrad", "fedyogi", "fedadam"] | None = None
    client_fraction: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    local_epochs: PositiveInt = 1
    local_steps: PositiveInt | None = None
    eta: PositiveFloat | None = None
    beta_1: Unit | None = None
    beta_2: Unit = 0.99
    tau: PositiveFloat = 1e-3


def participants_per_round(organisations: int, fraction: float, where: str = "train") -> int:
    """floor(C K) organisations per round (seed 004 Algorithm 1, line 4); all of a one-organisation
    federation. Fewer than one is a configuration error naming ``where``'s parameter, not a silent
    max(., 1)."""
    if organisations <= 1 or fraction >= 1.0:
        return organisations
    m = math.floor(fraction * organisations + 1e-9)
    if m < 1:
        raise ConfigError(
            f"parameter '{where}.aggregation.client_fraction' is {fraction}: with {organisations} organisations "
            f"floor(C K) = 0 organisations would train per round; set it to at least 1/K = {1 / organisations:.3g}"
        )
    return m
