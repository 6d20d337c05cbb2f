"""Nodes of ``evaluate``.

The server lists the candidate words of every model's topics; each organisation sends back
its scores (perplexity, macro-F1) and the co-occurrence counts of those candidates only;
the server sums the counts into the exact coherence on the virtual pooled corpus (the
headline), keeps each organisation's own counts for a secondary per-organisation view,
and writes the comparison.
"""

from __future__ import annotations

import logging
import math
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from fedtopic_pipelines.core.capabilities import DataKind
from fedtopic_pipelines.core.compute import compute_threads
from fedtopic_pipelines.core.config import EvaluateConfig, from_mapping
from fedtopic_pipelines.core.families.ctm import DocumentEmbeddings, contextual_split
from fedtopic_pipelines.core.federated.participation import participation
from fedtopic_pipelines.core.lineage import (
    LineageError,
    candidates_fingerprint,
    digest,
    models_fingerprint,
    require_same,
    tokens_fingerprint,
    vocabulary_fingerprint,
)
from fedtopic_pipelines.core.metrics.classification import svm_macro_f1, svm_undefined
from fedtopic_pipelines.core.metrics.coherence import (
    CoherenceCandidates,
    CoherenceError,
    CoherenceResult,
    coherence_by_model,
    context_of,
    count_cooccurrences,
    counts_from_dict,
    counts_to_dict,
    sum_counts,
)
from fedtopic_pipelines.core.metrics.perplexity import completion_perplexity
from fedtopic_pipelines.core.metrics.quality import model_warnings
from fedtopic_pipelines.core.metrics.topics import redundancy, top_words, topic_diversity
from fedtopic_pipelines.core.model_store import TrainedModel
from fedtopic_pipelines.core.models.ctm import ContextualBatch
from fedtopic_pipelines.core.models.prodlda import csr_tensor
from fedtopic_pipelines.core.shards import ShardedTable, as_frame
from fedtopic_pipelines.core.vocab.consensus import BowCorpus

logger = logging.getLogger(__name__)

_MAX_NOTES = 14
PER_ORG = "per_organisation."  # prefix of the secondary coherence, on one organisation's texts alone
HEADLINE_SCENARIOS = {
    "federated": "federated",
    "centralized": "centralized",
    "non_collaborative": "non_collaborative_local_mean",
}


def model_topics(models: Mapping[str, TrainedModel], vocabulary: pd.DataFrame, n: int) -> dict[str, list[list[str]]]:
    """Top-``n`` words of every topic of every model."""
    terms = vocabulary["term"].tolist()
    return {name: top_words(m.to_model().topic_word().numpy(), terms, n) for name, m in models.items()}


RETRAIN = "Run `kedro run --pipelines=train` again, then `--pipelines=evaluate` (or the whole chain)."
REEVALUATE = "Run the evaluate pipeline whole: `kedro run --pipelines=evaluate`."
REVECTORISE = (
    "The tokens were rebuilt (preprocess ran again) after the bag of words was counted: run "
    "`kedro run --pipelines=vocab_consensus`, then `--pipelines=train` and `--pipelines=evaluate` (or the whole chain)."
)


def check_models_against_vocabulary(models: Mapping[str, TrainedModel], vocabulary: pd.DataFrame) -> str:
    """The vocabulary's fingerprint, once every model is known to have been trained on it
    (``common_vocabulary`` rebuilt by a later or concurrent run stops here, not at an index)."""
    expected = vocabulary_fingerprint(vocabulary["term"].tolist())
    require_same(
        "vocabulary",
        expected,
        {f"trained model '{name}'": model.vocabulary for name, model in models.items()},
        "The models were trained on another common_vocabulary. " + RETRAIN,
        built_from="trained on",
    )
    for name, model in models.items():  # models saved before fingerprints: at least the width
        if model.vocab_size != len(vocabulary):
            raise LineageError(
                f"trained model '{name}' has {model.vocab_size} terms but common_vocabulary has "
                f"{len(vocabulary)}: they come from different runs. {RETRAIN}"
            )
    return expected


def evaluation_lineage(models: Mapping[str, TrainedModel], params: Mapping[str, Any]) -> dict[str, str]:
    """What evaluation's artefacts record they were built from: the models and the parameters."""
    return {"models": models_fingerprint(models), "evaluate": digest(dict(params))}


