"""Nodes of ``train``: one node runs all rounds of every scenario through the core engine."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from fedtopic_pipelines.core.config import ConfigError, FlowerConfig, TrainConfig, choice, from_mapping
from fedtopic_pipelines.core.training import TrainedModel, train_scenarios
from fedtopic_pipelines.core.vocab.consensus import BowCorpus

ENGINES = ("in_process", "flower")
KEDRO_SIDE_KEYS = ("mlflow_every", "engine", "flower")  # the rest of the train block is the TrainConfig


def core_train_block(params: dict[str, Any]) -> dict[str, Any]:
    """The ``train`` block without its Kedro-side keys: what a Flower job carries to the nodes."""
    return {k: v for k, v in params.items() if k not in KEDRO_SIDE_KEYS}


@dataclass(frozen=True)
class TrainSettings:
    """The ``train`` block: the TrainConfig plus the Kedro-side settings around it."""

    config: TrainConfig
    mlflow_every: int
    engine: str
    flower: FlowerConfig
    federation_dir: str
    run_timeout_s: float


def parse_train_params(params: dict[str, Any]) -> TrainSettings:
    """The ``train`` block: how to train, how often to log losses to MLflow, and on which engine."""
    params = dict(params)
    every = int(params.pop("mlflow_every", 10))
    if every < 1:
        raise ConfigError("parameter 'train.mlflow_every' must be >= 1")
    engine = str(params.pop("engine", "in_process"))
    choice("train.engine", engine, ENGINES)
    flower = dict(params.pop("flower", None) or {})
    federation_dir = str(flower.pop("federation_dir", ".federation"))
    run_timeout_s = float(flower.pop("run_timeout_s", 3600))
    if run_timeout_s <= 0:
        raise ConfigError("parameter 'train.flower.run_timeout_s' must be > 0")
    return TrainSettings(
        TrainConfig.from_params(params),
        every,
        engine,
        from_mapping(FlowerConfig, flower, "train.flower"),
        federation_dir,
        run_timeout_s,
    )


def train_models(
    params: dict[str, Any],
    organisations: list[str],
    preprocess_params: dict[str, Any],
    consensus_params: dict[str, Any],
    common_vocabulary: pd.DataFrame,
    **bows: BowCorpus,
) -> tuple[dict[str, TrainedModel], dict[str, Any], dict[str, Any]]:
    """Train the configured scenarios on each organisation's training split.

    With ``train.engine: flower`` the federated scenario runs on the Flower federation of
    ``train.flower.federation_dir`` (``make federation-up``), each node on its own data;
    the other scenarios, which need the pooled or a single organisation's data, run in
    process. Returns the models, the full per-round history (JSON) and a thinned history for
    MLflow (every ``mlflow_every``-th round, to keep the tracking store fast; the catalog
    prefixes its keys with ``train.``), with the rounds an organisation was left out of.
    """
    settings = parse_train_params(params)
    config, every = settings.config, settings.mlflow_every
    matrices = {org: bows[org].subset("train").matrix for org in organisations}
    on_flower = settings.engine == "flower" and "federated" in config.scenarios
    rest = tuple(s for s in config.scenarios if not (on_flower and s == "federated"))
    models: dict[str, TrainedModel] = {}
    runs: dict[str, Any] = {}
    if on_flower:
        from fedtopic_pipelines.flower.federation import Job
        from fedtopic_pipelines.flower.submit import train_on_flower

        train_block = core_train_block(params)
        job = Job(list(organisations), preprocess_params, consensus_params, train_block, settings.flower)
        models["federated"], runs["federated"] = train_on_flower(
            job, common_vocabulary["term"].tolist(), Path(settings.federation_dir), settings.run_timeout_s
        )
    if rest:
        models.update(train_scenarios(matrices, dataclasses.replace(config, scenarios=rest)))
    history, mlflow = training_histories(models, runs, organisations, every)
    return models, history, mlflow


def training_histories(
    models: dict[str, TrainedModel], runs: dict[str, Any], organisations: list[str], every: int
) -> tuple[dict[str, Any], dict[str, list[dict[str, float]]]]:
    """Each model's full history (JSON) and the series for MLflow: every ``every``-th round's
    losses, and every round an organisation was left out of (failed or rejected update)."""
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
            "left_out": {r.round: {**r.failed, **r.rejected} for r in records if r.failed or r.rejected},
            "engine": "flower" if name in runs else "in_process",
            **({"flower_run": runs[name]} if name in runs else {}),
        }
        kept = [r for r in records if r.round % every == 0 or r is records[-1]]
        mlflow[f"{name}.loss"] = [{"value": r.loss, "step": r.round} for r in kept]
        left_out = [r for r in records if r.failed or r.rejected]
        if left_out:  # every such round, not thinned: each is an event worth seeing
            mlflow[f"{name}.failed_updates"] = [{"value": len(r.failed), "step": r.round} for r in left_out]
            mlflow[f"{name}.rejected_updates"] = [{"value": len(r.rejected), "step": r.round} for r in left_out]
        if model.scenario == "federated":
            for org in organisations:
                mlflow[f"{name}.client.{org}.loss"] = [
                    {"value": r.client_loss[org], "step": r.round} for r in kept if org in r.client_loss
                ]
    return history, mlflow
