"""LDA through the engine against gensim's batch ``LdaModel`` on the pooled documents (FedLDA).

The federation runs in process (one endpoint per organisation, the server's rounds, the
validation of every update). An organisation's E-step is gensim's own, from the broadcast
topics, so its counts are gensim's on its documents; the server's M-step is gensim's blend.
Where gensim draws every document's starting gamma from one stream, each organisation draws
its own: the federation equals gensim to the E-step's tolerance, which is measured here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from gensim.models import LdaModel

from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.families import get_family
from fedtopic_pipelines.core.federated.aggregation import UpdateRejected
from fedtopic_pipelines.core.federated.messages import Update, UpdateKind
from fedtopic_pipelines.core.metrics.perplexity import completion_perplexity
from fedtopic_pipelines.core.models.lda import as_corpus
from tests.core.families import federate

CPU = torch.device("cpu")
VOCAB, TOPICS = 60, 4


def _config(**train) -> TrainConfig:
    return TrainConfig.from_params(
        {
            "model": {"family": "lda", "n_topics": TOPICS, "gamma_threshold": 1e-6, "iterations": 200},
            "max_steps": 15,
            "seed": 3,
            "device": "cpu",
            "scenarios": ["federated"],
            **train,
        }
    )


def _data() -> dict[str, sp.csr_matrix]:
    """Three organisations' documents drawn from four topics over 60 words (15 words each, with
    a little of every word), 40, 60 and 80 documents of 30 tokens; each organisation leans to
    other topics."""
    rng = np.random.default_rng(0)
    topics = np.full((TOPICS, VOCAB), 0.02)
    for t in range(TOPICS):
        topics[t, t * 15 : (t + 1) * 15] = 1.0
    topics /= topics.sum(axis=1, keepdims=True)
    out = {}
    for i, (org, n) in enumerate(zip("abc", (40, 60, 80), strict=True)):
        lean = np.ones(TOPICS)
        lean[i] = 4.0
        theta = rng.dirichlet(lean * 0.5, n)
        out[org] = sp.csr_matrix(np.stack([rng.multinomial(30, p @ topics) for p in theta]).astype(np.float32))
    return out


def _gensim(data: dict[str, sp.csr_matrix], passes: int) -> LdaModel:
    """gensim's batch LDA on the pooled documents, the family's defaults and the same seed."""
    pooled = sp.vstack(list(data.values())).tocsr()
    return LdaModel(
        as_corpus(pooled),
        id2word={j: f"w{j}" for j in range(VOCAB)},
        num_topics=TOPICS,
        passes=passes,
        update_every=0,
        iterations=200,
        gamma_threshold=1e-6,
        random_state=3,
    )


def test_an_organisations_counts_are_gensims_e_step_on_its_documents() -> None:
    """From the same topics and the same starting draws, an organisation's update is exactly
    gensim's E-step statistics on its documents, and states its document count."""
    config = _config()
    family = get_family("lda")
    data = _data()
    model = family.create_model(VOCAB, config, CPU)
    step = family.local_update(model, data["b"], config, 11)
    reference = _gensim(data, passes=1)  # only for its E-step, at the family's initial topics
    reference.expElogbeta = model.vb.expElogbeta
    reference.random_state = np.random.RandomState(11)
    _, expected = reference.inference(as_corpus(data["b"]), collect_sstats=True)
    assert set(step.tensors) == {"counts", "documents"}
    assert np.array_equal(step.tensors["counts"].numpy(), expected)
    assert step.num_examples == 60 and float(step.tensors["documents"]) == 60.0
    # the expected counts of a document sum to its tokens: the update carries the organisation's token total
    assert float(step.tensors["counts"].double().sum()) == pytest.approx(60 * 30, rel=1e-4)


def _gensim_other_draws(data: dict[str, sp.csr_matrix], passes: int, draws: int) -> LdaModel:
    """gensim's batch LDA from the same initial topics, its E-steps' starting gammas from another stream."""
    model = LdaModel(
        id2word={j: f"w{j}" for j in range(VOCAB)},
        num_topics=TOPICS,
        iterations=200,
        gamma_threshold=1e-6,
        random_state=3,
    )
    model.random_state = np.random.RandomState(draws)
    model.update(as_corpus(sp.vstack(list(data.values())).tocsr()), passes=passes, update_every=0)
    return model