def select_coherence_candidates(
    models: dict[str, TrainedModel], vocabulary: pd.DataFrame, params: dict[str, Any]
) -> dict[str, Any]:
    """What the server asks every organisation to count: the top words of every topic of every
    model, and the pairs of them that share a topic (no text, no other word). They record the
    fingerprints of the models, vocabulary and parameters they were chosen under."""
    config = from_mapping(EvaluateConfig, params, "evaluate")
    vocabulary_id = check_models_against_vocabulary(models, vocabulary)
    topics = model_topics(models, vocabulary, config.top_words)
    candidates = CoherenceCandidates.from_topics(t for ts in topics.values() for t in ts)
    logger.info(
        "coherence candidates: %d words, %d within-topic pairs, from %d models",
        len(candidates.words),
        len(candidates.pairs),
        len(models),
    )
    return {**candidates.to_dict(), "lineage": {"vocabulary": vocabulary_id, **evaluation_lineage(models, params)}}


def evaluate_organisation(
    models: dict[str, TrainedModel],
    tokens: pd.DataFrame | ShardedTable,
    bow: BowCorpus,
    embeddings: DocumentEmbeddings,
    candidates: dict[str, Any],
    params: dict[str, Any],
) -> dict[str, Any]:
    """Score every model on this organisation (perplexity and SVM macro-F1 on its held-out
    documents) and count the candidate words and pairs in its texts, once per context kind.
    A contextual model (CombinedTM, ZeroShotTM) reads the held-out documents' ``embeddings``
    too; its completion perplexity is then not comparable with a bag-of-words model's (the
    embedding is of the whole document: docs/ctm.md).

    The token shards are read whole (only the organisation, tokens and label columns): the
    counts need every document of the organisation.
    """
    config = from_mapping(EvaluateConfig, params, "evaluate")
    lineage = evaluation_lineage(models, params)
    tokens = as_frame(tokens)
    org = str(tokens["organisation"].iloc[0])
    lineage["tokens"] = tokens_fingerprint([tokens])
    _check_inputs(lineage, candidates, bow, org)
    texts = [t.split() for t in tokens["tokens"]]
    contexts = sorted({context_of(m) for m in config.coherence_measures})

    def progress(items: Sequence[np.ndarray], description: str) -> Iterable[np.ndarray]:
        return tqdm(items, desc=f"co-occurrences {org}, {description}", leave=False)

    counts = count_cooccurrences(texts, CoherenceCandidates.from_dict(candidates), contexts, progress)
    test = bow.subset("test")
    if len(test) == 0:
        logger.warning("organisation %s has no held-out documents: perplexity and F1 left out", org)
    with compute_threads(config.threads):
        held_out = _held_out_scores(models, bow, embeddings, org, config)
    return {
        "organisation": org,
        "n_test_documents": len(test),
        "n_texts": len(texts),
        "models": held_out,
        "coherence_counts": counts_to_dict(counts),
        "lineage": {**lineage, "candidates": candidates_fingerprint(candidates), "vocabulary": bow.vocabulary},
    }


def _check_inputs(lineage: dict[str, str], candidates: dict[str, Any], bow: BowCorpus, org: str) -> None:
    """The candidates were chosen for these models and parameters, over this bag of words' vocabulary;
    the bag of words counted these tokens (the held-out scores and the coherence counts read one corpus)."""
    recorded = candidates.get("lineage", {})
    require_same("models", lineage["models"], {"coherence_candidates": recorded.get("models")}, REEVALUATE)
    require_same(
        "evaluate parameters", lineage["evaluate"], {"coherence_candidates": recorded.get("evaluate")}, REEVALUATE
    )
    require_same(
        "vocabulary",
        recorded.get("vocabulary") or bow.vocabulary or "",
        {"this organisation's bag of words": bow.vocabulary},
        "Run `kedro run --pipelines=vocab_consensus` again, then train and evaluate (or the whole chain).",
        built_from="vectorised with",
    )
    require_same(
        f"clients.{org}.tokens",
        lineage["tokens"],
        {f"clients.{org}.bow": bow.tokens},
        REVECTORISE,
        built_from="counted from",
    )


