"""Nodes of ``pctd`` (seed 002): each organisation's word sequences, training, evaluation, figures.

Inside an organisation (namespace ``clients.<org>``) its preprocessed tokens become id
sequences of the common vocabulary, its training and held-out documents apart; only the
report's counts cross to the server. Training runs the federated scenario through the one
federation entry point (on Flower with ``engine: flower``); the centralized scenario and each
party alone train without noise (a party needs no privacy from itself). Every model, the
figures' sweeps' too, is scored inside each organisation (``evaluate_pctd_organisation``:
counts, perplexities and words scored leave it) and the server sums
(``experiments/pctd.py``).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from fedtopic_pipelines.core.config import from_mapping
from fedtopic_pipelines.core.families.word2vec import Sentences, concatenate, sentences_from_frames
from fedtopic_pipelines.core.model_store import TrainedModel
from fedtopic_pipelines.core.shards import iter_frames
from fedtopic_pipelines.core.training import train_scenarios
from fedtopic_pipelines.experiments.config import PCTDRunConfig
from fedtopic_pipelines.experiments.pctd import (
    Party,
    Scored,
    combine_scores,
    figure_rows,
    lda_topics,
    organisation_scores,
    privacy_of,
    train_figure_models,
    train_lda,
)
from fedtopic_pipelines.pipelines.train.nodes import run_scenarios, training_histories

logger = logging.getLogger(__name__)


def build_pctd_documents(tokens: Any, vocabulary: pd.DataFrame) -> tuple[Sentences, Sentences, dict[str, Any]]:
    """The organisation's training and held-out documents as ids of the common vocabulary
    (inside it), and a report of counts (documents kept, dropped for fewer than two words)."""
    terms, counts = vocabulary["term"].tolist(), vocabulary["frequency"].tolist()
    train, train_report = sentences_from_frames(iter_frames(tokens), terms, counts, "train")
    test, test_report = sentences_from_frames(iter_frames(tokens), terms, counts, "test")
    return train, test, {"train": train_report, "test": test_report}


def _run(params: dict[str, Any]) -> PCTDRunConfig:
    return from_mapping(PCTDRunConfig, params, "pctd")


def train_pctd(
    params: dict[str, Any],
    organisations: list[str],
    preprocess_params: dict[str, Any],
    consensus_params: dict[str, Any],
    common_vocabulary: pd.DataFrame,
    **documents: Sentences,
) -> tuple[dict[str, TrainedModel], dict[str, Any], dict[str, Any]]:
    """The federated scenario at the configured noise (on Flower with ``engine: flower``), then
    the centralized scenario and each party alone without noise, as configured in
    ``pctd.train.scenarios``, and each party alone with the federation's noise
    (``local_dp__<org>``, the paper's Fig. 3). Returns the models, their history and the MLflow series."""
    run = _run(params)
    config = run.train
    data = {org: documents[org] for org in organisations}
    models: dict[str, TrainedModel] = {}
    runs: dict[str, Any] = {}
    if "federated" in config.scenarios:
        federated = config.replace(scenarios=("federated",))
        models, runs = run_scenarios(
            federated, organisations, preprocess_params, consensus_params, common_vocabulary, data
        )
    rest = tuple(s for s in config.scenarios if s != "federated")
    if rest:
        quiet = config.replace(model=config.model.model_copy(update={"sigma": 0.0, "target_epsilon": None}))
        models.update(train_scenarios(data, quiet.replace(scenarios=rest), vocabulary=common_vocabulary))
    if "non_collaborative" in config.scenarios and "federated" in config.scenarios:
        # the paper's Fig. 3 compares each party under the same mechanism: alone, with the federation's noise
        noisy = train_scenarios(data, config.replace(scenarios=("non_collaborative",)), vocabulary=common_vocabulary)
        models.update({name.replace("local__", "local_dp__"): model for name, model in noisy.items()})
    history, mlflow = training_histories(models, runs, organisations, config.mlflow_every)  # epsilon series too
    for name, model in models.items():
        history[name]["privacy"] = privacy_of(model.config, len(model.history))
    return models, history, mlflow


def train_pctd_baselines(params: dict[str, Any], organisations: list[str], **documents: Sentences) -> dict[str, Any]:
    """gensim LDA on the pooled training documents (``lda_pooled``) and on each party's alone
    (``lda_local__<org>``): the baselines, named as such."""
    run = _run(params)
    topics = run.train.model.n_topics
    baselines = {"lda_pooled": train_lda(concatenate([documents[org] for org in organisations]), topics, run)}
    baselines.update({f"lda_local__{org}": train_lda(documents[org], topics, run) for org in organisations})
    return baselines


def _main_models(models: dict[str, TrainedModel], baselines: dict[str, Any]) -> list[Scored]:
    """The trained scenarios and the LDA baselines, in the order they are reported."""
    scored = [
        Scored(name, "pctd", m.state["phi"].numpy(), info=privacy_of(m.config, len(m.history)))
        for name, m in models.items()
    ]
    return scored + [Scored(name, "lda", lda_topics(lda), lda=lda) for name, lda in baselines.items()]


def train_pctd_sweeps(
    params: dict[str, Any], organisations: list[str], common_vocabulary: pd.DataFrame, **documents: Sentences
) -> list[Scored]:
    """Figs. 2 and 4's models, trained in the in-process simulation (and their pooled baselines)."""
    return train_figure_models(_run(params), {org: documents[org] for org in organisations}, common_vocabulary)


def evaluate_pctd_organisation(
    train: Sentences,
    test: Sentences,
    models: dict[str, TrainedModel],
    baselines: dict[str, Any],
    figure_models: list[Scored],
    common_vocabulary: pd.DataFrame,
    params: dict[str, Any],
    organisations: list[str],
    organisation: str,
) -> dict[str, Any]:
    """Inside organisation ``organisation``: every model's scores on its own documents
    (co-occurrence counts of the top words in its training documents, completion perplexity on
    its held-out ones, words scored). Only these numbers cross to the server."""
    run = _run(params)
    terms = common_vocabulary["term"].tolist()
    party, index = Party(train, test), organisations.index(organisation)
    return {
        "models": organisation_scores(_main_models(models, baselines), party, index, terms, run),
        "figures": organisation_scores(figure_models, party, index, terms, run),
    }


def evaluate_pctd(
    models: dict[str, TrainedModel],
    baselines: dict[str, Any],
    params: dict[str, Any],
    organisations: list[str],
    common_vocabulary: pd.DataFrame,
    **evaluations: dict[str, Any],
) -> tuple[dict[str, Any], Any, dict[str, Any]]:
    """Every trained scenario and gensim LDA (pooled, and each party alone) scored from the
    organisations' sums; (epsilon, delta) by RDP and PLD for every PC-TD model. Returns
    ``metrics.json``, Fig. 3 (each party alone vs federated) and the MLflow metrics. ``perplexity``
    is every model's on every party's held-out documents (the pooled view the figure compares); a
    lone party's model also has ``own_perplexity``, on its own party's alone."""
    run = _run(params)
    scored = _main_models(models, baselines)
    sent = {org: evaluations[org]["models"] for org in organisations}
    combine_scores(scored, sent, common_vocabulary["term"].tolist(), run)
    results = {m.name: {**m.scores, **m.info} for m in scored}
    for name, values in results.items():  # a lone party's model on its own held-out documents, named beside
        party = name.rpartition("__")[2]
        if "__" in name and party in organisations:
            values["own_perplexity"] = values.get(f"perplexity.{party}")
    claims = _claims(results, organisations)
    topics = run.train.model.n_topics
    metrics = {"models": results, "claims": claims, "organisations": organisations, "topics": topics}
    mlflow = {
        f"{name}.{key}": [{"value": float(value), "step": 0}]
        for name, values in results.items()
        for key, value in values.items()
        if isinstance(value, int | float) and value is not None and math.isfinite(float(value))
    }
    return metrics, _figure_parties(results, organisations), mlflow


def _claims(results: dict[str, dict[str, Any]], organisations: list[str]) -> dict[str, Any]:
    """Fig. 3's claim checked: the federated model's pooled perplexity below every party's own,
    each party alone with the federation's noise (the paper's comparison) and without any."""
    if "federated" not in results:
        return {}
    federated = results["federated"]["perplexity"]
    claims: dict[str, Any] = {"federated_perplexity": federated}
    for prefix, label in (("local_dp__", "same_noise"), ("local__", "no_noise")):
        alone = {org: results[f"{prefix}{org}"]["perplexity"] for org in organisations if f"{prefix}{org}" in results}
        claims[f"local_perplexity_{label}"] = alone
        claims[f"federated_below_every_party_{label}"] = bool(alone) and all(federated < v for v in alone.values())
    return claims


def _figure_parties(results: dict[str, dict[str, Any]], organisations: list[str]):
    figure, axis = plt.subplots(figsize=(6, 3.5))
    colours = {"local_dp__": "#d62728", "local__": "#999999"}
    names = [f"{p}{org}" for p in colours for org in organisations if f"{p}{org}" in results]
    fixed = {"federated": "#1f77b4", "centralized": "#2ca02c", "lda_pooled": "#ff7f0e"}
    names += [n for n in fixed if n in results]
    values = [results[n]["perplexity"] for n in names]
    colour = [fixed.get(n) or next(c for p, c in colours.items() if n.startswith(p)) for n in names]
    axis.bar(range(len(names)), values, color=colour)
    axis.set_xticks(
        range(len(names)),
        [n.replace("local_dp__", "alone+noise ").replace("local__", "alone ") for n in names],
        rotation=30,
        ha="right",
    )
    axis.set_ylabel("held-out perplexity (pooled)")
    axis.set_title("Fig. 3: each party alone vs federated PC-TD")
    figure.tight_layout()
    return figure


def pctd_figures(
    figure_models: list[Scored],
    params: dict[str, Any],
    organisations: list[str],
    common_vocabulary: pd.DataFrame,
    **evaluations: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Figs. 2 and 4 from the organisations' sums: the sweeps' numbers, their PNGs and the MLflow
    series (perplexity against iterations for each sigma, stepped by iteration)."""
    sent = {org: evaluations[org]["figures"] for org in organisations}
    combine_scores(figure_models, sent, common_vocabulary["term"].tolist(), _run(params))
    data = figure_rows(figure_models)
    figures = {"fig2_perplexity_epsilon": _figure_curves(data["curves"]), "fig4_coherence_topics": _figure_topics(data)}
    mlflow = {}
    for point in data["curves"]:
        key = f"sigma_{point['sigma']:g}"
        mlflow.setdefault(f"{key}.perplexity", []).append({"value": point["perplexity"], "step": point["iterations"]})
        if point["epsilon_rdp"] is not None:
            mlflow.setdefault(f"{key}.epsilon_rdp", []).append(
                {"value": point["epsilon_rdp"], "step": point["iterations"]}
            )
    return data, figures, mlflow


def _figure_curves(curves: list[dict[str, Any]]):
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    frame = pd.DataFrame(curves)
    for sigma, part in frame.groupby("sigma"):
        epsilon = part["epsilon_rdp"].iloc[-1]
        label = f"sigma {sigma:g} (no noise)" if pd.isna(epsilon) else f"sigma {sigma:g} (eps {epsilon:.3g})"
        left.plot(part["iterations"], part["perplexity"], marker="o", label=label)
    left.set_xlabel("EM iterations")
    left.set_ylabel("held-out perplexity")
    left.legend(fontsize=7)
    final = frame.loc[frame.groupby("sigma")["iterations"].idxmax()]
    noisy = final[final["epsilon_rdp"].notna()]
    right.plot(noisy["epsilon_rdp"], noisy["perplexity"], marker="o", label="federated, RDP epsilon")
    right.plot(noisy["epsilon_pld"], noisy["perplexity"], marker="x", linestyle="--", label="federated, PLD epsilon")
    exact = final[final["epsilon_rdp"].isna()]
    for _, row in exact.iterrows():
        right.axhline(row["perplexity"], color="grey", linestyle=":", label="no noise")
    right.set_xscale("log")
    right.set_xlabel("epsilon after all iterations (delta 1e-5)")
    right.set_ylabel("held-out perplexity")
    right.legend(fontsize=7)
    figure.suptitle("Fig. 2: perplexity against iterations and epsilon")
    figure.tight_layout()
    return figure


def _figure_topics(data: dict[str, Any]):
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    frame = pd.DataFrame(data["topics"])
    for model, part in frame.groupby("model"):
        left.plot(part["topics"], part["umass"], marker="o", label=model)
        right.plot(part["topics"], part["npmi"], marker="o", label=model)
    left.set_xlabel("topics")
    left.set_ylabel("UMass (gensim)")
    right.set_xlabel("topics")
    right.set_ylabel("NPMI")
    left.legend(fontsize=7)
    figure.suptitle("Fig. 4: coherence against the number of topics")
    figure.tight_layout()
    return figure
