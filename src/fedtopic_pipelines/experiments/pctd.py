"""PC-TD's experiments (seed 002, Figs. 2-4) on any corpus the chain prepared.

Every model, PC-TD's and gensim LDA's, is scored by the same evaluator on the same
documents: held-out per-word perplexity by document completion (each model infers a
held-out document's topic proportions from the first half of its words, its own way: PC-TD
by noise-free E-steps on the half's semantic units, LDA by gensim's variational inference;
the second half is scored by sum_k p(w|z) p(z|d)), UMass and NPMI (gensim's measures on
the organisations' summed co-occurrence counts of their training documents) and topic
diversity. Perplexity pools too: each organisation's log-likelihood and word count add.
The held-out documents are the ingestion's test split of every organisation.

The evaluation runs inside the organisations (:func:`organisation_scores`: counts,
perplexities and words scored are all that leave one) and sums at the server
(:func:`combine_scores`); the server trains (the in-process simulation of the federation and
the pooled baselines, :func:`train_figure_models`) but reads no held-out document.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.families.pctd import noise_multiplier
from fedtopic_pipelines.core.families.word2vec import Sentences, concatenate
from fedtopic_pipelines.core.federated.engine import InProcessEngine
from fedtopic_pipelines.core.federated.server import FederatedServer
from fedtopic_pipelines.core.federation import run_federation
from fedtopic_pipelines.core.metrics.coherence import (
    CoherenceCandidates,
    coherence_by_model,
    context_of,
    count_cooccurrences,
    counts_from_dict,
    counts_to_dict,
    sum_counts,
)
from fedtopic_pipelines.core.metrics.topics import redundancy, top_words, topic_diversity
from fedtopic_pipelines.core.models.pctd import SemanticUnits, completion_perplexity, halves, per_word_perplexity
from fedtopic_pipelines.core.privacy.accountant import gaussian_privacy
from fedtopic_pipelines.core.seeds import derive_seed
from fedtopic_pipelines.core.site import MemoryEndpoint
from fedtopic_pipelines.experiments.config import PCTDRunConfig

logger = logging.getLogger(__name__)

MEASURES = ("u_mass", "c_npmi")


@dataclass
class Party:
    """One organisation's documents over the common vocabulary: training and held-out."""

    train: Sentences
    test: Sentences


@dataclass
class Scored:
    """A model's topics and what the evaluator said of them."""

    name: str
    kind: str  # pctd | lda
    topic_word: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)
    lda: Any = None  # the gensim model (its inference folds held-out halves in)
    scores: dict[str, float | None] = field(default_factory=dict)


def _texts(data: Sentences, terms: Sequence[str]) -> list[list[str]]:
    return [[terms[i] for i in data.tokens[a:b]] for a, b in zip(data.offsets[:-1], data.offsets[1:], strict=True)]


def _bow(data: Sentences) -> sp.csr_matrix:
    """The documents' bag of words (units of one word, summed per document)."""
    return SemanticUnits.from_sequences(data.tokens, data.offsets, data.shape[1], 1).document_counts()


def _gensim_corpus(matrix: sp.csr_matrix) -> list[list[tuple[int, float]]]:
    from gensim.matutils import Sparse2Corpus

    return list(Sparse2Corpus(matrix, documents_columns=False))


def lda_perplexity(lda: Any, data: Sentences) -> tuple[float, int]:
    """Document completion for a gensim LDA model: its inference on the first halves, the
    second halves scored (the same split and score as PC-TD's)."""
    head, head_offsets, tail, tail_offsets = halves(data.tokens, data.offsets)
    first = _bow(Sentences(head, head_offsets, data.frequencies))
    gamma, _ = lda.inference(_gensim_corpus(first))
    theta = gamma / gamma.sum(axis=1, keepdims=True)
    return per_word_perplexity(_bow(Sentences(tail, tail_offsets, data.frequencies)), lda_topics(lda), theta), len(tail)


def lda_topics(lda: Any) -> np.ndarray:
    topics = lda.get_topics().astype(np.float64)
    return topics / topics.sum(axis=1, keepdims=True)


def train_lda(data: Sentences, topics: int, run: PCTDRunConfig) -> Any:
    """gensim ``LdaModel`` in batch mode (one M-step per pass) on ``data``."""
    from gensim.models import LdaModel

    return LdaModel(
        corpus=_gensim_corpus(_bow(data)),
        id2word={i: str(i) for i in range(data.shape[1])},
        num_topics=topics,
        passes=run.lda.passes,
        iterations=run.lda.iterations,
        chunksize=max(1, data.shape[0]),
        update_every=0,
        random_state=run.seed,
    )


