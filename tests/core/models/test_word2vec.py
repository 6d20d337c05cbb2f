"""The skip-gram model: its written-out sparse gradient, pair generation, subsampling and noise."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedtopic_pipelines.core.config import Word2VecConfig
from fedtopic_pipelines.core.models.word2vec import (
    NoiseSampler,
    PairBatch,
    SkipGram,
    keep_probabilities,
    noise_distribution,
    pair_losses,
    skipgram_pairs,
    sparse_step,
)


def _model(vocab: int = 30, dim: int = 6) -> SkipGram:
    model = SkipGram(vocab, Word2VecConfig(dimension=dim), seed=1).double()
    with torch.no_grad():  # V starts at zero; give it values so every term of the gradient is exercised
        model.output.copy_(torch.randn(vocab, dim, generator=torch.Generator().manual_seed(2), dtype=torch.float64))
    return model


@pytest.mark.parametrize(
    ("path", "chunk"), [("compiled", None), ("tensors", 512), ("tensors", 3)], ids=["compiled", "tensors", "blocks"]
)
@pytest.mark.parametrize("shared", [True, False])
def test_the_sparse_gradient_equals_autograd_on_the_dense_tables(
    shared: bool, path: str, chunk: int | None, monkeypatch
) -> None:
    """The CPU's compiled loop and the accelerator's tensor path (run here on the CPU; blocks of
    3 cut batches of 7 and 5 pairs) both give autograd's gradient."""
    from fedtopic_pipelines.core.models import word2vec

    if chunk is not None:
        monkeypatch.setattr(word2vec, "CHUNK", chunk)
    step_of = word2vec.sparse_step if path == "compiled" else word2vec._tensor_sparse_step
    model = _model()
    g = torch.Generator().manual_seed(3)
    batches = []
    for b in (7, 5):  # two ghost batches, each with its own negatives; rows repeat within and across them
        negatives = torch.randint(0, 30, (4,) if shared else (b, 4), generator=g)
        batches.append(
            PairBatch(torch.randint(0, 10, (b,), generator=g), torch.randint(0, 30, (b,), generator=g), negatives)
        )
    step = step_of(model, batches)

    u, v = model.input.detach().clone().requires_grad_(), model.output.detach().clone().requires_grad_()
    losses = [pair_losses(u[b.centers], v[b.contexts], v[b.negatives]) for b in batches]
    loss = torch.cat(losses).mean()
    loss.backward()
    assert step.loss == pytest.approx(loss.item(), rel=1e-12)
    assert step.pairs == 12
    for name, dense in (("input", u.grad), ("output", v.grad)):
        rows = step.rows[name]
        assert torch.equal(rows, torch.unique(rows))  # sorted, no repeats
        assert torch.allclose(step.values[name], dense[rows], atol=1e-12)
        untouched = torch.ones(len(dense), dtype=torch.bool)
        untouched[rows] = False
        assert float(dense[untouched].abs().max()) == 0.0  # the rows left out carry no gradient
    assert step_of(model, batches, grad=False).loss == pytest.approx(loss.item(), rel=1e-12)


def test_the_compiled_step_in_float32_matches_the_tensor_path() -> None:
    """The tables train in float32: the compiled loop (float64 sums) and the tensor path agree."""
    from fedtopic_pipelines.core.models import word2vec

    model = _model(vocab=200, dim=32).float()
    g = torch.Generator().manual_seed(4)
    batch = PairBatch(
        torch.randint(0, 200, (300,), generator=g),
        torch.randint(0, 200, (300,), generator=g),
        torch.randint(0, 200, (300, 5), generator=g),
    )
    compiled, tensors = sparse_step(model, [batch]), word2vec._tensor_sparse_step(model, [batch])
    assert compiled.loss == pytest.approx(tensors.loss, rel=1e-6)
    for name in ("input", "output"):
        assert torch.equal(compiled.rows[name], tensors.rows[name])
        assert torch.allclose(compiled.values[name], tensors.values[name], rtol=1e-4, atol=1e-7)


def test_the_compiled_loss_stays_finite_with_more_negatives_than_a_float64_product_holds() -> None:
    """The loop logs a pair's product of factors 1 + e^-|x| (each near 2 here) once; 1,200
    negatives would overflow that product (2^1201) unless it is logged in parts."""
    model = _model(vocab=50, dim=4)
    g = torch.Generator().manual_seed(5)
    batch = PairBatch(
        torch.randint(0, 50, (3,), generator=g),
        torch.randint(0, 50, (3,), generator=g),
        torch.randint(0, 50, (3, 1200), generator=g),
    )
    expected = pair_losses(model.input[batch.centers], model.output[batch.contexts], model.output[batch.negatives])
    assert sparse_step(model, [batch], grad=False).loss == pytest.approx(expected.mean().item(), rel=1e-12)