def _held_out_scores(
    models: dict[str, TrainedModel], bow: BowCorpus, embeddings: DocumentEmbeddings, org: str, config: EvaluateConfig
) -> dict[str, dict[str, float | None]]:
    """Each model's completion perplexity (a probabilistic family's) and SVM macro-F1 on the
    organisation's held-out documents; a contextual model reads their embeddings too."""
    scores: dict[str, dict[str, float | None]] = {name: {} for name in models}
    test = bow.subset("test")
    held = csr_tensor(test.matrix) if len(test) else None  # sparse: the encoder's first layer skips the zeros
    contextual = any(m.config.model.capabilities.data_kind == DataKind.CONTEXTUAL for m in models.values())
    test_embeddings = None
    if contextual:  # the held-out documents' embeddings, row for row
        test_embeddings = contextual_split(bow, embeddings, "test", f"clients.{org}.embeddings").embeddings
    for name, trained in tqdm(models.items(), desc=f"perplexity and F1 {org}", leave=False):
        model = trained.to_model()
        capabilities = trained.config.model.capabilities
        extra = test_embeddings if capabilities.data_kind == DataKind.CONTEXTUAL else None
        scores[name]["perplexity"] = (
            completion_perplexity(model, test.matrix, config.seed, embeddings=extra)
            if len(test) and capabilities.probabilistic  # NMF has no word distribution
            else None
        )
        if held is not None:
            inputs = held if extra is None else ContextualBatch(held, torch.from_numpy(extra))
            theta = model.doc_topic(inputs).numpy()
            scores[name]["macro_f1"] = svm_macro_f1(theta, test.labels, config.svm_test_size, config.svm_c, config.seed)
        else:
            scores[name]["macro_f1"] = None
        why = {  # a score that cannot be computed says why (metrics.json; MLflow keeps numbers only)
            "perplexity": None
            if scores[name]["perplexity"] is not None
            else ("no held-out document" if not len(test) else "the family gives no word distribution per document"),
            "macro_f1": None
            if scores[name]["macro_f1"] is not None
            else ("no held-out document" if not len(test) else svm_undefined(test.labels, config.svm_test_size)),
        }
        scores[name].update({f"{m}_undefined": reason for m, reason in why.items() if reason})
    return scores


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def _mean_over(values: Mapping[str, float | None]) -> dict[str, Any]:
    """A mean that says what it covers: the labels with a value, and those left out (no value)."""
    covered = {k: v for k, v in values.items() if _finite(v) is not None}
    left_out = [k for k in values if k not in covered]
    return {
        "value": float(np.mean(list(covered.values()))) if covered else None,
        "kind": "mean_over_subset" if left_out else "mean",
        "covers": list(covered),
        "n_organisations": len(covered),
        "left_out": left_out,
    }


def _per_org_coherence(result: CoherenceResult) -> dict[str, float | int | None]:
    return {"value": _finite(result.mean), "undefined_topics": result.undefined_topics, "coverage": result.coverage}


