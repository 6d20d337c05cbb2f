"""Nodes of ``evaluate``.

Each organisation evaluates every model on its own texts and held-out documents and sends
back only scores; the server adds what needs no private data (topics, diversity) and
writes the comparison.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from fedtopic_pipelines.core.config import EvaluateConfig, from_mapping
from fedtopic_pipelines.core.ingest.common import ShardedTable, as_frame
from fedtopic_pipelines.core.metrics.classification import svm_macro_f1
from fedtopic_pipelines.core.metrics.coherence import coherence_by_model
from fedtopic_pipelines.core.metrics.perplexity import completion_perplexity
from fedtopic_pipelines.core.metrics.topics import top_words, topic_diversity
from fedtopic_pipelines.core.model_store import TrainedModel
from fedtopic_pipelines.core.vocab.consensus import BowCorpus

logger = logging.getLogger(__name__)

METRICS = ("c_npmi", "c_v", "topic_coverage", "perplexity", "macro_f1")
# Ranked words per topic handed to coherence, so words an organisation never wrote can be skipped.
RANKED_WORDS = 200


def model_topics(models: dict[str, TrainedModel], vocabulary: pd.DataFrame, n: int) -> dict[str, list[list[str]]]:
    """Top-``n`` words of every topic of every model."""
    terms = vocabulary["term"].tolist()
    return {name: top_words(m.to_model().topic_word().numpy(), terms, n) for name, m in models.items()}


def evaluate_organisation(
    models: dict[str, TrainedModel],
    vocabulary: pd.DataFrame,
    tokens: pd.DataFrame | ShardedTable,
    bow: BowCorpus,
    params: dict[str, Any],
) -> dict[str, Any]:
    """Score every model on this organisation: coherence on its texts, perplexity and
    SVM macro-F1 on its held-out documents.

    Coherence needs the organisation's texts as one reference corpus, so the token
    shards are read whole here (only the organisation, tokens and label columns).
    """
    config = from_mapping(EvaluateConfig, params, "evaluate")
    tokens = as_frame(tokens)
    org = str(tokens["organisation"].iloc[0])
    ranked = model_topics(models, vocabulary, RANKED_WORDS)
    texts = [t.split() for t in tokens["tokens"]]
    scores: dict[str, dict[str, float | None]] = {name: {} for name in models}
    for measure in tqdm(config.coherence_measures, desc=f"coherence {org}", leave=False):
        for name, result in coherence_by_model(ranked, texts, measure, config.top_words).items():
            scores[name][measure] = result.mean if math.isfinite(result.mean) else None  # JSON has no NaN
            scores[name][f"{measure}_undefined_topics"] = result.undefined_topics
            scores[name]["topic_coverage"] = result.coverage
    test = bow.subset("test")
    if len(test) == 0:
        logger.warning("organisation %s has no held-out documents: perplexity and F1 left out", org)
    dense = torch.from_numpy(test.matrix.toarray()) if len(test) else None
    for name, trained in tqdm(models.items(), desc=f"perplexity and F1 {org}", leave=False):
        model = trained.to_model()
        scores[name]["perplexity"] = completion_perplexity(model, test.matrix, config.seed) if len(test) else None
        if dense is not None:
            theta = model.doc_topic(dense).numpy()
            scores[name]["macro_f1"] = svm_macro_f1(theta, test.labels, config.svm_test_size, config.svm_c, config.seed)
        else:
            scores[name]["macro_f1"] = None
    return {"organisation": org, "n_test_documents": len(test), "n_texts": len(texts), "models": scores}


def _mean(values: list[float | None]) -> float | None:
    clean = [v for v in values if v is not None and not math.isnan(v)]
    return float(np.mean(clean)) if clean else None


def summarise(
    models: dict[str, TrainedModel],
    vocabulary: pd.DataFrame,
    organisations: list[str],
    params: dict[str, Any],
    **evaluations: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any], plt.Figure, dict[str, Any]]:
    """Merge the organisations' scores into metrics.json, the topic lists, a figure and MLflow metrics.

    Scenario summaries average over organisations; for ``non_collaborative`` each
    organisation's own model is scored on its own data (``non_collaborative``) and on
    the other organisations' data (``non_collaborative_on_others``).
    """
    config = from_mapping(EvaluateConfig, params, "evaluate")
    topics = model_topics(models, vocabulary, config.top_words)
    diversity_topics = model_topics(models, vocabulary, config.diversity_top_words)
    per_model: dict[str, Any] = {}
    for name, trained in models.items():
        by_org = {org: evaluations[org]["models"][name] for org in organisations}
        per_model[name] = {
            "scenario": trained.scenario,
            "trained_on": trained.organisations,
            "steps": len(trained.history),
            "topic_diversity": topic_diversity(diversity_topics[name]),
            "organisations": by_org,
            "mean": {m: _mean([by_org[o].get(m) for o in organisations]) for m in METRICS},
        }
    scenarios: dict[str, Any] = {}
    for name in ("federated", "centralized"):
        if name in per_model:
            scenarios[name] = {**per_model[name]["mean"], "topic_diversity": per_model[name]["topic_diversity"]}
    local = {org: per_model.get(f"local__{org}") for org in organisations}
    if all(local.values()):
        own = {m: _mean([local[o]["organisations"][o].get(m) for o in organisations]) for m in METRICS}
        others = {
            m: _mean([local[o]["organisations"][p].get(m) for o in organisations for p in organisations if p != o])
            for m in METRICS
        }
        scenarios["non_collaborative"] = {
            **own,
            "topic_diversity": _mean([local[o]["topic_diversity"] for o in organisations]),
        }
        scenarios["non_collaborative_on_others"] = others
    metrics = {
        "scenarios": scenarios,
        "models": per_model,
        "n_test_documents": {org: evaluations[org]["n_test_documents"] for org in organisations},
        "vocabulary_size": len(vocabulary),
    }
    mlflow_metrics = {
        f"{name}.{org}.{m}": {"value": float(v), "step": 0}
        for name, entry in per_model.items()
        for org, vals in entry["organisations"].items()
        for m, v in vals.items()
        if v is not None and not math.isnan(v)
    }
    mlflow_metrics.update(
        {
            f"scenario.{s}.{m}": {"value": float(v), "step": 0}
            for s, vals in scenarios.items()
            for m, v in vals.items()
            if v is not None and not math.isnan(v)
        }
    )
    return metrics, topics, comparison_figure(per_model, organisations), mlflow_metrics


def comparison_figure(per_model: dict[str, Any], organisations: list[str]) -> plt.Figure:
    """Per organisation and metric: federated vs centralized vs its own model vs the others' models."""
    fig, grid = plt.subplots(2, 3, figsize=(14, 8))
    axes = grid.ravel()
    series = {
        "federated": lambda o, m: per_model.get("federated", {}).get("organisations", {}).get(o, {}).get(m),
        "centralized": lambda o, m: per_model.get("centralized", {}).get("organisations", {}).get(o, {}).get(m),
        "own local model": lambda o, m: per_model.get(f"local__{o}", {}).get("organisations", {}).get(o, {}).get(m),
        "other orgs' local models": lambda o, m: _mean(
            [
                per_model[f"local__{p}"]["organisations"][o].get(m)
                for p in organisations
                if p != o and f"local__{p}" in per_model
            ]
        ),
    }
    x = np.arange(len(organisations))
    width = 0.8 / len(series)
    for ax, metric in zip(axes, METRICS, strict=False):
        for i, (label, get) in enumerate(series.items()):
            values = [get(o, metric) for o in organisations]
            heights = [v if v is not None and math.isfinite(v) else 0.0 for v in values]
            ax.bar(x + i * width, heights, width, label=label)
        ax.set_xticks(x + width * (len(series) - 1) / 2, organisations, rotation=30, ha="right", fontsize=8)
        ax.set_title(metric + (" (lower is better)" if metric == "perplexity" else ""))
    legend = axes[-1]
    legend.axis("off")
    legend.legend(*axes[0].get_legend_handles_labels(), loc="center", title="model scored on the organisation")
    legend.text(
        0.5,
        0.1,
        "macro_f1 is undefined (no bar) for an\norganisation with a single class",
        ha="center",
        fontsize=8,
        transform=legend.transAxes,
    )
    fig.suptitle("ProdLDA on each organisation's data: federated vs centralized vs non-collaborative")
    fig.tight_layout()
    return fig
