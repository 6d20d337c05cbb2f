"""Nodes of ``train``: one node runs all rounds of every scenario through the core engine."""

from __future__ import annotations

from typing import Any

from fedtopic_pipelines.core.config import ConfigError, TrainConfig
from fedtopic_pipelines.core.training import TrainedModel, train_scenarios
from fedtopic_pipelines.core.vocab.consensus import BowCorpus


def parse_train_params(params: dict[str, Any]) -> tuple[TrainConfig, int]:
    """The ``train`` block as a TrainConfig, plus how often to log losses to MLflow."""
    params = dict(params)
    every = int(params.pop("mlflow_every", 10))
    if every < 1:
        raise ConfigError("parameter 'train.mlflow_every' must be >= 1")
    return TrainConfig.from_params(params), every


def train_models(
    params: dict[str, Any], organisations: list[str], **bows: BowCorpus
) -> tuple[dict[str, TrainedModel], dict[str, Any], dict[str, Any]]:
    """Train the configured scenarios on each organisation's training split.

    Returns the models, the full per-round history (JSON) and a thinned history for
    MLflow (every ``mlflow_every``-th round, to keep the tracking store fast; the catalog
    prefixes its keys with ``train.``).
    """
    config, every = parse_train_params(params)
    matrices = {org: bows[org].subset("train").matrix for org in organisations}
    models = train_scenarios(matrices, config)
    history: dict[str, Any] = {}
    mlflow: dict[str, list[dict[str, float]]] = {}
    for name, model in models.items():
        records = model.history
        history[name] = {
            "scenario": model.scenario,
            "organisations": model.organisations,
            "steps": len(records),
            "stopped_early": model.stopped_early,
            "best_step": None if model.best_round is None else model.best_round + 1,
            "validation_loss": {r.round: r.validation_loss for r in records if r.validation_loss is not None},
            "loss": [r.loss for r in records],
            "kl": [r.kl for r in records],
            "reconstruction": [r.reconstruction for r in records],
            "relative_change": [r.relative_change for r in records],
            "client_loss": {org: [r.client_loss.get(org) for r in records] for org in records[0].client_loss},
        }
        kept = [r for r in records if r.round % every == 0 or r is records[-1]]
        mlflow[f"{name}.loss"] = [{"value": r.loss, "step": r.round} for r in kept]
        if model.scenario == "federated":
            for org in organisations:
                mlflow[f"{name}.client.{org}.loss"] = [
                    {"value": r.client_loss[org], "step": r.round} for r in kept if org in r.client_loss
                ]
    return models, history, mlflow
