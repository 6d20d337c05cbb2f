"""Average Minimum Word Mover's Distance between two models' topics (gFedNTM eq. 7, Fig. 4).

A topic's text description is its top words. For a node's model l and an evaluated model,

    AMWMD(l, eval) = sum_k min_k' WMD(TD_k(l), TD_k'(eval))

over the node model's K topics, with gensim's ``KeyedVectors.wmdistance`` (POT's exact EMD
over word-vector distances). The paper prints the sum; the name says average, and Fig. 4
compares 10- and 25-topic federated models against the same node models, so both are
kept: ``total`` is eq. 7 as printed, ``mean`` (total / topics scored) is the headline,
comparable between node models of different K. Zero when a model is compared with itself.

gensim drops words without a vector silently and returns infinity for a description left
empty; here those words are counted, and a topic left with no known word is excluded and
counted (``undefined_topics``), never turned into an infinite or silently shorter score.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd
from tqdm.auto import tqdm

from fedtopic_pipelines.core.text.word_vectors import WordVectorsError

logger = logging.getLogger(__name__)

# one error for word vectors that cannot be loaded (core/text/word_vectors.py) and for topics
# they cannot compare: a caller catches either name
AMWMDError = WordVectorsError


@dataclass(frozen=True)
class AMWMDResult:
    """Eq. 7 for one (node model, evaluated model) pair, and what it left out."""

    total: float  # eq. 7 as printed: the sum over the node's scored topics
    mean: float  # total / topics scored (the headline)
    topics: int  # node topics scored
    undefined_topics: int  # node topics with no word that has a vector (left out)
    missing_words: int  # top words of either model without a vector (dropped from descriptions)


def _known(topics: Sequence[Sequence[str]], vectors) -> tuple[list[list[str]], int]:
    kept, missing = [], 0
    for topic in topics:
        words = [w for w in topic if w in vectors.key_to_index]
        missing += len(topic) - len(words)
        kept.append(words)
    return kept, missing


def amwmd(node_topics: Sequence[Sequence[str]], eval_topics: Sequence[Sequence[str]], vectors) -> AMWMDResult:
    """Eq. 7 between a node's topics and an evaluated model's (each a list of top words)."""
    node, missing_node = _known(node_topics, vectors)
    other, missing_other = _known(eval_topics, vectors)
    usable = [t for t in other if t]
    if not usable:
        raise AMWMDError("the evaluated model has no topic with a word that has a vector")
    total, scored, undefined = 0.0, 0, 0
    for words in node:
        if not words:
            undefined += 1
            continue
        total += min(float(vectors.wmdistance(words, candidate)) for candidate in usable)
        scored += 1
    mean = total / scored if scored else math.nan
    return AMWMDResult(total, mean, scored, undefined, missing_node + missing_other)


def amwmd_matrix(
    node_topics: Mapping[str, Sequence[Sequence[str]]],
    models: Mapping[str, Sequence[Sequence[str]]],
    vectors,
    progress: bool = True,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fig. 4's table: rows the nodes (their own models' topics), columns the evaluated models;
    the mean AMWMD in each cell, and a second table of what each cell left out."""
    values = pd.DataFrame(index=list(node_topics), columns=list(models), dtype=float)
    left_out = []
    pairs = [(n, m) for n in node_topics for m in models]
    for node, model in tqdm(pairs, desc="AMWMD (node x model)", disable=not progress):
        result = amwmd(node_topics[node], models[model], vectors)
        values.loc[node, model] = result.mean
        left_out.append(
            {
                "node": node,
                "model": model,
                "total": result.total,
                "topics": result.topics,
                "undefined_topics": result.undefined_topics,
                "missing_words": result.missing_words,
            }
        )
    return values, pd.DataFrame(left_out)
