"""The curious server's attacks (issue 19, a-c) on real families and tiny data.

Each baseline asserts the leak as it is with no defence: a test that fails if the leak
disappears (a family change) or the attack breaks. Noise is simulated directly on the
recorded tensors, as a client adding its share of DP noise would send them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import torch

from fedtopic_pipelines.core.audit import attacks
from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.families import get_family
from fedtopic_pipelines.core.families.ctm import ContextualData
from fedtopic_pipelines.core.federated.engine import InProcessEngine
from fedtopic_pipelines.core.federated.messages import EVALUATE, Instruction, Replies, Update, UpdateKind
from fedtopic_pipelines.core.federation import run_federation
from fedtopic_pipelines.core.site import MemoryEndpoint
from tests.core.federated.test_family_contract import word_sequences

V = 200  # words: a batch of 8 sparse documents holds about a third of them
ROUNDS = 4
ORGS = ("a", "b", "c")


def _matrices(rate: float = 0.05, seed: int = 0) -> dict[str, sp.csr_matrix]:
    rng = np.random.default_rng(seed)
    return {
        o: sp.csr_matrix(rng.poisson(rate, (n, V)).astype(np.float32)) for o, n in zip(ORGS, (30, 21, 45), strict=True)
    }


def _vocabulary(n: int = V, frequency: np.ndarray | None = None) -> pd.DataFrame:
    table = pd.DataFrame({"term": [f"w{j}" for j in range(n)]})
    if frequency is not None:
        table["frequency"] = frequency
    return table


def _run(data: dict, train: dict, vocabulary: pd.DataFrame, keep_state: bool = False) -> attacks.RecordingEngine:
    config = TrainConfig.from_params(train)
    engine = attacks.RecordingEngine(
        InProcessEngine([MemoryEndpoint(o, d) for o, d in data.items()]), ROUNDS, keep_state=keep_state
    )
    run_federation(engine, list(data), config, vocabulary=vocabulary, progress=False)
    return engine


def _topic_train(family: str = "prodlda", normalization: str = "batch", **model) -> dict:
    return {
        "model": {"family": family, "n_topics": 3, "hidden_sizes": [16, 16], "normalization": normalization, **model},
        "batch_size": 8,
        "max_steps": ROUNDS,
        "seed": 7,
        "device": "cpu",
    }


def _batch_truth(data: dict, train: dict) -> dict[str, list[np.ndarray]]:
    """Each organisation's batch words per round, from its own seeded stream replayed."""
    config = TrainConfig.from_params(train)
    family = get_family(config.model.family)
    return {o: attacks.replay_batch_words(family, d, config, i, ROUNDS, V) for i, (o, d) in enumerate(data.items())}


def _first_layer(rec, update):
    score = attacks.first_layer_scores(update.tensors[attacks.FIRST_LAYER], V)
    return score, attacks.relative_threshold(score)


@pytest.fixture(scope="module")
def prodlda_view():
    data = _matrices()
    train = _topic_train()
    return _run(data, train, _vocabulary()), _batch_truth(data, train)


def test_prodlda_first_layer_gradient_is_exactly_the_batch_words(prodlda_view) -> None:
    engine, truth = prodlda_view
    assert [r.round for r in engine.rounds] == list(range(ROUNDS)) and all(len(r.updates) == 3 for r in engine.rounds)
    summary = attacks.attack_rounds(engine.rounds, truth, _first_layer)
    assert summary.cases == 3 * ROUNDS
    assert summary.precision == 1.0 and summary.recall == 1.0 and summary.auc == 1.0
    words = np.mean([t.mean() for ts in truth.values() for t in ts])
    assert 0.15 < words < 0.6  # the batch holds a minority of the words: the guess is not trivial
    update = engine.rounds[0].updates["a"]
    absent = ~truth["a"][0]
    assert torch.count_nonzero(update.tensors[attacks.FIRST_LAYER][torch.from_numpy(absent)]) == 0  # exact zeros


