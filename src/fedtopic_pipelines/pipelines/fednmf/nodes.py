"""Nodes of ``fednmf`` (seed 004): the sweep, the organisations' counts, the paper's tables and figures.

The sweep node trains every method at every number of topics through the experiment
(``experiments/fednmf.py``): the federated methods through the engine with one
endpoint per organisation, the centralized ones on the pooled documents, as the train
node does (it holds every organisation's bag of words because it simulates them). Each
organisation then scores every model on its own documents: the co-occurrences of the
models' top words in its texts, and its own SVM's confusion counts on its documents' topic
weights. Only those counts cross; their sums give every model's pooled NPMI, macro-F1 and
accuracy.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from fedtopic_pipelines.core.compute import compute_threads
from fedtopic_pipelines.core.config import WEIGHT_RULES, from_mapping
from fedtopic_pipelines.core.lineage import require_same, vocabulary_fingerprint
from fedtopic_pipelines.core.metrics.classification import pooled_scores
from fedtopic_pipelines.core.metrics.coherence import (
    CoherenceCandidates,
    coherence_by_model,
    context_of,
    count_cooccurrences,
    counts_from_dict,
    counts_to_dict,
    sum_counts,
)
from fedtopic_pipelines.core.metrics.topics import top_words
from fedtopic_pipelines.core.shards import as_frame
from fedtopic_pipelines.core.text.word_vectors import load_word_vectors
from fedtopic_pipelines.core.vocab.consensus import BowCorpus
from fedtopic_pipelines.experiments.config import EXACT_NMF_METHOD, FEDERATED_NMF_METHODS, FedNMFRunConfig
from fedtopic_pipelines.experiments.fednmf import (
    Fitted,
    check_methods,
    model_key,
    organisation_scores,
    rule_of,
    run_heterogeneity,
    run_sweep,
    trained_federated,
)
from fedtopic_pipelines.parameters import with_privacy

logger = logging.getLogger(__name__)

NPMI = "c_npmi"
COLOURS = {
    "fedavg": "tab:red",
    "fedadagrad": "tab:blue",
    "fedadam": "tab:green",
    "fedyogi": "tab:purple",
    "exact": "tab:orange",
}


def run_fednmf(
    params: dict[str, Any],
    organisations: list[str],
    common_vocabulary: pd.DataFrame,
    privacy: dict[str, Any] | None = None,
    **bows: BowCorpus,
) -> tuple[dict[str, Any], dict[str, Fitted]]:
    """Every method of ``fednmf.methods`` at every number of ``fednmf.topics`` (Tables III-IV, Fig. 2
    and Fig. 3's snapshots) and the heterogeneity sweep (Fig. 4), trained in the in-process
    simulation and scored by what needs no document (WE coherence), with the paper's own pooled
    SVM beside (``paper_pooled_*``). Returns the rows, each model's top words (the candidates
    the organisations count) and the curves' points as JSON, and the models the organisations
    score. ``privacy`` (the top-level block) applies to the federated methods."""
    run = from_mapping(FedNMFRunConfig, params, "fednmf")
    run = run.replace(train=with_privacy(run.train, privacy, "fednmf.train"))
    check_methods(run)
    terms = common_vocabulary["term"].tolist()
    require_same(
        "vocabulary",
        vocabulary_fingerprint(terms),
        {f"clients.{org}.bow": bows[org].vocabulary for org in organisations},
        "Run `kedro run --pipelines=vocab_consensus` again: it rebuilds the vocabulary and every bag of words.",
        built_from="vectorised with",
    )
    data = {org: bows[org] for org in organisations}
    vectors = load_word_vectors(run.evaluate.word_vectors, "fednmf.evaluate.word_vectors", run.evaluate.trust_pickle)
    with compute_threads(run.train.threads):
        results = run_sweep(run, data, common_vocabulary, vectors)
        heterogeneity, models = run_heterogeneity(run, data, common_vocabulary, vectors)
    for result in results:
        models.update(result.models)
    top = {key: top_words(fitted.topic_word, terms, run.evaluate.top_words) for key, fitted in models.items()}
    candidates = CoherenceCandidates.from_topics(t for topics in top.values() for t in topics)
    rows = []
    for r in results:
        key = r.key
        rows.append({**r.row(), "key": key, "top_words": top[key]})
    sweep = {
        "organisations": list(organisations),
        "documents": {org: len(bow) for org, bow in data.items()},
        "vocabulary_size": len(terms),
        "settings": run.to_params(),
        "results": rows,
        "curves": [{"method": r.method, "topics": r.topics, **point} for r in results for point in r.curve],
        "heterogeneity": heterogeneity,
        "candidates": candidates.to_dict(),
        "top_words": top,
        "participation": {r.key: r.participation for r in results if r.participation is not None},
    }
    return sweep, models


def evaluate_fednmf_organisation(
    tokens: Any,
    bow: BowCorpus,
    sweep: dict[str, Any],
    models: dict[str, Fitted],
    params: dict[str, Any],
    organisation: str,
) -> dict[str, Any]:
    """Inside organisation ``organisation``: the co-occurrences of the sweep's candidate words in
    its own texts, and each model's SVM confusion counts on its own documents. Only these counts
    leave it; their sums give the pooled NPMI, macro-F1 and accuracy."""
    run = from_mapping(FedNMFRunConfig, params, "fednmf")
    texts = [t.split() for t in as_frame(tokens)["tokens"]]
    candidates = CoherenceCandidates.from_dict(sweep["candidates"])
    index = sweep["organisations"].index(organisation)
    share = None
    if run.evaluate.max_documents is not None:
        share = max(1, run.evaluate.max_documents * len(bow) // sum(sweep["documents"].values()))
    return {
        "counts": counts_to_dict(count_cooccurrences(texts, candidates, [context_of(NPMI)])),
        "classification": organisation_scores(models, bow, share, index, run),
    }


def _mean(values: list[float | None]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(finite)) if finite else None


def _organisation_sums(
    sweep: dict[str, Any], organisations: list[str], evaluations: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Every model's pooled NPMI from the summed counts, and macro-F1 and accuracy from the summed
    confusion counts, by model key; an organisation that could train no classifier for a model
    is counted (``classified_organisations``) and logged."""
    candidates = CoherenceCandidates.from_dict(sweep["candidates"])
    pooled = sum_counts(counts_from_dict(evaluations[org]["counts"], candidates) for org in organisations)
    npmi = coherence_by_model(sweep["top_words"], candidates, pooled, NPMI)
    sums = {}
    for key in sweep["top_words"]:
        scores = pooled_scores(evaluations[org]["classification"][key] for org in organisations)
        if scores["organisations"] < len(organisations):
            logger.warning(
                "fednmf %s: %d of %d organisations could train no classifier (fewer than two classes or too "
                "few documents); macro-F1 and accuracy count the others' documents only",
                key,
                len(organisations) - scores["organisations"],
                len(organisations),
            )
        sums[key] = {
            "npmi": npmi[key].mean,
            "macro_f1": scores["macro_f1"],
            "accuracy": scores["accuracy"],
            "classified_organisations": scores["organisations"],
        }
    return sums


