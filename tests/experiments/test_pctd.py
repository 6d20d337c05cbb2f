"""PC-TD's evaluation inside the organisations: the server's sums equal the pooled evaluation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedtopic_pipelines.core.families.word2vec import Sentences, concatenate
from fedtopic_pipelines.core.metrics.coherence import (
    CoherenceCandidates,
    coherence_by_model,
    context_of,
    count_cooccurrences,
)
from fedtopic_pipelines.core.metrics.topics import top_words
from fedtopic_pipelines.core.models.pctd import completion_perplexity
from fedtopic_pipelines.core.seeds import derive_seed
from fedtopic_pipelines.experiments.config import PCTDRunConfig
from fedtopic_pipelines.experiments.pctd import (
    MEASURES,
    Party,
    Scored,
    _texts,
    combine_scores,
    lda_topics,
    organisation_scores,
    train_lda,
)

VOCAB = 12
TERMS = [f"w{i}" for i in range(VOCAB)]


def _sentences(rng: np.random.Generator, documents: int) -> Sentences:
    lengths = rng.integers(4, 12, documents)
    tokens = rng.integers(0, VOCAB, int(lengths.sum()))
    return Sentences(tokens, np.concatenate([[0], np.cumsum(lengths)]), np.ones(VOCAB))


@pytest.fixture(scope="module")
def setting():
    rng = np.random.default_rng(3)
    parties = {org: Party(_sentences(rng, 30), _sentences(rng, 10)) for org in ("a", "b", "c")}
    run = PCTDRunConfig(top_words=4, diversity_words=4)
    phi = rng.dirichlet(np.ones(VOCAB), 3)
    lda = train_lda(concatenate([p.train for p in parties.values()]), 3, run.replace(lda=run.lda.replace(passes=2)))
    return parties, run, phi, lda


def score_models(models: list[Scored], parties: dict[str, Party], terms: list[str], run: PCTDRunConfig) -> None:
    """Every organisation's scores, then the server's sums, in one process."""
    sent = {org: organisation_scores(models, party, i, terms, run) for i, (org, party) in enumerate(parties.items())}
    combine_scores(models, sent, terms, run)


def _models(phi: np.ndarray, lda) -> list[Scored]:
    return [Scored("pctd", "pctd", phi), Scored("lda", "lda", lda_topics(lda), lda=lda)]


def test_the_summed_scores_equal_the_pooled_evaluation(setting) -> None:
    parties, run, phi, lda = setting
    models = _models(phi, lda)
    score_models(models, parties, TERMS, run)
    # coherence: the organisations' summed counts give what counting the pooled texts gives
    words = {m.name: top_words(m.topic_word, TERMS, run.top_words) for m in models}
    candidates = CoherenceCandidates.from_topics(t for topics in words.values() for t in topics)
    texts = [t for p in parties.values() for t in _texts(p.train, TERMS)]
    pooled = count_cooccurrences(texts, candidates, sorted({context_of(m) for m in MEASURES}))
    for measure, key in (("u_mass", "umass"), ("c_npmi", "npmi")):
        expected = coherence_by_model(words, candidates, pooled, measure)
        for model in models:
            assert model.scores[key] == pytest.approx(expected[model.name].mean, abs=1e-12)
    # perplexity: each organisation's own (its seeded fold-in), pooled by log-likelihood and words
    log_sum, words_sum = 0.0, 0
    for i, (org, party) in enumerate(parties.items()):
        value, scored = completion_perplexity(
            party.test.tokens,
            party.test.offsets,
            phi,
            run.train.model.unit_length,
            run.train.model.fold_in_iterations,
            derive_seed(run.seed, 9000, i),
        )
        assert models[0].scores[f"perplexity.{org}"] == value
        log_sum, words_sum = log_sum + math.log(value) * scored, words_sum + scored
    assert models[0].scores["perplexity"] == pytest.approx(math.exp(log_sum / words_sum), rel=1e-12)


def test_an_organisations_scores_depend_neither_on_the_others_nor_on_the_order(setting) -> None:
    parties, run, phi, lda = setting
    together = {
        org: organisation_scores(_models(phi, lda), party, i, TERMS, run)
        for i, (org, party) in enumerate(parties.items())
    }
    alone = organisation_scores(_models(phi, lda), parties["c"], 2, TERMS, run)
    assert alone == together["c"]  # LDA's inference too: each organisation seeds its own copy
    again = organisation_scores(_models(phi, lda), parties["c"], 2, TERMS, run)
    assert again == alone
    assert set(alone) == {"counts", "perplexity"}  # only counts and sums leave