def test_client_noise_on_the_update_drives_the_attack_toward_chance(prodlda_view) -> None:
    """DP at the clients, simulated on the recorded updates: each update clipped to norm C and
    sent with its share N(0, (sigma C)^2 / m) of the noise (sigma 1, m 3 organisations)."""
    engine, truth = prodlda_view
    generator = torch.Generator().manual_seed(0)
    clip, sigma, m = 1.0, 1.0, 3

    def noisy(rec, update):
        norm = torch.sqrt(sum(t.double().pow(2).sum() for t in update.tensors.values()))
        grad = update.tensors[attacks.FIRST_LAYER].double() * min(1.0, clip / float(norm))
        grad = grad + torch.randn(grad.shape, generator=generator, dtype=grad.dtype) * sigma * clip / m**0.5
        score = attacks.first_layer_scores(grad, V)
        return score, attacks.relative_threshold(score)

    summary = attacks.attack_rounds(engine.rounds, truth, noisy)
    assert abs(summary.auc - 0.5) < 0.1
    assert summary.precision < 0.6  # the guess is every word: precision falls to the batch's share


def test_small_noise_leaves_the_ranking(prodlda_view) -> None:
    """The ranking degrades with the noise's scale, not at once: noise far under the gradient keeps it."""
    engine, truth = prodlda_view
    generator = torch.Generator().manual_seed(0)

    def slightly_noisy(rec, update):
        grad = update.tensors[attacks.FIRST_LAYER].double()
        grad = grad + torch.randn(grad.shape, generator=generator, dtype=grad.dtype) * 1e-3 * grad.abs().max()
        return attacks.first_layer_scores(grad, V), 0.0

    assert attacks.attack_rounds(engine.rounds, truth, slightly_noisy).auc > 0.95


def test_secure_aggregation_view_is_the_union_of_the_batches(prodlda_view) -> None:
    """The sum's non-zero columns are every organisation's batch words: recall stays 1 for one
    organisation, precision falls to its share of the union."""
    engine, truth = prodlda_view
    for rec in engine.rounds:
        summed = attacks.summed_view(rec)
        score = attacks.first_layer_scores(summed[attacks.FIRST_LAYER], V)
        union = np.any([truth[o][rec.round] for o in ORGS], axis=0)
        assert np.array_equal(score > attacks.relative_threshold(score), union)
        one = attacks.score_guess(score, truth["a"][rec.round], attacks.relative_threshold(score))
        assert one.recall == 1.0 and one.precision == pytest.approx(truth["a"][rec.round].sum() / union.sum())


@pytest.mark.parametrize("normalization", ["batch", "layer"])
def test_decoder_gradient_is_dense_but_ranks_the_batch_words(normalization: str) -> None:
    """The issue's premise checked: the decoder's gradient is *not* zero on absent words (the
    softmax spreads the loss over the vocabulary), yet it ranks the batch's words. Without
    batch coupling the sign does (absent words pushed down); BatchNorm over the batch removes
    each word's mean gradient, and the column's magnitude still ranks them."""
    data = _matrices()
    train = _topic_train(normalization=normalization)
    engine, truth = _run(data, train, _vocabulary()), _batch_truth(data, train)
    beta = engine.rounds[0].updates["a"].tensors[attacks.DECODER]
    assert int((beta.abs().sum(dim=0) > 0).sum()) == V  # every word's column is non-zero
    magnitude = attacks.attack_rounds(engine.rounds, truth, lambda r, u: (attacks.decoder_magnitude(u.tensors), 0.0))
    assert magnitude.auc > 0.95
    signed = attacks.attack_rounds(engine.rounds, truth, lambda r, u: (attacks.decoder_scores(u.tensors), 0.0))
    if normalization == "layer":
        assert signed.auc > 0.99 and signed.precision > 0.95
    else:
        assert signed.auc < 0.75  # the sign is mostly gone under BatchNorm


