"""Nodes of ``compare``: every family on the chain's common vocabulary and splits, scored by one
evaluator (``evaluate``'s, inside the organisations), then one leaderboard.

A row of the leaderboard is a (family, scenario). Federated and centralized rows are one model's
scores; a non-collaborative row is the mean over the organisations' own models, as ``evaluate``
defines it (pooled measures: the mean of each local model's pooled value; perplexity and
macro-F1: each local model on its own organisation's held-out documents).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Mapping
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from fedtopic_pipelines.core.capabilities import DataKind
from fedtopic_pipelines.core.config import CompareConfig, EvaluateConfig, TrainConfig, from_mapping
from fedtopic_pipelines.core.config.registry import MODEL_CONFIGS
from fedtopic_pipelines.core.families.ctm import DocumentEmbeddings
from fedtopic_pipelines.core.metrics.we_coherence import we_coherence
from fedtopic_pipelines.core.model_store import TrainedModel
from fedtopic_pipelines.core.shards import ShardedTable
from fedtopic_pipelines.core.site import Site
from fedtopic_pipelines.core.text.word_vectors import load_word_vectors
from fedtopic_pipelines.core.training import train_scenarios
from fedtopic_pipelines.core.vocab.consensus import BowCorpus
from fedtopic_pipelines.parameters import with_privacy
from fedtopic_pipelines.pipelines.evaluate.nodes import scenario_values
from fedtopic_pipelines.pipelines.train.nodes import training_matrices

logger = logging.getLogger(__name__)

#: the leaderboard's measures after the coherence measures, each with the direction that is better
MEASURES = {
    "topic_diversity": "higher",
    "largest_topic_overlap": "lower",
    "we_coherence": "higher",
    "perplexity": "lower",
    "macro_f1": "higher",
    "train_seconds": "lower",
    "bytes_sent_per_organisation": "lower",
}
COHERENCE_DIRECTION = "higher"  # NPMI, C_V and UMass: higher is more coherent
LOG_SCALE = ("bytes_sent_per_organisation",)


def _contextual(families: Mapping[str, Any]) -> bool:
    return any(f in MODEL_CONFIGS and MODEL_CONFIGS[f].capabilities.data_kind == DataKind.CONTEXTUAL for f in families)


def embed_for_compare(
    raw: pd.DataFrame | ShardedTable, bow: BowCorpus, train: dict[str, Any], compare: dict[str, Any], cache: Any
) -> DocumentEmbeddings:
    """Client: the sentence embedding of each document of its bag of words when a compared family
    reads embeddings (CombinedTM, ZeroShotTM), with ``train.embeddings``'s encoder; otherwise
    nothing. The cache is the chain's, so texts already embedded are not embedded again."""
    config = from_mapping(CompareConfig, compare, "compare")
    if not _contextual(config.families):
        return DocumentEmbeddings.none()
    return Site().embed(raw, bow.doc_ids.tolist(), TrainConfig.from_params(train).embeddings, cache)


def train_compared_models(
    train: dict[str, Any],
    compare: dict[str, Any],
    organisations: list[str],
    common_vocabulary: pd.DataFrame,
    privacy: dict[str, Any] | None = None,
    **inputs: BowCorpus | DocumentEmbeddings,
) -> tuple[dict[str, TrainedModel], dict[str, Any]]:
    """Every family of ``compare.families`` in every one of ``compare.scenarios``, in process, on
    each organisation's training split (``inputs``: bags of words by organisation, embeddings by
    ``embeddings__<org>``). Models are named ``<family>.<model>`` (``prodlda.federated``,
    ``nmf_exact.local__<org>``). Returns them and each (family, scenario)'s training facts: wall
    seconds on this machine and the bytes each organisation's accepted updates carried."""
    config = from_mapping(CompareConfig, compare, "compare")
    configs = config.train_configs(train)
    models: dict[str, TrainedModel] = {}
    facts: dict[str, Any] = {}
    for family, family_config in tqdm(configs.items(), desc="compare: families"):
        family_config = with_privacy(family_config, privacy, f"compare.families.{family}")
        matrices = training_matrices(family_config, organisations, common_vocabulary, inputs)
        for scenario in family_config.scenarios:
            logger.info("compare: training %s, %s", family, scenario)
            started = time.perf_counter()
            trained = train_scenarios(
                matrices, family_config.replace(scenarios=(scenario,)), vocabulary=common_vocabulary
            )
            seconds = time.perf_counter() - started
            for name, model in trained.items():
                models[f"{family}.{name}"] = dataclasses.replace(model, name=f"{family}.{name}")
            facts[f"{family}.{scenario}"] = {
                "family": family,
                "scenario": scenario,
                "models": [f"{family}.{name}" for name in trained],
                "settings": _settings(family_config),
                "train_seconds": seconds,
                "steps": {f"{family}.{name}": len(m.history) for name, m in trained.items()},
                "bytes_sent": _bytes_sent(trained, scenario, organisations),
            }
    return models, facts