def party_perplexity(model: Scored, party: Party, index: int, run: PCTDRunConfig) -> tuple[float, int]:
    """Inside organisation number ``index``: ``model``'s completion perplexity on its held-out
    documents and the words scored. Each organisation's fold-in draws from its own seeded stream
    (LDA's too: its inference starts from a copy of the model seeded for that organisation), so
    the result depends on neither the order nor the number of organisations evaluated."""
    if model.kind == "lda":
        lda = copy.copy(model.lda)
        lda.random_state = np.random.RandomState(derive_seed(run.seed, 9100, index) % 2**32)
        return lda_perplexity(lda, party.test)
    config = run.train.model
    return completion_perplexity(
        party.test.tokens,
        party.test.offsets,
        model.topic_word,
        config.unit_length,
        config.fold_in_iterations,
        derive_seed(run.seed, 9000, index),
    )


def _candidates(models: Sequence[Scored], terms: Sequence[str], run: PCTDRunConfig) -> tuple[dict, CoherenceCandidates]:
    words = {m.name: top_words(m.topic_word, terms, run.top_words) for m in models}
    return words, CoherenceCandidates.from_topics(t for topics in words.values() for t in topics)


def organisation_scores(
    models: Sequence[Scored], party: Party, index: int, terms: Sequence[str], run: PCTDRunConfig
) -> dict[str, Any]:
    """What one organisation sends for the evaluation of ``models``: the co-occurrence counts of
    the models' top words in its training documents, and each model's perplexity on its held-out
    documents with the number of words scored. Computed inside the organisation; only these
    numbers leave it, and their sums are what a pooled evaluation would give."""
    _, candidates = _candidates(models, terms, run)
    contexts = sorted({context_of(m) for m in MEASURES})
    counts = count_cooccurrences(_texts(party.train, terms), candidates, contexts)
    perplexity = {}
    for model in models:
        value, words = party_perplexity(model, party, index, run)
        perplexity[model.name] = {"perplexity": float(value), "words": int(words)}
    return {"counts": counts_to_dict(counts), "perplexity": perplexity}


def combine_scores(
    models: Sequence[Scored],
    per_organisation: Mapping[str, Mapping[str, Any]],
    terms: Sequence[str],
    run: PCTDRunConfig,
) -> None:
    """At the server, in place: every model's pooled perplexity (the organisations' log-likelihoods
    and words summed) and each organisation's own (a secondary view), UMass and NPMI from the
    summed counts, and topic diversity (from the topics alone)."""
    words, candidates = _candidates(models, terms, run)
    counts = sum_counts(counts_from_dict(sent["counts"], candidates) for sent in per_organisation.values())
    coherence = {measure: coherence_by_model(words, candidates, counts, measure) for measure in MEASURES}
    for model in models:
        total_log, total_words, per_party = 0.0, 0, {}
        for org, sent in per_organisation.items():
            perplexity, scored = sent["perplexity"][model.name]["perplexity"], sent["perplexity"][model.name]["words"]
            per_party[org] = perplexity
            if scored and math.isfinite(perplexity):
                total_log += math.log(perplexity) * scored
                total_words += scored
        model.scores = {
            "perplexity": math.exp(total_log / total_words) if total_words else math.nan,
            **{f"perplexity.{org}": value for org, value in per_party.items()},
            "umass": coherence["u_mass"][model.name].mean,
            "npmi": coherence["c_npmi"][model.name].mean,
            "diversity": topic_diversity(top_words(model.topic_word, terms, run.diversity_words)),
        }
        found = redundancy(words[model.name])
        model.scores |= {"largest_topic_overlap": found.largest_overlap, "inverted_rbo": found.inverted_rbo}


def _pctd_config(run: PCTDRunConfig, sigma: float | None = None, topics: int | None = None) -> TrainConfig:
    model = run.train.model
    changes: dict[str, Any] = {}
    if sigma is not None:
        changes.update(sigma=sigma, target_epsilon=None)
    if topics is not None:
        changes["n_topics"] = topics
    return run.train.replace(model=model.model_copy(update=changes), scenarios=("federated",))


