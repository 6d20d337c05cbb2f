"""The three scenarios of gFedNTM sec. 3.1 on one engine.

* ``federated``: one :class:`GradientClient` per organisation, FedSGD server.
* ``centralized``: a trusted server holding the pooled corpus; one client whose batch is
  L * batch_size pooled documents cut into L ghost batches (as many documents per step as
  federated, but drawn uniformly from the pool, whereas FedSGD takes an equal share from
  every organisation).
* ``non_collaborative``: one single-client federation per organisation.

All scenarios start from the same initial weights (same seed) and, without early stopping,
take the same number of optimizer steps and see the same number of documents in total.
With validation matrices each scenario validates on the held-out documents of its own
organisations and may stop earlier (``TrainConfig.patience``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch

from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.federated.batching import BatchSource, GhostBatchSource, derive_seed
from fedtopic_pipelines.core.federated.client import GradientClient
from fedtopic_pipelines.core.federated.engine import InProcessEngine
from fedtopic_pipelines.core.federated.server import FederatedServer, RoundRecord, StoppingRule
from fedtopic_pipelines.core.federated.strategies import FedSGD
from fedtopic_pipelines.core.models.prodlda import ProdLDA

logger = logging.getLogger(__name__)


def resolve_device(name: str) -> torch.device:
    """``auto`` means CUDA when available, CPU otherwise."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("parameter 'train.device' is 'cuda' but no CUDA device is available")
    return torch.device(name)


@dataclass
class TrainedModel:
    """A trained model's weights plus how it was trained (picklable, CPU tensors)."""

    name: str
    scenario: str
    organisations: list[str]
    vocab_size: int
    config: TrainConfig
    state: dict[str, torch.Tensor]
    history: list[RoundRecord] = field(default_factory=list)
    stopped_early: bool = False
    best_round: int | None = None

    def to_model(self, device: torch.device | str = "cpu") -> ProdLDA:
        """Rebuild the ProdLDA module in eval mode."""
        model = ProdLDA(self.vocab_size, self.config.model)
        model.load_state_dict(self.state)
        return model.to(device).eval()


def _new_model(vocab_size: int, config: TrainConfig, device: torch.device) -> ProdLDA:
    return ProdLDA.create(vocab_size, config.model, config.seed).to(device)


def stopping_rule(config: TrainConfig, steps_per_epoch: int, validate: bool) -> StoppingRule:
    """The run's stopping rule; an epoch is ``steps_per_epoch`` optimizer steps."""
    max_rounds = config.max_steps if config.max_steps is not None else config.max_epochs * steps_per_epoch
    every = (config.validation_every or steps_per_epoch) if validate else None
    return StoppingRule(max_rounds, config.tolerance, every, config.patience)


def _fit(
    name: str,
    scenario: str,
    orgs: list[str],
    clients: list[GradientClient],
    vocab_size: int,
    config: TrainConfig,
    device: torch.device,
    progress: bool,
    stopping: StoppingRule,
) -> TrainedModel:
    global_model = _new_model(vocab_size, config, device)
    server = FederatedServer(FedSGD(global_model, config.optimizer), stopping, name=name)
    history = server.run(InProcessEngine(clients), progress=progress)
    logger.info(
        "%s: %d steps, final loss %.2f%s",
        name,
        len(history),
        history[-1].loss,
        "" if server.best_round is None else f", kept the weights of step {server.best_round + 1}",
    )
    state = {k: v.detach().cpu().clone() for k, v in global_model.state_dict().items()}
    return TrainedModel(
        name, scenario, orgs, vocab_size, config, state, history, server.stopped_early, server.best_round
    )


def _steps_per_epoch(n_rows: int, batch_rows: int) -> int:
    return max(1, math.ceil(n_rows / batch_rows))


def hold_out(
    matrices: Mapping[str, sp.csr_matrix], fraction: float, seed: int
) -> tuple[dict[str, sp.csr_matrix], dict[str, sp.csr_matrix]]:
    """Each organisation keeps ``fraction`` of its documents aside (seeded) for validation.

    Returns (training rows, held-out rows) per organisation; at least 2 are held out
    (BatchNorm statistics need 2 documents).
    """
    fit, held = {}, {}
    for i, (name, matrix) in enumerate(matrices.items()):
        fit[name], held[name] = hold_out_one(name, matrix, fraction, seed, i)
    return fit, held


def hold_out_one(
    name: str, matrix: sp.csr_matrix, fraction: float, seed: int, index: int
) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """:func:`hold_out` for the organisation at ``index`` alone (a site that holds only its own data)."""
    order = np.random.default_rng(derive_seed(seed, 3000, index)).permutation(matrix.shape[0])
    n_held = max(2, round(matrix.shape[0] * fraction))
    if matrix.shape[0] - n_held < 2:
        raise ValueError(
            f"organisation '{name}' has {matrix.shape[0]} training documents: too few to hold out "
            f"'train.validation_fraction' = {fraction} and keep 2 for training"
        )
    return matrix[np.sort(order[n_held:])], matrix[np.sort(order[:n_held])]


