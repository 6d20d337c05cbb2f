"""The three scenarios of gFedNTM sec. 3.1, each a federation run by the one entry point.

* ``federated``: one endpoint per organisation.
* ``centralized``: one endpoint, the trusted server, holding the pooled corpus; each step
  is L * batch_size pooled documents cut into L ghost batches (as many documents per step
  as federated, but drawn uniformly from the pool, whereas FedSGD takes an equal share
  from every organisation).
* ``non_collaborative``: a one-organisation federation per organisation.

All scenarios start from the same initial weights (same seed) and, without early stopping,
take the same number of optimizer steps and see the same number of documents in total.
With ``train.validation_fraction`` > 0 each organisation holds out that share of its
documents, every scenario validates on the held-out documents of its own organisations
and may stop earlier (``train.patience``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pandas as pd
import scipy.sparse as sp

from fedtopic_pipelines.core.compute import compute_threads, deterministic_algorithms
from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.federated.engine import InProcessEngine
from fedtopic_pipelines.core.federation import run_federation
from fedtopic_pipelines.core.model_store import TrainedModel
from fedtopic_pipelines.core.site import MemoryEndpoint, PooledEndpoint

logger = logging.getLogger(__name__)

POOLED = "server"


def train_scenarios(
    train_matrices: Mapping[str, sp.csr_matrix],
    config: TrainConfig,
    progress: bool = True,
    vocabulary=None,
) -> dict[str, TrainedModel]:
    """Train every configured scenario on the organisations' training matrices.

    ``vocabulary`` is the common vocabulary (a table with a ``term`` column) the matrices'
    columns follow; without it the columns are named by number. Returns models keyed
    ``federated``, ``centralized`` and ``local__<org>``.
    """
    orgs = list(train_matrices)
    widths = {int(m.shape[1]) for m in train_matrices.values()}
    if len(widths) != 1:
        raise ValueError(f"organisations' matrices disagree on the vocabulary size: {widths}")
    if vocabulary is None:
        vocabulary = pd.DataFrame({"term": [f"w{j}" for j in range(widths.pop())]})

    def run(name: str, scenario: str, endpoints, trained_on, ghosts=None) -> TrainedModel:
        engine = InProcessEngine(endpoints)
        names = [e.name for e in endpoints]
        result = run_federation(
            engine,
            names,
            config,
            vocabulary=vocabulary,
            name=name,
            scenario=scenario,
            trained_on=trained_on,
            ghosts=ghosts,
            progress=progress,
        )
        return result.model

    models: dict[str, TrainedModel] = {}
    with compute_threads(config.threads), deterministic_algorithms():
        _train_all(config, orgs, train_matrices, run, models)
    return models


def _train_all(config: TrainConfig, orgs, train_matrices, run, models: dict[str, TrainedModel]) -> None:
    if "federated" in config.scenarios:
        endpoints = [MemoryEndpoint(org, train_matrices[org]) for org in orgs]
        models["federated"] = run("federated", "federated", endpoints, orgs)
    if "centralized" in config.scenarios:
        pooled = PooledEndpoint(POOLED, {org: train_matrices[org] for org in orgs})
        models["centralized"] = run("centralized", "centralized", [pooled], orgs, ghosts=len(orgs))
    if "non_collaborative" in config.scenarios:
        for i, org in enumerate(orgs):
            name = f"local__{org}"
            models[name] = run(name, "non_collaborative", [_Indexed(org, train_matrices[org], i)], [org])


class _Indexed(MemoryEndpoint):
    """An organisation training alone keeps the seed stream of its index in the federation, so
    its local model draws the same batches and noise as its federated client."""

    def __init__(self, name: str, train, index: int) -> None:
        super().__init__(name, train)
        self.index = index

    def prepare(self, payload):
        return super().prepare({**payload, "index": self.index})