def summarise(
    models: dict[str, TrainedModel],
    vocabulary: pd.DataFrame,
    organisations: list[str],
    candidates: dict[str, Any],
    params: dict[str, Any],
    **evaluations: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], plt.Figure, dict[str, Any]]:
    """Sum the organisations' counts into the pooled coherence of every model, merge their scores,
    and write metrics.json, the flat headline metrics, the topic lists, a figure and MLflow metrics."""
    config = from_mapping(EvaluateConfig, params, "evaluate")
    measures = list(config.coherence_measures)
    lineage = _summary_lineage(models, vocabulary, organisations, candidates, params, evaluations)
    topics = model_topics(models, vocabulary, config.top_words)
    chosen = CoherenceCandidates.from_dict(candidates)
    if chosen != CoherenceCandidates.from_topics(t for ts in topics.values() for t in ts):
        raise CoherenceError(
            "summarise_evaluation: coherence_candidates do not match the trained models' top words; "
            "run the evaluate pipeline whole (the models changed after the candidates were chosen)"
        )
    counts = {org: counts_from_dict(evaluations[org]["coherence_counts"], chosen) for org in organisations}
    pooled_counts = sum_counts(counts.values())
    pooled = {m: coherence_by_model(topics, chosen, pooled_counts, m) for m in measures}
    by_org = {org: {m: coherence_by_model(topics, chosen, counts[org], m) for m in measures} for org in organisations}
    diversity_topics = model_topics(models, vocabulary, config.diversity_top_words)
    per_model = {
        name: _model_entry(name, trained, measures, pooled, by_org, diversity_topics, evaluations)
        for name, trained in models.items()
    }
    warnings = _redundancy(per_model, topics, len(vocabulary), config)
    scenarios = scenario_values(per_model, organisations, measures)
    metrics = {
        "definitions": DEFINITIONS,
        "organisations": list(organisations),
        "coherence_candidates": {"words": len(chosen.words), "pairs": len(chosen.pairs)},
        "scenarios": scenarios,
        "models": per_model,
        "n_test_documents": {org: evaluations[org]["n_test_documents"] for org in organisations},
        "n_texts": {org: evaluations[org]["n_texts"] for org in organisations},
        "vocabulary_size": len(vocabulary),
        "quality_warnings": warnings,
        "lineage": lineage,
    }
    headline = headline_metrics(scenarios)
    for scenario, values in scenarios.items():
        if "topic_diversity" not in values:  # non_collaborative_on_others: per-organisation metrics only
            continue
        logger.info(
            "%s: pooled %s %s, topic diversity %s, largest topic overlap %s of %d top words, inverted RBO %s",
            scenario,
            measures[0],
            *(_shown(values[m]["value"]) for m in (measures[0], "topic_diversity", "largest_topic_overlap")),
            config.top_words,
            _shown(values["inverted_rbo"]["value"]),
        )
    return (
        metrics,
        headline,
        topics,
        comparison_figure(per_model, scenarios, organisations, measures),
        _mlflow(per_model, scenarios),
    )


def _shown(value: float | int | None) -> str:
    return "undefined" if value is None else f"{value:.3g}"


def _redundancy(
    per_model: dict[str, Any], topics: dict[str, list[list[str]]], vocabulary_size: int, config: EvaluateConfig
) -> list[dict[str, object]]:
    """Add each model's topic redundancy (largest top-word overlap, duplicate pairs, inverted RBO) to
    its entry, and return the warnings a degenerate model earns, each logged with what to change."""
    warnings = []
    for name, entry in per_model.items():
        found = redundancy(topics[name], config.duplicate_shared_words, config.rbo_weight)
        entry.update(found.as_dict())
        undefined = {m: entry[f"{m}_undefined_topics"] for m in config.coherence_measures}
        for warning in model_warnings(name, topics[name], found, vocabulary_size, undefined, "train.model.n_topics"):
            logger.warning("model '%s': %s", name, warning.message)
            warnings.append(warning.as_dict())
    return warnings