def privacy_of(config: TrainConfig, steps: int) -> dict[str, float | None]:
    """(epsilon, delta) of ``steps`` iterations at the run's noise, by RDP and PLD; without
    noise (sigma 0) there is no guarantee: epsilon None (JSON null), not a number."""
    sigma = noise_multiplier(config)
    spent = gaussian_privacy(sigma, steps, config.model.delta)
    finite = sigma > 0
    return {
        "sigma": sigma,
        "delta": config.model.delta,
        "epsilon_rdp": spent.epsilon_rdp if finite else None,
        "epsilon_pld": spent.epsilon_pld if finite else None,
    }


def federated_run(
    config: TrainConfig,
    train: Mapping[str, Sentences],
    vocabulary: pd.DataFrame,
    name: str,
    marks: set[int] | None = None,
    centralized: bool = False,
    progress: bool = True,
) -> tuple[np.ndarray, list, list[tuple[int, np.ndarray]]]:
    """One PC-TD run in process: the final p(w|z), its history and p(w|z) at the ``marks`` rounds."""
    snapshots: list[tuple[int, np.ndarray]] = []

    def observe(server: FederatedServer) -> None:
        if marks and server.next_round in marks:
            snapshots.append((server.next_round, server.strategy.model.phi.detach().numpy().copy()))

    if centralized:
        endpoints = [MemoryEndpoint("server", concatenate(list(train.values())))]
    else:
        endpoints = [MemoryEndpoint(org, documents) for org, documents in train.items()]
    result = run_federation(
        InProcessEngine(endpoints),
        [e.name for e in endpoints],
        config,
        vocabulary=vocabulary,
        name=name,
        progress=progress,
        on_round_end=observe,
    )
    return result.model.state["phi"].numpy(), result.model.history, snapshots


def train_figure_models(
    run: PCTDRunConfig, train: Mapping[str, Sentences], vocabulary: pd.DataFrame, progress: bool = True
) -> list[Scored]:
    """The models of Fig. 2 (federated p(w|z) at ``curve_points`` iterations for each sigma) and
    Fig. 4 (federated, centralized and pooled LDA at each number of topics), trained: the
    server's part. Each carries in ``info`` the figure it belongs to; the organisations score
    them (:func:`organisation_scores`) and :func:`figure_rows` lays the sums out."""
    steps = int(run.train.max_steps)
    marks = {max(1, round(steps * (i + 1) / run.curve_points)) for i in range(run.curve_points)}
    models: list[Scored] = []
    for sigma in run.sigmas:
        config = _pctd_config(run, sigma=sigma)
        started = time.perf_counter()
        _, _, snapshots = federated_run(config, train, vocabulary, f"sigma-{sigma:g}", marks, progress=progress)
        seconds = time.perf_counter() - started
        for round_, phi in snapshots:
            info = {"figure": "curves", "sigma": sigma, "iterations": round_, **privacy_of(config, round_)}
            models.append(Scored(f"sigma-{sigma:g}@{round_}", "pctd", phi, info={**info, "seconds": seconds}))
    pooled = concatenate(list(train.values()))
    for topics in run.topics:
        config = _pctd_config(run, topics=topics)
        federated, _, _ = federated_run(config, train, vocabulary, f"federated-{topics}", progress=progress)
        central, _, _ = federated_run(
            _pctd_config(run, sigma=0.0, topics=topics),
            train,
            vocabulary,
            f"centralized-{topics}",
            centralized=True,
            progress=progress,
        )
        lda = train_lda(pooled, topics, run)
        for model, kind, phi in (("federated", "pctd", federated), ("centralized", "pctd", central)):
            models.append(Scored(f"{model}-{topics}", kind, phi, info={"figure": "topics", "topics": topics}))
        models.append(
            Scored(f"lda_pooled-{topics}", "lda", lda_topics(lda), {"figure": "topics", "topics": topics}, lda)
        )
    return models


def figure_rows(models: Sequence[Scored]) -> dict[str, Any]:
    """Fig. 2's curve points and Fig. 4's rows from the scored figure models."""
    curves, sweep = [], []
    for model in models:
        info = {k: v for k, v in model.info.items() if k not in ("figure", "seconds")}
        if model.info["figure"] == "curves":
            curves.append({**info, **model.scores, "seconds": model.info["seconds"]})
        else:
            sweep.append({"model": model.name.rsplit("-", 1)[0], "topics": info["topics"], **model.scores})
    for sigma in dict.fromkeys(point["sigma"] for point in curves):
        last = [point for point in curves if point["sigma"] == sigma][-1]
        logger.info(
            "PC-TD sigma %g: perplexity %.1f after %d iterations", sigma, last["perplexity"], last["iterations"]
        )
    return {"curves": curves, "topics": sweep}
