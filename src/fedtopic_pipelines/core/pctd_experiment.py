"""PC-TD's experiments (seed 002, Figs. 2-4) on any corpus the chain prepared.

Every model, PC-TD's and gensim LDA's, is scored by the same evaluator on the same
documents: held-out per-word perplexity by document completion (each model infers a
held-out document's topic proportions from the first half of its words, its own way: PC-TD
by noise-free E-steps on the half's semantic units, LDA by gensim's variational inference;
the second half is scored by sum_k p(w|z) p(z|d)), UMass and NPMI (gensim's measures on
the organisations' summed co-occurrence counts of their training documents) and topic
diversity. Perplexity pools too: each organisation's log-likelihood and word count add.
The held-out documents are the ingestion's test split of every organisation.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from fedtopic_pipelines.core.config import PCTDRunConfig, TrainConfig
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
    sum_counts,
)
from fedtopic_pipelines.core.metrics.topics import top_words, topic_diversity
from fedtopic_pipelines.core.models.pctd import SemanticUnits, completion_perplexity, halves, per_word_perplexity
from fedtopic_pipelines.core.privacy.accountant import gaussian_privacy
from fedtopic_pipelines.core.seeds import derive_seed
from fedtopic_pipelines.core.site import MemoryEndpoint

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


def pooled_perplexity(model: Scored, parties: Mapping[str, Party], run: PCTDRunConfig) -> tuple[float, dict]:
    """The pooled held-out perplexity (organisations' log-likelihoods and words summed) and
    each organisation's own (a secondary view)."""
    total_log, total_words, per_party = 0.0, 0, {}
    config = run.train.model
    for i, (org, party) in enumerate(parties.items()):
        if model.kind == "lda":
            perplexity, words = lda_perplexity(model.lda, party.test)
        else:
            seed = derive_seed(run.seed, 9000, i)
            perplexity, words = completion_perplexity(
                party.test.tokens,
                party.test.offsets,
                model.topic_word,
                config.unit_length,
                config.fold_in_iterations,
                seed,
            )
        per_party[org] = perplexity
        if words and math.isfinite(perplexity):
            total_log += math.log(perplexity) * words
            total_words += words
    return (math.exp(total_log / total_words) if total_words else math.nan), per_party


def score_models(
    models: Sequence[Scored], parties: Mapping[str, Party], terms: Sequence[str], run: PCTDRunConfig
) -> None:
    """Perplexity, UMass, NPMI and diversity of every model, in place."""
    words = {m.name: top_words(m.topic_word, terms, run.top_words) for m in models}
    candidates = CoherenceCandidates.from_topics(t for topics in words.values() for t in topics)
    contexts = sorted({context_of(m) for m in MEASURES})
    counts = sum_counts(count_cooccurrences(_texts(p.train, terms), candidates, contexts) for p in parties.values())
    coherence = {measure: coherence_by_model(words, candidates, counts, measure) for measure in MEASURES}
    for model in models:
        perplexity, per_party = pooled_perplexity(model, parties, run)
        model.scores = {
            "perplexity": perplexity,
            **{f"perplexity.{org}": value for org, value in per_party.items()},
            "umass": coherence["u_mass"][model.name].mean,
            "npmi": coherence["c_npmi"][model.name].mean,
            "diversity": topic_diversity(top_words(model.topic_word, terms, run.diversity_words)),
        }


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
    parties: Mapping[str, Party],
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
        endpoints = [MemoryEndpoint("server", concatenate([p.train for p in parties.values()]))]
    else:
        endpoints = [MemoryEndpoint(org, p.train) for org, p in parties.items()]
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


def run_figures(
    run: PCTDRunConfig, parties: Mapping[str, Party], vocabulary: pd.DataFrame, progress: bool = True
) -> dict[str, Any]:
    """Fig. 2 (federated perplexity against iterations for each sigma, with its epsilon), Fig. 4
    (coherence against topics: federated, centralized, pooled LDA). Fig. 3 is the main models'."""
    terms = vocabulary["term"].tolist()
    steps = int(run.train.max_steps)
    marks = {max(1, round(steps * (i + 1) / run.curve_points)) for i in range(run.curve_points)}
    curves: list[dict[str, Any]] = []
    for sigma in run.sigmas:
        config = _pctd_config(run, sigma=sigma)
        started = time.perf_counter()
        _, _, snapshots = federated_run(config, parties, vocabulary, f"sigma-{sigma:g}", marks, progress=progress)
        seconds = time.perf_counter() - started
        models = [Scored(f"sigma-{sigma:g}@{r}", "pctd", phi) for r, phi in snapshots]
        score_models(models, parties, terms, run)
        for (round_, _), model in zip(snapshots, models, strict=True):
            curves.append(
                {"sigma": sigma, "iterations": round_, **privacy_of(config, round_), **model.scores, "seconds": seconds}
            )
        logger.info(
            "PC-TD sigma %g: perplexity %.1f after %d iterations", sigma, models[-1].scores["perplexity"], steps
        )
    sweep: list[dict[str, Any]] = []
    pooled = concatenate([p.train for p in parties.values()])
    for topics in run.topics:
        config = _pctd_config(run, topics=topics)
        federated, _, _ = federated_run(config, parties, vocabulary, f"federated-{topics}", progress=progress)
        central, _, _ = federated_run(
            _pctd_config(run, sigma=0.0, topics=topics),
            parties,
            vocabulary,
            f"centralized-{topics}",
            centralized=True,
            progress=progress,
        )
        lda = train_lda(pooled, topics, run)
        models = [
            Scored(f"federated-{topics}", "pctd", federated),
            Scored(f"centralized-{topics}", "pctd", central),
            Scored(f"lda_pooled-{topics}", "lda", lda_topics(lda), lda=lda),
        ]
        score_models(models, parties, terms, run)
        for model in models:
            sweep.append({"model": model.name.rsplit("-", 1)[0], "topics": topics, **model.scores})
    return {"curves": curves, "topics": sweep}