def test_the_federation_matches_gensim_batch_lda_on_the_pooled_documents() -> None:
    """Same seed (so the same initial topics), same passes: the federation's topics are as close
    to gensim's as gensim's own are when only its E-steps' starting draws change, and the M-step
    weights are gensim's. (Measured: 1.7e-3 against a spread of 4.3e-3 at 15 passes.)"""
    config = _config()
    data = _data()
    result = federate(config, data)
    ours = result.model.to_model().topic_word().double().numpy()
    theirs = _gensim(data, passes=15).get_topics().astype(np.float64)
    spread = max(np.abs(_gensim_other_draws(data, 15, d).get_topics() - theirs).max() for d in (99, 100))
    assert len(result.model.history) == 15
    assert np.abs(ours - theirs).max() <= spread
    # the M-step weights are gensim's: rho = (1 + pass + N / chunksize)^-0.5, N counted in pass 1 only
    rhos = [h.metrics["rho"] for h in result.model.history]
    assert rhos[0] == 1.0
    assert rhos[1] == pytest.approx((1 + 1 + 180 / 2000) ** -0.5)
    assert rhos[14] == pytest.approx((1 + 14 + 180 / 2000) ** -0.5)


def test_the_initial_topics_are_gensims_from_the_same_seed() -> None:
    model = get_family("lda").create_model(VOCAB, _config(), CPU)
    reference = LdaModel(id2word={j: "" for j in range(VOCAB)}, num_topics=TOPICS, random_state=3)
    assert np.array_equal(model.lam.numpy(), reference.state.sstats)


def test_the_topics_recover_the_generating_ones_and_predict_held_out_words() -> None:
    """A quality check that can fail: each generating topic's 15 words are one learned topic's
    most probable 15, and completion perplexity on new documents beats the unigram's."""
    config = _config()
    data = _data()
    trained = federate(config, data).model.to_model()
    beta = trained.topic_word().numpy()
    learned = [set(np.argsort(-row)[:15]) for row in beta]
    for t in range(TOPICS):
        assert set(range(t * 15, (t + 1) * 15)) in learned
    held_out = _data()["c"]  # the same generator: documents like the training ones
    unigram = np.asarray(sum(m.sum(axis=0) for m in data.values())).ravel()
    unigram /= unigram.sum()
    counts = held_out.toarray()
    unigram_perplexity = math.exp(-(counts * np.log(unigram)).sum() / counts.sum())
    assert completion_perplexity(trained, held_out, seed=0) < 0.9 * unigram_perplexity


def test_doc_topic_is_deterministic_and_reads_every_input_layout() -> None:
    trained = federate(_config(max_steps=3), _data()).model.to_model()
    docs = _data()["a"][:5]
    theta = trained.doc_topic(docs)
    assert torch.allclose(theta.sum(dim=1), torch.ones(5))
    assert torch.equal(theta, trained.doc_topic(docs))
    assert torch.equal(theta, trained.doc_topic(torch.from_numpy(docs.toarray())))
    assert torch.equal(theta, trained.doc_topic(torch.from_numpy(docs.toarray()).to_sparse_csr()))


@pytest.mark.parametrize("corruption", ["negative", "documents"])
def test_an_update_that_is_no_e_step_is_rejected(corruption) -> None:
    config = _config()
    family = get_family("lda")
    data = _data()
    model = family.create_model(VOCAB, config, CPU)
    step = family.local_update(model, data["a"], config, 0)
    tensors = dict(step.tensors)
    if corruption == "negative":
        tensors["counts"] = tensors["counts"].clone()
        tensors["counts"][0, 0] = -1.0
    else:
        tensors["documents"] = torch.tensor([1000.0], dtype=torch.float64)
    strategy = family.strategy(family.create_model(VOCAB, config, CPU), config)
    update = Update("a", UpdateKind.STATISTICS, tensors, step.num_examples)
    with pytest.raises(UpdateRejected):
        strategy.validate(update, capacity=None)