def test_the_alias_sampler_draws_each_word_with_its_probability() -> None:
    probabilities = torch.tensor([0.5, 0.0, 0.2, 0.25, 0.05])
    sampler = NoiseSampler(probabilities)
    draws = sampler.draw((200_000,), torch.Generator().manual_seed(0))
    frequencies = torch.bincount(draws, minlength=5).double() / len(draws)
    assert frequencies[1] == 0  # a word of probability 0 is never drawn
    assert frequencies.tolist() == pytest.approx(probabilities.tolist(), abs=0.004)  # 4 standard errors
    again = sampler.draw((7, 5), torch.Generator().manual_seed(0))
    assert again.shape == (7, 5) and torch.equal(again.reshape(-1), draws[:35])  # seeded: the same stream


def test_the_alias_sampler_follows_a_long_tailed_distribution() -> None:
    noise = noise_distribution(1.0 / np.arange(1, 5001), 0.75)
    draws = NoiseSampler(noise).draw((400_000,), torch.Generator().manual_seed(1))
    frequencies = torch.bincount(draws, minlength=5000).double() / len(draws)
    assert frequencies[:5].tolist() == pytest.approx(noise[:5].tolist(), rel=0.03)
    head = float(noise[:100].sum())
    assert float(frequencies[:100].sum()) == pytest.approx(head, abs=0.004)


def test_pairs_stay_within_the_window_and_the_document() -> None:
    tokens = np.arange(10)  # ids equal positions, so a pair tells its distance
    offsets = np.array([0, 6, 10])
    centres, contexts = skipgram_pairs(tokens, offsets, window=2, keep=None, rng=np.random.default_rng(0))
    doc = np.repeat([0, 1], [6, 4])
    assert len(centres) > 0
    assert np.all(np.abs(centres - contexts) <= 2) and np.all(centres != contexts)
    assert np.all(doc[centres] == doc[contexts])


def test_a_window_larger_than_any_document_pairs_every_word_of_a_document_with_every_other() -> None:
    tokens, offsets = np.arange(7), np.array([0, 3, 7])  # documents of 3 and 4 words, window 50
    centres, contexts = skipgram_pairs(tokens, offsets, window=50, keep=None, rng=np.random.default_rng(0))
    pairs = set(zip(centres.tolist(), contexts.tolist(), strict=True))
    doc = [0, 0, 0, 1, 1, 1, 1]
    expected = {(i, j) for i in range(7) for j in range(7) if i != j and doc[i] == doc[j] and abs(i - j) <= 50}
    # each centre draws its window in 1..50: with 7 words nearly every draw covers the document
    assert pairs <= expected and len(pairs) >= len(expected) - 4


def test_dynamic_windows_make_near_pairs_more_frequent_than_far_ones() -> None:
    tokens, offsets = np.arange(2000), np.array([0, 2000])
    centres, contexts = skipgram_pairs(tokens, offsets, window=4, keep=None, rng=np.random.default_rng(0))
    distance = np.bincount(np.abs(centres - contexts))[1:]
    # word2vec's reduced windows: distance d is kept with probability (W - d + 1) / W
    assert distance / distance[0] == pytest.approx([1, 0.75, 0.5, 0.25], abs=0.04)


def test_subsampling_follows_word2vecs_rule() -> None:
    counts = np.array([1000.0, 100.0, 10.0, 0.0])
    keep = keep_probabilities(counts, 1e-2)
    scaled = 1e-2 * counts.sum()
    assert keep[0] == pytest.approx((np.sqrt(1000 / scaled) + 1) * scaled / 1000)
    assert keep[2] == 1.0 and keep[3] == 1.0  # rare words and unseen ones are always kept
    assert np.all(keep_probabilities(counts, 0.0) == 1.0)


def test_negatives_follow_the_counts_to_the_power() -> None:
    noise = noise_distribution(np.array([16.0, 1.0, 0.0]), 0.75)
    assert noise.tolist() == pytest.approx([8 / 9, 1 / 9, 0.0])
    assert noise_distribution(np.zeros(3), 0.75).tolist() == pytest.approx([1 / 3] * 3)