def _settings(config: TrainConfig) -> dict[str, Any]:
    """What tells one family's training from another's at a glance (MLflow params of its rows)."""
    return {
        "n_topics": config.model.n_topics,
        "max_steps": config.max_steps,
        "rule": config.aggregation.rule or config.model.capabilities.default_rule,
        "optimizer": config.optimizer.name,
        "batch_size": config.batch_size,
        "seed": config.seed,
    }


def _bytes_sent(trained: Mapping[str, TrainedModel], scenario: str, organisations: list[str]) -> dict[str, int] | None:
    """What each organisation sent while training: its accepted updates' bytes (federated), nothing
    (its own model), or None for the centralized baseline, whose documents leave every organisation."""
    if scenario == "non_collaborative":
        return {org: 0 for org in organisations}
    if scenario == "centralized":
        return None
    (model,) = trained.values()
    return {org: int(sum(r.client_bytes.get(org, 0) for r in model.history)) for org in organisations}


def leaderboard(
    metrics: dict[str, Any],
    topics: dict[str, list[list[str]]],
    facts: dict[str, Any],
    compare: dict[str, Any],
    evaluate: dict[str, Any],
    organisations: list[str],
) -> tuple[pd.DataFrame, str, plt.Figure, dict[str, Any], dict[str, dict[str, Any]], dict[str, Any]]:
    """The leaderboard (families x scenarios) as a table, Markdown, a figure with one panel per
    measure, a JSON summary with what each missing value lacks and a recommendation, one small
    JSON per row for ``dvc metrics``, and one nested MLflow run per row, all with the same
    metric names."""
    config = from_mapping(CompareConfig, compare, "compare")
    measures = list(from_mapping(EvaluateConfig, evaluate, "evaluate").coherence_measures)
    vectors = load_word_vectors(config.word_vectors, "compare.word_vectors", config.trust_pickle)
    we = {name: we_coherence([t[: config.top_words] for t in ts], vectors) for name, ts in topics.items()}
    rows, missing = [], {}
    for family in config.families:
        own = {
            name.removeprefix(f"{family}."): entry
            for name, entry in metrics["models"].items()
            if name.startswith(f"{family}.")
        }
        values = scenario_values(own, organisations, measures)
        for scenario in config.scenarios:
            key = f"{family}.{scenario}"
            found = {**values.get(scenario, {}), "we_coherence": _we_of(we, facts[key]["models"])}
            row: dict[str, Any] = {"family": family, "scenario": scenario}
            for m in [*measures, "topic_diversity", "largest_topic_overlap", "we_coherence", "perplexity", "macro_f1"]:
                row[m] = (found.get(m) or {}).get("value")
            sent = facts[key]["bytes_sent"]
            row["train_seconds"] = facts[key]["train_seconds"]
            row["bytes_sent_per_organisation"] = None if sent is None else float(np.mean(list(sent.values())))
            rows.append(row)
            missing[key] = _why_missing(row, family, scenario, found)
    table = pd.DataFrame(rows)
    recommendation = recommend(table, measures[0])
    logger.info("compare: %s", recommendation)
    summary = {
        "definitions": {
            "rows": "one per family and scenario; non_collaborative: the mean over the organisations' own models",
            **{m: f"pooled {m} on every organisation's texts (summed counts)" for m in measures},
            "topic_diversity": "share of distinct words among every topic's evaluate.diversity_top_words top words",
            "largest_topic_overlap": "most top words two topics of one model share (lower: fewer repeated topics)",
            "we_coherence": f"mean cosine of every pair of a topic's {config.top_words} top words "
            f"({config.word_vectors})",
            "perplexity": "completion perplexity on each organisation's held-out documents, mean over organisations "
            "(docs/evaluation.md); a contextual family also reads the document's embedding",
            "macro_f1": "linear SVM on topic weights, within each organisation's held-out documents, mean over "
            "organisations",
            "train_seconds": "wall seconds the scenario's training took in this run, on this machine",
            "bytes_sent_per_organisation": "bytes of the accepted updates an organisation sent, mean over "
            "organisations; 0 alone; null for the centralized baseline (its documents leave the organisations)",
        },
        "better": {**dict.fromkeys(measures, COHERENCE_DIRECTION), **MEASURES},
        "rows": table.replace({np.nan: None}).to_dict(orient="records"),
        "missing": {k: v for k, v in missing.items() if v},
        "recommendation": recommendation,
        "seeds": "one seed per model (train.seed): differences smaller than a seed's spread are not established",
    }
    headline = {
        f"{r['family']}.{r['scenario']}": {
            k: v for k, v in r.items() if k not in ("family", "scenario") and _is_number(v)
        }
        for r in summary["rows"]
    }
    runs = {
        "runs": [
            {
                "name": f"{r['family']}/{r['scenario']}",
                "params": {
                    "family": r["family"],
                    "scenario": r["scenario"],
                    **facts[f"{r['family']}.{r['scenario']}"]["settings"],
                },
                "metrics": {k: float(v) for k, v in headline[f"{r['family']}.{r['scenario']}"].items()},
            }
            for r in summary["rows"]
        ],
        "artifacts": {"compare/leaderboard.csv": table},
    }
    return table, markdown(table, recommendation), figure(table, summary["better"]), summary, headline, runs


