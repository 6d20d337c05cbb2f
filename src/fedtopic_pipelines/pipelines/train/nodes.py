"""Nodes of ``train``: one node runs all rounds of every scenario through the core entry point."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from fedtopic_pipelines.core.capabilities import DataKind
from fedtopic_pipelines.core.config import ConfigError, TrainConfig
from fedtopic_pipelines.core.families.ctm import DocumentEmbeddings, contextual_split
from fedtopic_pipelines.core.federated.participation import participation, participation_series
from fedtopic_pipelines.core.lineage import require_same, vocabulary_fingerprint
from fedtopic_pipelines.core.model_store import TrainedModel
from fedtopic_pipelines.core.training import train_scenarios
from fedtopic_pipelines.core.vocab.consensus import BowCorpus
from fedtopic_pipelines.parameters import with_privacy

EMBEDDINGS = "embeddings__"  # keyword prefix of an organisation's embeddings (its bag of words: its name)


def train_models(
    params: dict[str, Any],
    organisations: list[str],
    preprocess_params: dict[str, Any],
    consensus_params: dict[str, Any],
    common_vocabulary: pd.DataFrame,
    privacy: dict[str, Any] | None = None,
    **inputs: BowCorpus | DocumentEmbeddings,
) -> tuple[dict[str, TrainedModel], dict[str, Any], dict[str, Any]]:
    """Train the configured scenarios on each organisation's training split (``inputs``: each
    organisation's bag of words by its name, and its sentence embeddings by ``embeddings__<org>``,
    read only by a contextual family).

    With ``train.engine: flower`` the federated scenario runs on the Flower federation of
    ``train.flower.federation_dir`` (``make federation-up``), each node on its own data, by
    ``train.flower.schedule`` (local steps, or exactly as in process);
    the other scenarios, which need the pooled or a single organisation's data, run in
    process. Returns the models, the full per-round history (JSON) and a thinned history for
    MLflow (every ``mlflow_every``-th round, to keep the tracking store fast; the catalog
    prefixes its keys with ``train.``), with the rounds an organisation was left out of.
    ``privacy`` (the top-level block) applies to the federated scenario (docs/privacy.md).
    """
    config = with_privacy(TrainConfig.from_params(params), privacy)
    elsewhere = config.model.capabilities.trained_elsewhere()
    if elsewhere:
        family = config.model.family
        raise ConfigError(
            f"parameter 'train.model.family' is {family!r}, which the default chain does not train: {elsewhere}"
        )
    matrices = training_matrices(config, organisations, common_vocabulary, inputs)
    return train_recorded(config, organisations, preprocess_params, consensus_params, common_vocabulary, matrices)


def train_recorded(
    config: TrainConfig,
    organisations: list[str],
    preprocess_params: dict[str, Any],
    consensus_params: dict[str, Any],
    common_vocabulary: pd.DataFrame,
    data: dict[str, Any],
) -> tuple[dict[str, TrainedModel], dict[str, Any], dict[str, Any]]:
    """Every configured scenario (:func:`run_scenarios`), with the history and the MLflow series
    (:func:`training_histories`): the body every training node shares."""
    models, runs = run_scenarios(config, organisations, preprocess_params, consensus_params, common_vocabulary, data)
    history, mlflow = training_histories(models, runs, organisations, config.mlflow_every)
    return models, history, mlflow


def run_scenarios(
    config: TrainConfig,
    organisations: list[str],
    preprocess_params: dict[str, Any],
    consensus_params: dict[str, Any],
    common_vocabulary: pd.DataFrame,
    data: dict[str, Any],
) -> tuple[dict[str, TrainedModel], dict[str, Any]]:
    """Every configured scenario on the organisations' ``data``; with ``engine: flower`` the
    federated one on the Flower federation (its nodes read their own data), the others in
    process. Returns the models and the Flower run facts by model name."""
    on_flower = config.engine == "flower" and "federated" in config.scenarios
    rest = tuple(s for s in config.scenarios if not (on_flower and s == "federated"))
    models: dict[str, TrainedModel] = {}
    runs: dict[str, Any] = {}
    if on_flower:
        from pathlib import Path

        from fedtopic_pipelines.flower.federation import Job
        from fedtopic_pipelines.flower.submit import train_on_flower

        # the ServerApp trains it by train.flower.schedule (TrainConfig.flower_training)
        job = Job(list(organisations), preprocess_params, consensus_params, config.to_params())
        models["federated"], runs["federated"] = train_on_flower(
            job, common_vocabulary["term"].tolist(), Path(config.flower.federation_dir), config.flower.run_timeout_s
        )
    if rest:
        models.update(train_scenarios(data, config.replace(scenarios=rest), vocabulary=common_vocabulary))
    return models, runs


def training_matrices(
    config: TrainConfig, organisations: list[str], common_vocabulary: pd.DataFrame, inputs: dict[str, Any]
) -> dict[str, Any]:
    """Each organisation's training split: its bag of words (``inputs[org]``), with its sentence
    embeddings (``inputs["embeddings__" + org]``) for a contextual family; both checked to be
    of the current vocabulary and of the same documents."""
    embeddings = {key.removeprefix(EMBEDDINGS): value for key, value in inputs.items() if key.startswith(EMBEDDINGS)}
    bows = {key: value for key, value in inputs.items() if not key.startswith(EMBEDDINGS)}
    require_same(  # bags of words of another run's vocabulary stop here, not at an index
        "vocabulary",
        vocabulary_fingerprint(common_vocabulary["term"].tolist()),
        {f"clients.{org}.bow": bows[org].vocabulary for org in organisations},
        "Run `kedro run --pipelines=vocab_consensus` again: it rebuilds the vocabulary and every bag of words.",
        built_from="vectorised with",
    )
    if config.model.capabilities.data_kind == DataKind.CONTEXTUAL:  # bag of words and embeddings, row for row
        return {
            org: contextual_split(bows[org], embeddings[org], "train", f"clients.{org}.embeddings")
            for org in organisations
        }
    return {org: bows[org].subset("train").matrix for org in organisations}


def _json_number(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def training_histories(
    models: dict[str, TrainedModel], runs: dict[str, Any], organisations: list[str], every: int
) -> tuple[dict[str, Any], dict[str, list[dict[str, float]]]]:
    """Each model's full history (JSON) and the series for MLflow: every ``every``-th round's
    loss, every round an organisation was left out of (failed or rejected update), and under
    ``privacy.dp`` the epsilon spent where the server recorded it (every 100th and the last round).

    Every named metric the family's clients report (ProdLDA: loss, kl, reconstruction) and
    the strategy's convergence measure, when computed, get a series of their own. A federated
    model's history says who took part and who was left out, when and why (``participation``),
    and MLflow gets each organisation's counters (``<model>.participation.<org>.left_out``). The
    wall-clock seconds of each round and of each organisation's answer (``round_seconds``,
    ``client.<org>.answer_seconds``) differ from run to run, unlike everything else here.
    """
    history: dict[str, Any] = {}
    mlflow: dict[str, list[dict[str, float]]] = {}
    for name, model in models.items():
        records, federated = model.history, model.scenario == "federated"  # baselines have one client
        metric_names = list(dict.fromkeys(m for r in records for m in r.metrics))
        history[name] = {
            "scenario": model.scenario,
            "family": model.config.model.family,
            "organisations": model.organisations,
            "steps": len(records),
            "stopped_early": model.stopped_early,
            "best_step": None if model.best_round is None else model.best_round + 1,
            "validation_loss": {r.round: r.validation_loss for r in records if r.validation_loss is not None},
            **{m: [_json_number(r.metrics.get(m)) for r in records] for m in metric_names},
            "client_loss": {
                org: [_json_number(r.client_loss.get(org)) for r in records]
                for org in dict.fromkeys(o for r in records for o in r.client_loss)
            },
            **({"participation": participation(records, model.organisations)} if federated else {}),
            "round_seconds": [_json_number(r.seconds) for r in records],  # wall clock: differs run to run
            "client_seconds": {
                org: [_json_number(r.client_seconds.get(org)) for r in records]
                for org in dict.fromkeys(o for r in records for o in r.client_seconds)
            },
            "engine": "flower" if name in runs else "in_process",
            **({"flower_run": runs[name]} if name in runs else {}),
        }
        kept = [r for r in records if r.round % every == 0 or r is records[-1]]
        mlflow[f"{name}.loss"] = [{"value": r.loss, "step": r.round} for r in kept]
        if timed := [{"value": r.seconds, "step": r.round} for r in kept if math.isfinite(r.seconds)]:
            mlflow[f"{name}.round_seconds"] = timed
        for key in ("epsilon_rdp", "epsilon_pld"):  # privacy.dp: the privacy spent, where the server recorded it
            spent = [{"value": r.metrics[key], "step": r.round} for r in records if key in r.metrics]
            if spent:
                mlflow[f"{name}.{key}"] = spent
        left_out = [r for r in records if r.failed or r.rejected]
        if left_out:  # every such round, not thinned: each is an event worth seeing
            mlflow[f"{name}.failed_updates"] = [{"value": len(r.failed), "step": r.round} for r in left_out]
            mlflow[f"{name}.rejected_updates"] = [{"value": len(r.rejected), "step": r.round} for r in left_out]
        if federated:
            mlflow.update(
                {f"{name}.{key}": points for key, points in participation_series(records, model.organisations).items()}
            )
            for org in organisations:
                mlflow[f"{name}.client.{org}.loss"] = [
                    {"value": r.client_loss[org], "step": r.round} for r in kept if org in r.client_loss
                ]
                answers = [{"value": r.client_seconds[org], "step": r.round} for r in kept if org in r.client_seconds]
                if answers:
                    mlflow[f"{name}.client.{org}.answer_seconds"] = answers
    return history, mlflow
