"""The three scenarios of gFedNTM sec. 3.1 on one engine.

* ``federated``: one :class:`GradientClient` per organisation, FedSGD server.
* ``centralized``: a trusted server holding the pooled corpus; one client whose batch is
  L * batch_size pooled documents cut into L ghost batches (as many documents per step as
  federated, but drawn uniformly from the pool, whereas FedSGD takes an equal share from
  every organisation).
* ``non_collaborative``: one single-client federation per organisation.

All scenarios start from the same initial weights (same seed), take the same number of
optimizer steps and see the same number of documents in total.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

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

    def to_model(self, device: torch.device | str = "cpu") -> ProdLDA:
        """Rebuild the ProdLDA module in eval mode."""
        model = ProdLDA(self.vocab_size, self.config.model)
        model.load_state_dict(self.state)
        return model.to(device).eval()


def _new_model(vocab_size: int, config: TrainConfig, device: torch.device) -> ProdLDA:
    return ProdLDA.create(vocab_size, config.model, config.seed).to(device)


def _fit(
    name: str,
    scenario: str,
    orgs: list[str],
    clients: list[GradientClient],
    vocab_size: int,
    config: TrainConfig,
    device: torch.device,
    progress: bool,
) -> TrainedModel:
    global_model = _new_model(vocab_size, config, device)
    server = FederatedServer(
        FedSGD(global_model, config.optimizer), StoppingRule(config.max_steps, config.tolerance), name=name
    )
    history = server.run(InProcessEngine(clients), progress=progress)
    logger.info("%s: %d steps, final loss %.2f", name, len(history), history[-1].loss)
    state = {k: v.detach().cpu().clone() for k, v in global_model.state_dict().items()}
    return TrainedModel(name, scenario, orgs, vocab_size, config, state, history, server.stopped_early)


def train_scenarios(
    train_matrices: Mapping[str, sp.csr_matrix], config: TrainConfig, progress: bool = True
) -> dict[str, TrainedModel]:
    """Train every configured scenario on the organisations' training matrices.

    Returns models keyed ``federated``, ``centralized`` and ``local__<org>``.
    """
    orgs = list(train_matrices)
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

    def source(matrix: sp.csr_matrix, stream: int) -> BatchSource:
        return BatchSource(matrix, bs, derive_seed(config.seed, stream), device)

    def client(cid: str, sources: list[BatchSource]) -> GradientClient:
        return GradientClient(cid, _new_model(vocab_size, config, device), sources)

    models: dict[str, TrainedModel] = {}
    if "federated" in config.scenarios:
        clients = [client(org, [source(train_matrices[org], i)]) for i, org in enumerate(orgs)]
        models["federated"] = _fit("federated", "federated", orgs, clients, vocab_size, config, device, progress)
    if "centralized" in config.scenarios:
        pooled = sp.vstack([train_matrices[o] for o in orgs]).tocsr()
        ghosts = GhostBatchSource(pooled, bs, len(orgs), derive_seed(config.seed, 1000), device)
        models["centralized"] = _fit(
            "centralized", "centralized", orgs, [client("server", [ghosts])], vocab_size, config, device, progress
        )
    if "non_collaborative" in config.scenarios:
        for i, org in enumerate(orgs):
            name = f"local__{org}"
            models[name] = _fit(
                name,
                "non_collaborative",
                [org],
                [client(org, [source(train_matrices[org], i)])],
                vocab_size,
                config,
                device,
                progress,
            )
    return models