def organisation_client(
    name: str,
    index: int,
    matrix: sp.csr_matrix,
    validation: sp.csr_matrix | None,
    config: TrainConfig,
    device: torch.device,
) -> GradientClient:
    """The federated client of the organisation at ``index``: its seeds depend on the index only,
    so the in-process engine and a remote site build the same client."""
    source = BatchSource(matrix, config.batch_size, derive_seed(config.seed, index), device)
    model = _new_model(matrix.shape[1], config, device)
    return GradientClient(name, model, [source], validation, derive_seed(config.seed, 2000, index))


def federated_stopping(config: TrainConfig, largest: int, validate: bool) -> StoppingRule:
    """The federated scenario's stopping rule; an epoch is one of the largest organisation."""
    return stopping_rule(config, _steps_per_epoch(largest, config.batch_size), validate)


def new_global_model(vocab_size: int, config: TrainConfig, device: torch.device) -> ProdLDA:
    """The server's model before round 0 (the same initial weights in every scenario and engine)."""
    return _new_model(vocab_size, config, device)


def train_scenarios(
    train_matrices: Mapping[str, sp.csr_matrix],
    config: TrainConfig,
    progress: bool = True,
    validation_matrices: Mapping[str, sp.csr_matrix] | None = None,
) -> dict[str, TrainedModel]:
    """Train every configured scenario on the organisations' training matrices.

    With ``train.validation_fraction`` > 0 (or explicit ``validation_matrices``), every
    scenario validates on the held-out documents of the organisations it trains on and
    stops early (``train.patience``; gFedNTM sec. 4.1.2 holds out 25 %). Returns models
    keyed ``federated``, ``centralized`` and ``local__<org>``.
    """
    if validation_matrices is None and config.validation_fraction > 0:
        train_matrices, validation_matrices = hold_out(train_matrices, config.validation_fraction, config.seed)
    orgs = list(train_matrices)
    validate = validation_matrices is not None
    if validate and set(validation_matrices) != set(orgs):
        raise ValueError(
            f"validation documents are for organisations {sorted(validation_matrices)}, "
            f"training documents for {sorted(orgs)}"
        )
    vocab_sizes = {m.shape[1] for m in train_matrices.values()}
    if len(vocab_sizes) != 1:
        raise ValueError(f"organisations' matrices disagree on the vocabulary size: {vocab_sizes}")
    vocab_size = vocab_sizes.pop()
    for org, matrix in train_matrices.items():
        if matrix.shape[0] < 2:
            raise ValueError(
                f"organisation '{org}' has {matrix.shape[0]} training document(s) with words of the common "
                "vocabulary; training needs at least 2 (BatchNorm)"
            )
    device = resolve_device(config.device)
    bs = config.batch_size

    def client(cid: str, sources: list[BatchSource], validation: sp.csr_matrix | None, stream: int) -> GradientClient:
        return GradientClient(
            cid, _new_model(vocab_size, config, device), sources, validation, derive_seed(config.seed, 2000, stream)
        )

    def held_out(org: str) -> sp.csr_matrix | None:
        return validation_matrices[org] if validate else None

    largest = max(m.shape[0] for m in train_matrices.values())
    models: dict[str, TrainedModel] = {}
    if "federated" in config.scenarios:
        clients = [
            organisation_client(org, i, train_matrices[org], held_out(org), config, device)
            for i, org in enumerate(orgs)
        ]
        rule = federated_stopping(config, largest, validate)
        models["federated"] = _fit("federated", "federated", orgs, clients, vocab_size, config, device, progress, rule)
    if "centralized" in config.scenarios:
        pooled = sp.vstack([train_matrices[o] for o in orgs]).tocsr()
        ghosts = GhostBatchSource(pooled, bs, len(orgs), derive_seed(config.seed, 1000), device)
        pooled_validation = sp.vstack([validation_matrices[o] for o in orgs]).tocsr() if validate else None
        rule = stopping_rule(config, _steps_per_epoch(pooled.shape[0], bs * len(orgs)), validate)
        server_client = client("server", [ghosts], pooled_validation, 1000)
        models["centralized"] = _fit(
            "centralized", "centralized", orgs, [server_client], vocab_size, config, device, progress, rule
        )
    if "non_collaborative" in config.scenarios:
        for i, org in enumerate(orgs):
            name = f"local__{org}"
            rule = stopping_rule(config, _steps_per_epoch(train_matrices[org].shape[0], bs), validate)
            models[name] = _fit(
                name,
                "non_collaborative",
                [org],
                [organisation_client(org, i, train_matrices[org], held_out(org), config, device)],
                vocab_size,
                config,
                device,
                progress,
                rule,
            )
    return models