def _we_of(we: Mapping[str, Any], models: list[str]) -> dict[str, Any]:
    """A scenario's WE coherence: its model's, or the mean of the organisations' own models'."""
    values = {name: we[name].mean for name in models if math.isfinite(we[name].mean)}
    left_out = [name for name in models if name not in values]
    return {"value": float(np.mean(list(values.values()))) if values else None, "left_out": left_out}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _why_missing(row: Mapping[str, Any], family: str, scenario: str, found: Mapping[str, Any]) -> dict[str, str]:
    """Why each empty cell of a row is empty, in words."""
    capabilities = MODEL_CONFIGS[family].capabilities
    why = {}
    for m, value in row.items():
        if value is not None or m in ("family", "scenario"):
            continue
        if m == "perplexity" and not capabilities.probabilistic:
            why[m] = f"{family} gives no word distribution per document: perplexity is not defined"
        elif m == "bytes_sent_per_organisation":
            why[m] = "the centralized baseline pools the documents: no update is sent"
        elif found.get(m) and found[m].get("left_out"):
            left_out = ", ".join(map(str, found[m]["left_out"]))
            why[m] = f"no value for {left_out}: metrics.json's organisations.<org>.{m}_undefined says why"
        else:
            why[m] = "not computed for this scenario (see metrics.json)"
    return why


def recommend(table: pd.DataFrame, measure: str) -> str:
    """One sentence on what the figures support: the best federated family by ``measure`` (pooled),
    how far it is from pooling its documents and from each organisation alone, and by macro-F1."""
    federated = table[(table["scenario"] == "federated") & table[measure].notna()]
    if federated.empty:
        return f"No federated model has a pooled {measure}: nothing to recommend from these figures."
    best = federated.sort_values(measure, ascending=False).iloc[0]
    parts = [f"Among federated models, {best['family']} has the highest pooled {measure} ({best[measure]:.3f})"]
    if len(federated) > 1:
        second = federated.sort_values(measure, ascending=False).iloc[1]
        parts[0] += f", {best[measure] - second[measure]:.3f} above {second['family']}"
    for scenario, label in (("centralized", "pooling the documents"), ("non_collaborative", "each organisation alone")):
        other = table[(table["family"] == best["family"]) & (table["scenario"] == scenario)]
        if not other.empty and other[measure].notna().all():
            gap = best[measure] - float(other[measure].iloc[0])
            parts.append(f"{gap:+.3f} against {label}")
    f1 = federated[federated["macro_f1"].notna()]
    if not f1.empty:
        top = f1.sort_values("macro_f1", ascending=False).iloc[0]
        parts.append(f"by macro-F1 the best federated family is {top['family']} ({top['macro_f1']:.3f})")
    return "; ".join(parts) + ". One seed per model: gaps smaller than a seed's spread are not established."


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def markdown(table: pd.DataFrame, recommendation: str) -> str:
    """The leaderboard as a Markdown table, with the recommendation under it."""
    columns = list(table.columns)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_shown(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines) + f"\n\n{recommendation}\n"


def figure(table: pd.DataFrame, better: Mapping[str, str]) -> plt.Figure:
    """One panel per measure: a bar per family in each scenario (n/a where a value is missing)."""
    panels = [m for m in better if m in table.columns]
    families = list(dict.fromkeys(table["family"]))
    scenarios = list(dict.fromkeys(table["scenario"]))
    ncols = 3
    nrows = math.ceil(len(panels) / ncols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(5.0 * ncols, 3.4 * nrows), squeeze=False)
    axes = list(grid.ravel())
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    width = 0.8 / max(len(families), 1)
    x = np.arange(len(scenarios))
    for ax, measure in zip(axes, panels, strict=False):
        for i, family in enumerate(families):
            part = table[table["family"] == family].set_index("scenario")
            values = [part[measure].get(s) if s in part.index else None for s in scenarios]
            values = [None if v is None or pd.isna(v) else float(v) for v in values]
            ax.bar(x + i * width, [v or 0.0 for v in values], width, label=family, color=colours[i % len(colours)])
            for j, v in enumerate(values):
                if v is None:
                    ax.annotate("n/a", (x[j] + i * width, 0.0), ha="center", va="bottom", fontsize=6)
        ax.set_xticks(x + width * (len(families) - 1) / 2, scenarios, fontsize=8)
        if measure in LOG_SCALE:  # bytes span orders of magnitude across families
            ax.set_yscale("symlog", linthresh=1.0)
        ax.axhline(0, color="black", linewidth=0.5)
        ax.set_title(f"{measure} ({better[measure]} is better)", fontsize=9)
    for ax in axes[len(panels) :]:
        ax.axis("off")
    axes[0].legend(fontsize=7)
    fig.suptitle("Families x scenarios on one vocabulary, one evaluator (pooled over the organisations)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig
