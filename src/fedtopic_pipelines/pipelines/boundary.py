"""The organisation boundary, checked on the pipeline graph.

Every dataset of an organisation lives in its namespace (``clients.<org>.*``: raw shards,
tokens, bags of words, embeddings, sequences, labels). A node reads such a dataset only from
inside that namespace (``clients.<org>``, or a pipeline's own namespace around it, such as
``realdata.clients.<org>``), except the nodes of :data:`ALLOWED`, each with the reason why.
The registry refuses to build a pipeline that breaks this, so the boundary is structure: a
node added without an entry here cannot run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kedro.pipeline import Pipeline

from fedtopic_pipelines.core.config import ConfigError

_PRIVATE = re.compile(r"^clients\.(?P<org>\w+)\.(?P<dataset>.+)$")

SIMULATION = (
    "the in-process simulation of a federation: one endpoint per organisation, each answering only "
    "the server's queries and instructions as a remote node would (with `engine: flower` the nodes "
    "read their own data)"
)

#: node name -> (the private datasets it may read, the reason)
ALLOWED: Mapping[str, tuple[frozenset[str], str]] = {
    "train_models": (frozenset({"bow", "embeddings"}), SIMULATION),
    "train_realdata_models": (frozenset({"bow", "embeddings"}), SIMULATION),
    "train_compared_models": (
        frozenset({"bow", "compare_embeddings"}),
        SIMULATION + "; the centralized scenario of each family is a pooled baseline named as such",
    ),
    "train_pctd": (frozenset({"pctd_train"}), SIMULATION + "; the centralized scenario is a pooled baseline"),
    "train_pctd_baselines": (
        frozenset({"pctd_train"}),
        "baselines named as such: gensim LDA on the pooled documents (lda_pooled) and on each party "
        "alone (lda_local__<org>)",
    ),
    "train_pctd_sweeps": (
        frozenset({"pctd_train"}),
        SIMULATION + "; the paper's Fig. 4 adds a centralized PC-TD and LDA on the pooled documents (named as such)",
    ),
    "run_fednmf": (
        frozenset({"bow"}),
        SIMULATION + "; the centralized rows (lda, nmf, nmf_sgd*) are pooled baselines named as such; "
        "the paper's own pooled SVM protocol (paper_pooled_*) and Fig. 4's re-partition of the pooled "
        "training documents into simulated organisations",
    ),
    "train_word2vec": (frozenset({"sentences"}), SIMULATION),
    "train_word2vec_reference": (
        frozenset({"sentences"}),
        "a pooled baseline named as such: gensim Word2Vec on every organisation's sentences",
    ),
    "score_vocabulary_attack": (
        frozenset({"term_counts"}),
        "the privacy audit: the vocabulary attack is scored against each organisation's true terms",
    ),
    "report_privacy": (
        frozenset({"bow"}),
        "the privacy audit: membership inference needs members and non-members of each organisation",
    ),
}


@dataclass(frozen=True)
class Crossing:
    """A node outside an organisation's namespace that reads one of its datasets."""

    node: str
    namespace: str | None
    dataset: str

    def __str__(self) -> str:
        where = f"namespace '{self.namespace}'" if self.namespace else "the server (no namespace)"
        return f"node '{self.node}' in {where} reads '{self.dataset}'"


def _inside(namespace: str | None, org: str) -> bool:
    """Whether a namespace is organisation ``org``'s (``clients.<org>`` anywhere in it)."""
    parts = (namespace or "").split(".")
    return any(parts[i : i + 2] == ["clients", org] for i in range(len(parts) - 1))


def crossings(pipeline: Pipeline, allowed: Mapping[str, tuple[frozenset[str], str]] = ALLOWED) -> list[Crossing]:
    """Every read of an organisation's dataset from outside its namespace that ``allowed`` does not cover."""
    found = []
    for node in pipeline.nodes:
        for dataset in node.inputs:
            match = _PRIVATE.match(dataset)
            if match is None or _inside(node.namespace, match["org"]):
                continue
            permitted, _ = allowed.get(node.name, (frozenset(), ""))
            if match["dataset"] not in permitted:
                found.append(Crossing(node.name, node.namespace, dataset))
    return found


def check_boundary(name: str, pipeline: Pipeline) -> Pipeline:
    """``pipeline``, or a refusal naming every node that reads across the boundary."""
    found = crossings(pipeline)
    if found:
        listed = "; ".join(str(c) for c in found)
        raise ConfigError(
            f"pipeline '{name}' breaks the organisation boundary: {listed}. A node reads an organisation's "
            "data only inside its namespace 'clients.<org>' (or is listed, with its reason, in "
            "fedtopic_pipelines/pipelines/boundary.py ALLOWED)"
        )
    return pipeline


def unused_entries(pipelines: Iterable[Pipeline]) -> set[str]:
    """Allow-list entries that no pipeline's node uses (a stale entry widens the boundary)."""
    names = {node.name for pipeline in pipelines for node in pipeline.nodes}
    return set(ALLOWED) - names