@pytest.mark.parametrize("family", ["combinedtm", "zeroshottm"])
def test_contextual_families(family: str) -> None:
    """CombinedTM's first layer reads the bag of words (exact leak); ZeroShotTM's reads the
    embeddings only, and the attack falls back to the decoder's ranking."""
    rng = np.random.default_rng(1)
    data = {o: ContextualData(m, rng.normal(size=(m.shape[0], 6)).astype(np.float32)) for o, m in _matrices().items()}
    train = _topic_train(family, "batch", embedding_size=6)
    engine, truth = _run(data, train, _vocabulary()), _batch_truth(data, train)
    if family == "combinedtm":
        summary = attacks.attack_rounds(engine.rounds, truth, _first_layer)
        assert summary.precision == 1.0 and summary.recall == 1.0
        return
    with pytest.raises(ValueError, match="does not read the bag of words"):
        attacks.first_layer_scores(engine.rounds[0].updates["a"].tensors[attacks.FIRST_LAYER], V)

    def magnitude(rec, update):
        score = attacks.decoder_magnitude(update.tensors)
        return score, attacks.two_group_threshold(score)

    summary = attacks.attack_rounds(engine.rounds, truth, magnitude)
    assert summary.auc > 0.9 and summary.precision > 0.6 and summary.recall > 0.8


def test_nmf_weights_reveal_the_organisations_words() -> None:
    """FedAvg of NMF: W's change ranks the organisation's words (present ones grow), and the MI
    critic's first layer on the bag of words changes exactly in the columns of its words."""
    data = _matrices(rate=0.02)
    frequency = np.asarray(sum(m.sum(axis=0) for m in data.values())).ravel() + 1.0
    train = {
        "model": {"family": "nmf", "n_topics": 3, "mi_weight": 0.1, "inference_epochs": 2},
        "optimizer": {"name": "sgd", "lr": 0.05},
        "aggregation": {"rule": "fedavg", "local_epochs": 2},
        "batch_size": 8,
        "max_steps": ROUNDS,
        "seed": 7,
        "device": "cpu",
    }
    engine = _run(data, train, _vocabulary(frequency=frequency), keep_state=True)
    truth = {o: [np.asarray(m.sum(axis=0)).ravel() > 0] * ROUNDS for o, m in data.items()}  # every epoch reads all

    def critic(rec, update):
        score = attacks.critic_delta_scores(update.tensors, rec.state)
        return score, attacks.relative_threshold(score)

    exact = attacks.attack_rounds(engine.rounds, truth, critic)
    assert exact.precision == 1.0 and exact.recall == 1.0
    ranked = attacks.attack_rounds(
        engine.rounds, truth, lambda r, u: (attacks.weights_delta_scores(u.tensors, r.state), 0.0)
    )
    assert ranked.auc > 0.95 and ranked.precision > 0.95


def test_word2vec_rows_are_the_rows_the_batch_used() -> None:
    data = word_sequences((30, 21, 45), 40)
    train = {
        "model": {"family": "word2vec", "dimension": 8, "window": 2, "negatives": 3},
        "optimizer": {"name": "sgd", "lr": 0.5},
        "batch_size": 16,
        "max_steps": ROUNDS,
        "seed": 7,
        "device": "cpu",
    }
    engine = _run(data, train, _vocabulary(40, data["a"].frequencies))
    config = TrainConfig.from_params(train)
    family = get_family("word2vec")
    rows = {o: attacks.replay_pair_rows(family, d, config, i, ROUNDS) for i, (o, d) in enumerate(data.items())}
    for table, used in (("input", ("centres",)), ("output", ("contexts", "negatives"))):
        truth = {o: [r.mask(used, 40) for r in rs] for o, rs in rows.items()}
        summary = attacks.attack_rounds(
            engine.rounds, truth, lambda r, u, t=table: (attacks.sparse_rows_guess(u, 40, t), 0.5)
        )
        assert summary.cases == 3 * ROUNDS and summary.precision == 1.0 and summary.recall == 1.0
    # what it reveals: the centre words are words of the client's documents (no false word)
    words = {o: [r.mask(("centres", "contexts"), 40) for r in rs] for o, rs in rows.items()}
    centres = attacks.attack_rounds(engine.rounds, words, lambda r, u: (attacks.sparse_rows_guess(u, 40, "input"), 0.5))
    assert centres.precision == 1.0 and centres.recall > 0.5