def _summary_lineage(
    models: dict[str, TrainedModel],
    vocabulary: pd.DataFrame,
    organisations: list[str],
    candidates: dict[str, Any],
    params: dict[str, Any],
    evaluations: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """What the summary was computed from, checked to be what every organisation scored with;
    with each organisation's token fingerprint (computed inside it), so that another
    preprocessing shows in the lineage."""
    vocabulary_id = check_models_against_vocabulary(models, vocabulary)
    lineage = {"vocabulary": vocabulary_id, **evaluation_lineage(models, params)}
    lineage["candidates"] = candidates_fingerprint(candidates)
    for what in ("vocabulary", "models", "evaluate", "candidates"):
        found = {f"evaluation__{org}": evaluations[org].get("lineage", {}).get(what) for org in organisations}
        if what != "candidates":
            found["coherence_candidates"] = candidates.get("lineage", {}).get(what)
        require_same("evaluate parameters" if what == "evaluate" else what, lineage[what], found, REEVALUATE)
    return {**lineage, "tokens": {org: evaluations[org].get("lineage", {}).get("tokens") for org in organisations}}


def _model_entry(
    name: str,
    trained: TrainedModel,
    measures: list[str],
    pooled: dict[str, Any],
    by_org: dict[str, dict[str, Any]],
    diversity_topics: dict[str, Any],
    evaluations: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """One model's pooled coherence and diversity, each organisation's scores of it (secondary), and
    for a federated model every round's participation (the screen's and validation's rejections)."""
    entry: dict[str, Any] = {
        "scenario": trained.scenario,
        "trained_on": trained.organisations,
        "steps": len(trained.history),
        "topic_diversity": topic_diversity(diversity_topics[name]),
    }
    if trained.scenario == "federated":  # who took part in which round; who was left out, when and why
        entry["participation"] = participation(trained.history, trained.organisations)
    for m in measures:
        entry[m] = _finite(pooled[m][name].mean)
        entry[f"{m}_undefined_topics"] = pooled[m][name].undefined_topics
    entry["organisations"] = {}
    for org in by_org:
        scores = dict(evaluations[org]["models"][name])
        scores["topic_coverage"] = by_org[org][measures[0]][name].coverage
        for m in measures:
            result = by_org[org][m][name]
            scores[PER_ORG + m] = _finite(result.mean)
            scores[f"{PER_ORG}{m}_undefined_topics"] = result.undefined_topics
        entry["organisations"][org] = scores
    return entry


def scenario_values(per_model: dict[str, Any], organisations: list[str], measures: list[str]) -> dict[str, Any]:
    """The scenarios' headline values, each with what it covers: the federated and centralized
    models' pooled values and per-organisation means, and the local models' means."""
    org_metrics = ["perplexity", "macro_f1", "topic_coverage", *(PER_ORG + m for m in measures)]
    model_metrics = [*measures, "topic_diversity", *REDUNDANCY]
    scenarios: dict[str, Any] = {}
    for name in ("federated", "centralized"):
        if name in per_model:
            scenario: dict[str, Any] = {
                m: {
                    "value": per_model[name][m],
                    "kind": "pooled",
                    "covers": list(organisations),
                    "n_organisations": len(organisations),
                    "left_out": [],
                }
                for m in model_metrics
            }
            for m in org_metrics:
                scenario[m] = _mean_over({o: per_model[name]["organisations"][o].get(m) for o in organisations})
            scenarios[name] = scenario
    local = {org: per_model[f"local__{org}"] for org in organisations if f"local__{org}" in per_model}
    if local:
        own = {m: _mean_over({o: local[o][m] for o in local}) for m in model_metrics}
        for m in model_metrics:
            own[m]["kind"] = "mean_of_local_models" + ("_subset" if own[m]["left_out"] else "")
        for m in org_metrics:
            own[m] = _mean_over({o: local[o]["organisations"][o].get(m) for o in local})
        scenarios["non_collaborative"] = own
        scenarios["non_collaborative_on_others"] = {
            m: _mean_over(
                {
                    f"local__{o} on {p}": local[o]["organisations"][p].get(m)
                    for o in local
                    for p in organisations
                    if p != o
                }
            )
            for m in org_metrics
        }
    return scenarios


REDUNDANCY = ("largest_topic_overlap", "duplicate_topic_pairs", "inverted_rbo")
POOLED_TEXT = ("c_npmi", "c_v", "u_mass", "c_uci")  # measured on texts; diversity and redundancy on the topics alone

DEFINITIONS = {
    "c_npmi, c_v, u_mass (of a model)": "pooled: gensim's measure on the virtual pooled corpus of every organisation's "
    "texts, from summed co-occurrence counts (equal to gensim on the concatenated texts)",
    "per_organisation.<measure>": "secondary: the same measure on one organisation's texts alone; topics with a word "
    "the organisation never wrote are undefined, left out of its mean and counted in <measure>_undefined_topics",
    "largest_topic_overlap": "the most top words (evaluate.top_words) two topics of a model share; its pair and "
    "words in largest_topic_overlap_pair",
    "duplicate_topic_pairs": "pairs of topics sharing evaluate.duplicate_shared_words or more top words",
    "inverted_rbo": "1 - the mean rank-biased overlap (extrapolated, persistence evaluate.rbo_weight) of every pair of "
    "topics' top words, as OCTIS computes it: 1 = no two topics share a word",
    "quality_warnings": "what makes a model degenerate (duplicate topics, a vocabulary too small for its topics, "
    "undefined pooled coherence), each with the parameter to change and a value to try",
    "topic_coverage": "share of a topic's top words that occur in the organisation's texts, mean over topics",
    "scenarios.<s>.<metric>": "value with what it covers: kind pooled (one model, all organisations' texts), "
    "mean (over every organisation), mean_over_subset (organisations without a value are listed in left_out), "
    "mean_of_local_models (non_collaborative: the mean over organisations of each local model's pooled value)",
    "non_collaborative": "each organisation's own model: pooled metrics averaged over the local models; "
    "per-organisation metrics of each local model on its own organisation",
    "non_collaborative_on_others": "each local model on every other organisation (per-organisation metrics only)",
}


def headline_metrics(scenarios: Mapping[str, Any]) -> dict[str, dict[str, float | int | None]]:
    """A flat few dozen numbers for ``dvc metrics show``: scenario -> metric -> value.

    Coherence and diversity are pooled (non_collaborative: the mean of the local models' pooled
    values, hence its name); perplexity and macro-F1 are means over organisations, with how
    many organisations each covers.
    """
    out: dict[str, dict[str, float | int | None]] = {}
    for scenario, label in HEADLINE_SCENARIOS.items():
        if scenario not in scenarios:
            continue
        values = scenarios[scenario]
        row: dict[str, float | int | None] = {  # redundancy: in metrics.json, MLflow and the log (a narrow table)
            m: v["value"]
            for m, v in values.items()
            if v["kind"] not in ("mean", "mean_over_subset") and m not in REDUNDANCY
        }
        for m in ("perplexity", "macro_f1"):
            row[f"{m}_mean"] = values[m]["value"]
            row[f"{m}_n_organisations"] = values[m]["n_organisations"]
        out[label] = row
    return out


def _mlflow(per_model: Mapping[str, Any], scenarios: Mapping[str, Any]) -> dict[str, Any]:
    """Flat MLflow metrics: ``<model>.<measure>`` (pooled), ``<model>.<org>.<metric>``,
    ``scenario.<s>.<metric>`` and ``scenario.<s>.<metric>.n_organisations``."""
    flat: dict[str, float] = {}
    for name, entry in per_model.items():
        for key, value in entry.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                flat[f"{name}.{key}"] = value
        for org, values in entry["organisations"].items():  # undefined-topic counts stay in metrics.json only
            flat.update(
                {
                    f"{name}.{org}.{m}": v
                    for m, v in values.items()
                    if isinstance(v, int | float) and not isinstance(v, bool) and not m.endswith("_undefined_topics")
                }
            )
    for s, values in scenarios.items():
        for m, v in values.items():
            if v["value"] is not None:
                flat[f"scenario.{s}.{m}"] = v["value"]
            flat[f"scenario.{s}.{m}.n_organisations"] = v["n_organisations"]
    return {k: {"value": float(v), "step": 0} for k, v in flat.items() if math.isfinite(float(v))}


def _covers_label(entry: Mapping[str, Any]) -> str:
    total = entry["n_organisations"] + len(entry["left_out"])
    return f"{entry['n_organisations']} of {total}, without {', '.join(entry['left_out'])}"


def comparison_figure(
    per_model: Mapping[str, Any], scenarios: Mapping[str, Any], organisations: list[str], measures: list[str]
) -> plt.Figure:
    """Pooled metrics per scenario, then per organisation and metric: federated vs centralized vs
    its own model vs the others' models, with each scenario mean and what it covers."""
    pooled_panels = [*measures, "topic_diversity", "inverted_rbo"]
    org_panels = [*(PER_ORG + m for m in measures), "topic_coverage", "perplexity", "macro_f1"]
    n_panels = len(pooled_panels) + len(org_panels) + 1
    ncols = 4
    fig, grid = plt.subplots(
        math.ceil(n_panels / ncols), ncols, figsize=(4.2 * ncols, 3.8 * math.ceil(n_panels / ncols))
    )
    axes = list(grid.ravel())
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    _pooled_panels(axes, pooled_panels, scenarios, organisations, colours)
    covers_notes = _organisation_panels(
        axes[len(pooled_panels) :], org_panels, per_model, scenarios, organisations, colours
    )
    legend = axes[len(pooled_panels) + len(org_panels)]
    legend.axis("off")
    legend.legend(
        *axes[len(pooled_panels)].get_legend_handles_labels(),
        loc="center",
        fontsize=8,
        title="model scored on the organisation",
        title_fontsize=8,
    )
    for ax in axes[n_panels:]:
        ax.axis("off")
    shown = covers_notes[:_MAX_NOTES] or ["every scenario mean covers all organisations"]
    if len(covers_notes) > _MAX_NOTES:
        shown.append(f"... and {len(covers_notes) - _MAX_NOTES} more in metrics.json (scenarios.<s>.<metric>.covers)")
    notes = "Scenario means over a subset of organisations:\n" + "\n".join(textwrap.shorten(n, 180) for n in shown)
    bottom = 0.02 + 0.016 * (len(shown) + 1)
    fig.text(0.01, 0.005, notes, fontsize=6.5, va="bottom", ha="left")
    fig.suptitle(
        "ProdLDA: pooled coherence (exact, all organisations' texts) and per-organisation scores; "
        "federated vs centralized vs non-collaborative",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, bottom, 1, 0.97))
    return fig


def _pooled_panels(
    axes: list[Any], panels: list[str], scenarios: Mapping[str, Any], organisations: list[str], colours: list[str]
) -> None:
    """One bar per scenario of each pooled metric, labelled with what its value covers."""
    names = [s for s in ("federated", "centralized", "non_collaborative") if s in scenarios]
    for ax, metric in zip(axes, panels, strict=False):
        values = [scenarios[s][metric]["value"] for s in names]
        ax.bar(range(len(names)), [v if v is not None else 0.0 for v in values], color=colours[: len(names)])
        ticks = [
            f"{s}\npooled, {len(organisations)} orgs"
            if scenarios[s][metric]["kind"] == "pooled"
            else f"non-collab.\nmean of {scenarios[s][metric]['n_organisations']}\nlocal models"
            for s in names
        ]
        ax.set_xticks(range(len(names)), ticks, fontsize=7)
        for i, v in enumerate(values):
            ax.annotate("n/a" if v is None else f"{v:.3f}", (i, v or 0.0), ha="center", va="bottom", fontsize=7)
        ax.axhline(0, color="black", linewidth=0.5)
        ax.set_title(f"{metric} (pooled, all organisations' texts)" if metric in POOLED_TEXT else metric, fontsize=9)


def _organisation_panels(
    axes: list[Any],
    panels: list[str],
    per_model: Mapping[str, Any],
    scenarios: Mapping[str, Any],
    organisations: list[str],
    colours: list[str],
) -> list[str]:
    """Per organisation and metric, each kind of model's score and the scenario mean; returns the
    notes on means that cover only some organisations."""

    def of(model: str) -> Any:
        return lambda o, m: per_model.get(model, {}).get("organisations", {}).get(o, {}).get(m)

    series = {
        "federated": ("federated", of("federated")),
        "centralized": ("centralized", of("centralized")),
        "own local model": (
            "non_collaborative",
            lambda o, m: per_model.get(f"local__{o}", {}).get("organisations", {}).get(o, {}).get(m),
        ),
        "other orgs' local models (mean)": (
            "non_collaborative_on_others",
            lambda o, m: _mean_over(
                {
                    p: per_model[f"local__{p}"]["organisations"][o].get(m)
                    for p in organisations
                    if p != o and f"local__{p}" in per_model
                }
            )["value"],
        ),
    }
    x = np.arange(len(organisations) + 1)
    width = 0.8 / len(series)
    covers_notes: list[str] = []
    for ax, metric in zip(axes, panels, strict=False):
        for i, (label, (scenario, get)) in enumerate(series.items()):
            values = [get(o, metric) for o in organisations]
            mean = scenarios.get(scenario, {}).get(metric)
            values.append(mean["value"] if mean else None)
            heights = [v if v is not None and math.isfinite(v) else 0.0 for v in values]
            ax.bar(x + i * width, heights, width, label=label, color=colours[i])
            if mean and mean["left_out"]:
                covers_notes.append(f"{metric}, {scenario}: mean over {_covers_label(mean)}")
        ax.set_xticks(
            x + width * (len(series) - 1) / 2,
            [*organisations, "scenario mean\n(orgs with a value)"],
            rotation=30,
            ha="right",
            fontsize=7,
        )
        ax.axhline(0, color="black", linewidth=0.5)
        ax.set_title(metric + (" (lower is better)" if metric == "perplexity" else ""), fontsize=9)
    return covers_notes
