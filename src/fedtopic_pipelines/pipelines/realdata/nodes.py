"""Nodes of ``realdata`` (gFedNTM sec. 4.2, Fig. 4).

Each organisation's own model at ``realdata.node_topics`` topics describes its collection;
a federated model is trained at each of ``realdata.federated_topics``. AMWMD (eq. 7)
measures how far every model's topics are from each node's; the paper's claim is that the
federated models characterise every node's topics better than any other node's model.
Pooled NPMI and diversity of the same models come from the federated evaluation.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from fedtopic_pipelines.core.config import RealDataConfig, TrainConfig, from_mapping
from fedtopic_pipelines.core.metrics.amwmd import amwmd_matrix
from fedtopic_pipelines.core.model_store import TrainedModel
from fedtopic_pipelines.core.text.word_vectors import load_word_vectors
from fedtopic_pipelines.core.training import train_scenarios
from fedtopic_pipelines.pipelines.evaluate.nodes import model_topics
from fedtopic_pipelines.pipelines.reports import metric_series
from fedtopic_pipelines.pipelines.train.nodes import training_matrices

logger = logging.getLogger(__name__)
LOCAL = "local__"


def train_experiment(
    train: dict[str, Any],
    realdata: dict[str, Any],
    organisations: list[str],
    common_vocabulary: pd.DataFrame,
    **inputs: Any,
) -> dict[str, TrainedModel]:
    """Each organisation's own model (``local__<org>``) and one federated model per topic count
    (``federated_<K>``), of the ``train`` block's family and settings."""
    config = TrainConfig.from_params(train)
    experiment = from_mapping(RealDataConfig, realdata, "realdata")
    matrices = training_matrices(config, organisations, common_vocabulary, inputs)

    def at(k: int, scenario: str) -> TrainConfig:
        return config.replace(scenarios=(scenario,), model=config.model.replace(n_topics=k))

    models = train_scenarios(matrices, at(experiment.node_topics, "non_collaborative"), vocabulary=common_vocabulary)
    for k in experiment.federated_topics:
        federated = train_scenarios(matrices, at(k, "federated"), vocabulary=common_vocabulary)["federated"]
        models[f"federated_{k}"] = dataclasses.replace(federated, name=f"federated_{k}")
    return models


def compare_topics(
    models: dict[str, TrainedModel],
    vocabulary: pd.DataFrame,
    metrics: dict[str, Any],
    realdata: dict[str, Any],
    organisations: list[str],
) -> tuple[dict[str, Any], plt.Figure, dict[str, list[dict[str, float]]]]:
    """AMWMD of every model against each node's own topics (Fig. 4's matrix), with each model's
    pooled NPMI and topic diversity beside it, as JSON, a figure and MLflow metrics
    (``realdata.amwmd.<node>.<model>``, ``realdata.best_other_node.<node>``,
    ``realdata.pooled.<model>.<measure>``)."""
    experiment = from_mapping(RealDataConfig, realdata, "realdata")
    topics = model_topics(models, vocabulary, experiment.top_words)
    nodes = {org: topics[LOCAL + org] for org in organisations}
    vectors = load_word_vectors(experiment.word_vectors, "realdata.word_vectors", experiment.trust_pickle)
    values, left_out = amwmd_matrix(nodes, topics, vectors)
    federated = [name for name in models if name.startswith("federated_")]
    claim = {}
    for org in organisations:
        others = [float(values.loc[org, LOCAL + o]) for o in organisations if o != org]
        best_other = min(others) if others else float("nan")
        mine = {name: float(values.loc[org, name]) for name in federated}
        claim[org] = {
            "best_other_node": best_other,
            **mine,
            "federated_better_than_every_other_node": {name: bool(mine[name] < best_other) for name in federated},
        }
    scores = {name: {m: metrics["models"][name].get(m) for m in ("c_npmi", "topic_diversity")} for name in models}
    result = {
        "definition": "mean over the node model's topics of the smallest WMD to any of the model's topics "
        "(gFedNTM eq. 7 divided by the topics scored); 0 for a node's own model",
        "word_vectors": experiment.word_vectors,
        "top_words": experiment.top_words,
        "amwmd": {org: {m: float(values.loc[org, m]) for m in values.columns} for org in organisations},
        "left_out": left_out.to_dict(orient="records"),
        "claim": claim,
        "pooled": scores,
    }
    for org, entry in claim.items():
        logger.info(
            "AMWMD of %s's topics: best other node %.3f, %s",
            org,
            entry["best_other_node"],
            ", ".join(f"{n} {entry[n]:.3f}" for n in federated),
        )
    numbers = {"amwmd": result["amwmd"], "best_other_node": {org: c["best_other_node"] for org, c in claim.items()}}
    return result, figure(values, scores, organisations), metric_series({**numbers, "pooled": scores})


def figure(values: pd.DataFrame, scores: dict[str, dict[str, Any]], organisations: list[str]) -> plt.Figure:
    """Fig. 4's layout: AMWMD per node (rows) and model (columns); pooled NPMI and diversity below."""
    columns = list(values.columns)
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(1.2 * len(columns) + 3, 0.55 * len(organisations) + 4.5), height_ratios=[len(organisations), 2]
    )
    image = top.imshow(values.to_numpy(dtype=float), cmap="viridis_r", aspect="auto")
    top.set_xticks(range(len(columns)), [c.removeprefix(LOCAL) for c in columns], rotation=30, ha="right")
    top.set_yticks(range(len(organisations)), organisations)
    top.set_xlabel("model evaluated (node models by organisation; federated by topics)")
    top.set_ylabel("topics of node")
    for i, org in enumerate(organisations):
        for j, column in enumerate(columns):
            top.text(j, i, f"{values.loc[org, column]:.2f}", ha="center", va="center", fontsize=8, color="w")
    fig.colorbar(image, ax=top, label="AMWMD (mean over the node's topics)")
    top.set_title("AMWMD between the nodes' and every model's topics (gFedNTM Fig. 4)")
    width = 0.4
    xs = range(len(columns))
    bottom.bar([x - width / 2 for x in xs], [scores[c]["c_npmi"] or 0 for c in columns], width, label="pooled NPMI")
    bottom.bar(
        [x + width / 2 for x in xs],
        [scores[c]["topic_diversity"] or 0 for c in columns],
        width,
        label="topic diversity",
    )
    bottom.set_xticks(list(xs), [c.removeprefix(LOCAL) for c in columns], rotation=30, ha="right")
    bottom.axhline(0, color="k", linewidth=0.5)
    bottom.legend(fontsize=8)
    fig.tight_layout()
    return fig