def _scored(rows: list[dict[str, Any]], sums: dict[str, dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(
        [{**{k: v for k, v in r.items() if k not in ("key", "top_words")}, **sums[r["key"]]} for r in rows]
    )


def summarise_fednmf(
    sweep: dict[str, Any], organisations: list[str], params: dict[str, Any], **evaluations: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, pd.DataFrame], dict[str, plt.Figure], dict[str, Any]]:
    """Every model's scores from the organisations' sums (pooled NPMI, macro-F1, accuracy), then
    the paper's layout: Table III (coherence) and Table IV (macro-F1, accuracy) averaged over the
    numbers of topics, Fig. 2 (accuracy against topics), Fig. 3 (F1 against bytes), Fig. 4
    (accuracy against alpha and K), the paper's claims checked on our numbers, and one nested
    MLflow run per model."""
    run = from_mapping(FedNMFRunConfig, params, "fednmf")
    sums = _organisation_sums(sweep, organisations, evaluations)
    runs = _scored(sweep["results"], sums)
    columns = ("we_coherence", "npmi", "macro_f1", "accuracy", "paper_pooled_macro_f1", "paper_pooled_accuracy")
    repeats = _per_repeat(runs, columns)
    summary = pd.DataFrame(
        [
            {
                "method": m,
                **{key: _mean(part[key].tolist()) for key in (*columns, "seconds", "bytes") if key in part},
                **({f"{key}_std": _std(repeats[m].get(key, [])) for key in columns} if run.repeats > 1 else {}),
            }
            for m, part in runs.groupby("method", sort=False)
        ]
    )
    paper = [c for c in ("paper_pooled_macro_f1", "paper_pooled_accuracy") if c in summary]

    def spread(keys: tuple[str, ...]) -> list[str]:  # the repeats' standard deviations, when there are repeats
        return [f"{k}_std" for k in keys if f"{k}_std" in summary]

    tables = {
        "runs": runs,
        "table3_coherence": summary[["method", "we_coherence", "npmi", *spread(("we_coherence", "npmi"))]],
        "table4_classification": summary[["method", "macro_f1", "accuracy", *paper, *spread(("macro_f1", "accuracy"))]],
        "curves": _scored(sweep["curves"], sums) if sweep["curves"] else pd.DataFrame(),
        "heterogeneity": _scored(sweep["heterogeneity"], sums) if sweep["heterogeneity"] else pd.DataFrame(),
    }
    by_method = {row["method"]: row for row in summary.to_dict("records")}
    f1_by_repeat = {m: values.get("macro_f1", []) for m, values in repeats.items()}
    metrics = {
        "organisations": organisations,
        "topics": list(run.topics),
        "repeats": run.repeats,
        "table3": {m: {"we_coherence": r["we_coherence"], "npmi": r["npmi"]} for m, r in by_method.items()},
        "table4": {m: {k: r[k] for k in ("macro_f1", "accuracy", *paper)} for m, r in by_method.items()},
        "claims": _claims(by_method, f1_by_repeat, tables["heterogeneity"], len(organisations)),
        "curves_converged": _converged(tables["curves"], run.evaluate.curve_tolerance),
        "participation": sweep.get("participation", {}),  # per federated model: who took part, who not, why
    }
    for name, claim in metrics["claims"].items():
        logger.info("fednmf claim %s: %s", name, claim)
    figures = _figures(tables, len(organisations))
    written = {name: table for name, table in tables.items() if len(table)}  # a figure turned off writes no table
    return metrics, written, figures, _mlflow_runs(runs, written, figures)


def _figures(tables: dict[str, pd.DataFrame], organisations: int) -> dict[str, plt.Figure]:
    figures = {"fig2_accuracy_vs_topics": _figure_topics(tables["runs"])}
    if len(tables["curves"]):
        figures["fig3_f1_vs_bytes"] = _figure_bytes(tables["curves"])
    if len(tables["heterogeneity"]):
        figures["fig4_heterogeneity"] = _figure_heterogeneity(tables["heterogeneity"], organisations)
    return figures


def _mlflow_runs(runs: pd.DataFrame, tables: dict[str, pd.DataFrame], figures: dict[str, plt.Figure]) -> dict[str, Any]:
    """One nested MLflow run per method, number of topics and repeat; the tables and figures on the parent."""
    keys = ("we_coherence", "npmi", "macro_f1", "accuracy", "paper_pooled_macro_f1", "paper_pooled_accuracy")
    return {
        "runs": [
            {
                "name": model_key(r["method"], r["topics"], int(r["repeat"])),
                "params": {
                    "method": r["method"],
                    "topics": r["topics"],
                    "repeat": int(r["repeat"]),
                    "rule": _rule_label(r["method"]),
                },
                "metrics": {
                    k: float(r[k])
                    for k in (*keys, "seconds", "bytes", "rounds", "left_out")
                    if r.get(k) is not None and math.isfinite(float(r[k]))
                },
            }
            for r in runs.to_dict("records")
        ],
        "artifacts": {f"fednmf/{name}.csv": table for name, table in tables.items() if len(table)},
        "figures": {f"fednmf/{name}.png": figure for name, figure in figures.items()},
    }


def _per_repeat(runs: pd.DataFrame, columns: tuple[str, ...]) -> dict[str, dict[str, list[float]]]:
    """Each method's mean over its numbers of topics in each repeat, by measure, in repeat order."""
    out: dict[str, dict[str, list[float]]] = {}
    for (method, _), part in runs.sort_values("repeat").groupby(["method", "repeat"], sort=False):
        for key in columns:
            if key in part:
                value = _mean(part[key].tolist())
                if value is not None:
                    out.setdefault(method, {}).setdefault(key, []).append(value)
    return out


def _std(values: list[float]) -> float | None:
    return float(np.std(values, ddof=1)) if len(values) > 1 else None


NOISE_ERRORS = 2.0  # a mean paired difference within this many standard errors is noise


def judge(before: list[float], after: list[float]) -> dict[str, Any]:
    """Whether ``after`` is above ``before``, judged on their paired repeats: the mean difference,
    its standard error, and the verdict: ``holds`` or ``fails`` beyond ``NOISE_ERRORS`` standard
    errors, else ``within noise``. One repeat gives no noise estimate: its verdict is the sign."""
    differences = [b - a for a, b in zip(before, after, strict=True)]
    mean = float(np.mean(differences))
    if len(differences) < 2:
        return {"difference": mean, "repeats": 1, "verdict": "holds" if mean > 0 else "fails", "noise": "not estimated"}
    error = float(np.std(differences, ddof=1) / math.sqrt(len(differences)))
    verdict = "within noise" if abs(mean) <= NOISE_ERRORS * error else ("holds" if mean > 0 else "fails")
    return {"difference": mean, "standard_error": error, "repeats": len(differences), "verdict": verdict}


def _claims(
    by_method: Mapping[str, Mapping[str, Any]],
    f1_by_repeat: Mapping[str, list[float]],
    heterogeneity: pd.DataFrame,
    organisations: int,
) -> dict[str, Any]:
    """Seed 004's three claims (sec. IV-E), each with the numbers it was judged on (None: not run)
    and a verdict over the repeats (:func:`judge`); the alpha trend at the corpus's number of
    organisations (the sweep over K is at alpha 1, in the first repeat only)."""

    def f1(method: str) -> float | None:
        return by_method.get(method, {}).get("macro_f1")

    def paired(a: str, b: str) -> bool:
        return len(f1_by_repeat.get(a, [])) == len(f1_by_repeat.get(b, [])) > 0

    def sort(judged: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
        return {
            f"{verdict.replace(' ', '_')}_for": [m for m, j in judged.items() if j["verdict"] == verdict]
            for verdict in ("holds", "fails", "within noise")
        }

    claims: dict[str, Any] = {}
    if paired("nmf_sgd", "nmf_sgd_mi"):
        claims["mi_improves_centralized_f1"] = {
            "holds": f1("nmf_sgd_mi") > f1("nmf_sgd"),
            "nmf_sgd": f1("nmf_sgd"),
            "nmf_sgd_mi": f1("nmf_sgd_mi"),
            **judge(f1_by_repeat["nmf_sgd"], f1_by_repeat["nmf_sgd_mi"]),
        }
    judged = {m: judge(f1_by_repeat[m], f1_by_repeat[f"{m}_mi"]) for m in WEIGHT_RULES if paired(m, f"{m}_mi")}
    if judged:
        claims["mi_improves_federated_f1"] = {
            **sort(judged),
            "f1": {m: {"without": f1(m), "with_mi": f1(f"{m}_mi"), **j} for m, j in judged.items()},
        }
    fed_mi = [m for m in FEDERATED_NMF_METHODS if m.endswith("_mi") and paired("fedlda", m)]
    if fed_mi:
        judged = {m: judge(f1_by_repeat["fedlda"], f1_by_repeat[m]) for m in fed_mi}
        claims["fednmf_mi_beats_fedlda"] = {
            **sort(judged),
            "fedlda": f1("fedlda"),
            "f1": {m: {"f1": f1(m), **j} for m, j in judged.items()},
        }
    if len(heterogeneity) and f1("nmf_sgd") is not None:
        gaps = {}
        at_k = heterogeneity[heterogeneity["clients"] == organisations]
        for method, part in at_k.groupby("method"):
            by_alpha = part.groupby("alpha")["accuracy"].mean().sort_index()
            if len(by_alpha) >= 2:
                gaps[method] = {float(a): float(v) for a, v in by_alpha.items()}
        if gaps:
            claims["federated_approaches_centralized_as_alpha_grows"] = {
                "holds_for": [m for m, g in gaps.items() if _rises(list(g.values()))],
                "noise": "not estimated (the sweep over alpha runs in the first repeat only)",
                "accuracy_by_alpha": gaps,
                "centralized_accuracy": by_method.get("nmf_sgd", {}).get("accuracy"),
            }
    return claims


def _converged(curves: pd.DataFrame, tolerance: float) -> dict[str, Any]:
    """Per federated method of Fig. 3: its macro-F1 at the curve's last two rounds and whether it
    moved by at most ``tolerance`` there (converged at the reported round) or not (still moving)."""
    out: dict[str, Any] = {}
    if not len(curves) or "macro_f1" not in curves:
        return out
    for method, part in curves.sort_values("round").groupby("method", sort=False):
        f1 = [v for v in part["macro_f1"].tolist() if v is not None and math.isfinite(v)]
        if len(f1) < 2:
            continue
        change = f1[-1] - f1[-2]
        rounds = part["round"].tolist()
        out[method] = {
            "rounds": [int(rounds[-2]), int(rounds[-1])],
            "macro_f1": [f1[-2], f1[-1]],
            "change": change,
            "converged": abs(change) <= tolerance,
        }
    return out


def _rises(values: list[float]) -> bool:
    """Whether accuracy at the largest alpha is above accuracy at the smallest."""
    return values[-1] > values[0]


def _rule_label(method: str) -> str:
    """What aggregates a method's run: its weights rule, ``exact`` (summed statistics) or ``centralized``."""
    if method == EXACT_NMF_METHOD:
        return "exact"
    return rule_of(method) or "centralized"


def _style(method: str) -> dict[str, Any]:
    rule = _rule_label(method)
    return {"color": COLOURS.get(rule, "black"), "linestyle": "-" if method.endswith("_mi") else ":", "marker": "o"}


def _figure_topics(runs: pd.DataFrame) -> plt.Figure:
    figure, ax = plt.subplots(figsize=(6, 4))
    for method, part in runs.groupby("method", sort=False):
        part = part.sort_values("topics")
        if trained_federated(method):
            ax.plot(part["topics"], part["accuracy"], label=method, **_style(method))
        else:
            ax.plot(part["topics"], part["accuracy"], label=method, color="grey", alpha=0.6, marker="x")
    ax.set_xlabel("number of topics k")
    ax.set_ylabel("SVM accuracy on topic weights")
    ax.set_title("Fig. 2: accuracy against the number of topics")
    ax.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    return figure


def _figure_bytes(curves: pd.DataFrame) -> plt.Figure:
    figure, ax = plt.subplots(figsize=(6, 4))
    for method, part in curves.groupby("method", sort=False):
        ax.plot(part["bytes"] / 1e6, part["macro_f1"], label=method, **_style(method))
    ax.set_xlabel("MB communicated (updates and broadcasts)")
    ax.set_ylabel("macro-F1")
    ax.set_title(f"Fig. 3: F1 against communication ({int(curves['topics'].iloc[0])} topics)")
    ax.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    return figure


def _figure_heterogeneity(rows: pd.DataFrame, organisations: int) -> plt.Figure:
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 4))
    for method, part in rows.groupby("method", sort=False):
        by_alpha = part[part["clients"] == organisations].sort_values("alpha")
        left.plot(by_alpha["alpha"], by_alpha["accuracy"], label=method, **_style(method))
        by_k = part[part["alpha"] == 1.0].sort_values("clients")
        right.plot(by_k["clients"], by_k["accuracy"], label=method, **_style(method))
    left.set_xscale("log")
    left.set_xlabel(f"alpha (K = {organisations})")
    right.set_xlabel("number of clients K (alpha = 1)")
    for ax in (left, right):
        ax.set_ylabel("SVM accuracy")
        ax.legend(fontsize=7)
    figure.suptitle("Fig. 4: heterogeneity and number of clients")
    figure.tight_layout()
    return figure