def _memorising_config(steps: int) -> TrainConfig:
    return TrainConfig.from_params(
        {
            "model": {"n_topics": 30, "hidden_sizes": [64], "normalization": "layer", "dropout": 0.0},
            "optimizer": {"name": "adam", "lr": 0.02},
            "batch_size": 16,
            "max_steps": steps,
            "seed": 7,
            "device": "cpu",
        }
    )


def _random_documents(n: int, vocab: int, rng: np.random.Generator) -> sp.csr_matrix:
    counts = np.stack([rng.multinomial(20, np.full(vocab, 1 / vocab)) for _ in range(n)])
    return sp.csr_matrix(counts.astype(np.float32))


def test_membership_inference_on_an_overfit_model_and_on_an_untrained_one() -> None:
    """Documents with no shared structure: an overfit model (a topic per document) gives its
    training documents a lower loss; an untrained model cannot tell them apart."""
    rng = np.random.default_rng(0)
    vocab = 150
    members = {o: _random_documents(30, vocab, rng) for o in ("a", "b")}
    non_members = _random_documents(30, vocab, rng)
    engine = attacks.RecordingEngine(InProcessEngine([MemoryEndpoint(o, d) for o, d in members.items()]), 0)
    config = _memorising_config(150)
    result = run_federation(engine, list(members), config, vocabulary=_vocabulary(vocab), progress=False)
    assert engine.rounds == [] and len(engine.losses["a"]) == 150  # losses kept for every round, updates for none
    model = result.model.to_model()
    threshold = attacks.reported_training_loss(engine.losses, "a", 10)
    overfit = attacks.membership(
        attacks.prodlda_document_losses(model, members["a"]),
        attacks.prodlda_document_losses(model, non_members),
        threshold,
    )
    assert overfit.auc > 0.9 and overfit.member_loss < overfit.non_member_loss
    assert overfit.advantage > 0.2  # the reported training loss is a working threshold

    untrained = get_family("prodlda").create_model(vocab, _memorising_config(1), torch.device("cpu"))
    many = _random_documents(200, vocab, rng), _random_documents(200, vocab, rng)
    chance = attacks.membership(*(attacks.prodlda_document_losses(untrained, m) for m in many))
    assert abs(chance.auc - 0.5) < 0.1


def test_recording_engine_keeps_copies_of_training_rounds_only() -> None:
    tensor = torch.ones(3)

    class Fake:
        def query(self, action, payloads):
            return {"x": {"action": action}}

        def broadcast(self, instruction, to=None):
            return Replies([Update("x", UpdateKind.GRADIENTS, {"g": tensor}, 2, metrics={"loss": 1.5})])

    engine = attacks.RecordingEngine(Fake(), keep_rounds=2)
    assert engine.query("hello", {"x": {}}) == {"x": {"action": "hello"}}
    for round_ in range(4):
        engine.broadcast(Instruction(round_, {}, {"action": "gradients"}))
        engine.broadcast(Instruction(round_, {}, {"action": EVALUATE}))
    assert [r.round for r in engine.rounds] == [0, 1] and len(engine.losses["x"]) == 4
    tensor.mul_(0)  # aggregation clipping in place does not change what was recorded
    assert torch.equal(engine.rounds[0].updates["x"].tensors["g"], torch.ones(3))
    assert torch.equal(attacks.summed_view(engine.rounds[0])["g"], torch.full((3,), 2.0, dtype=torch.float64))


def test_scores_and_membership_basics() -> None:
    truth = np.array([True, True, False, False])
    s = attacks.score_guess(np.array([0.9, 0.0, 0.5, 0.0]), truth, 0.1)
    assert (s.precision, s.recall, s.auc) == (0.5, 0.5, 0.625)
    assert np.isnan(attacks.score_guess(np.ones(2), np.ones(2, bool)).auc)  # all true: no AUC
    m = attacks.membership(np.array([1.0, 2.0]), np.array([3.0, 4.0]), threshold=2.5)
    assert m.auc == 1.0 and m.advantage == 1.0 and m.accuracy == 1.0
    assert attacks.two_group_threshold(np.array([1e-3, 2e-3, 1.0, 2.0])) == pytest.approx((2e-3 * 1.0) ** 0.5)
