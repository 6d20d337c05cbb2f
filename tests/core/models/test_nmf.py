"""NMF by SGD with the SMILE estimator (seed 004 eq. 2-3): the batched critic, the bound, the
projected step, learning, and determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedtopic_pipelines.core.models.nmf import (
    NMFModel,
    SmileCritic,
    local_step,
    nmf_init,
    reconstruction,
    smile,
)


def batch(seed: int = 0, b: int = 6, v: int = 9, k: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(b, v, generator=g, dtype=torch.float64), torch.rand(b, k, generator=g, dtype=torch.float64)


def test_the_critic_scores_every_pair_as_one_pass_per_pair_would() -> None:
    x, h = batch()
    critic = SmileCritic(9, 3).double()
    pairs = critic.pairs(x, h)
    brute = torch.stack([torch.stack([critic(x[j : j + 1], h[i : i + 1])[0] for i in range(6)]) for j in range(6)])
    assert torch.allclose(pairs, brute, atol=1e-12)
    assert torch.allclose(pairs.diagonal(), critic(x, h), atol=1e-12)
    assert [m.out_features for m in (critic.words, critic.hidden, critic.out)] == [32, 256, 1]


def test_smile_is_eq_2_with_the_clip_at_tau() -> None:
    x, h = batch(1)
    critic = SmileCritic(9, 3).double()
    with torch.no_grad():
        critic.out.bias.fill_(4.0)  # push some scores past tau = 5 ... and some not
    t = critic.pairs(x, h).detach().numpy()
    b = 6
    joint = np.mean(np.diag(t))
    off = [min(max(math.exp(t[j, i]), math.exp(-5.0)), math.exp(5.0)) for j in range(b) for i in range(b) if i != j]
    expected = joint - math.log(sum(off) / (b * (b - 1)))
    assert float(smile(critic, x, h, tau=5.0).detach()) == pytest.approx(expected, abs=1e-10)
    assert float(smile(critic, x, h, tau=0.5).detach()) != pytest.approx(expected)  # the clip matters here
    with pytest.raises(ValueError, match="at least 2 documents"):
        smile(critic, x[:1], h[:1])


def test_a_step_without_mi_is_projected_gradient_descent_on_eq_3() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.rand(8, 12, generator=g)
    model = NMFModel(12, 4, with_critic=False, x_mean=float(x.mean()), seed=0)
    h = nmf_init(float(x.mean()), (20, 4), torch.Generator().manual_seed(1), torch.float32)
    rows = torch.arange(4, 12)
    w0, h0 = model.w.detach().clone(), h.clone()
    w_var, h_var = w0.clone().requires_grad_(True), h0[rows].clone().requires_grad_(True)
    w_grad, h_grad = torch.autograd.grad(reconstruction(x, w_var, h_var), [w_var, h_var])
    local_step(model, h, x, rows, lr=0.5, mi_weight=0.0)
    assert torch.equal(model.w.detach(), (w0 - 0.5 * w_grad).clamp(min=0))
    assert torch.equal(h[rows], (h0[rows] - 0.5 * h_grad).clamp(min=0))
    assert torch.equal(h[:4], h0[:4]) and torch.equal(h[12:], h0[12:])  # other documents untouched
    local_step(model, h, x, rows, lr=50.0, mi_weight=0.0)  # a step far past zero is clipped at zero
    assert bool((model.w >= 0).all()) and bool((h >= 0).all()) and bool((model.w == 0).any())


def test_sgd_fits_a_non_negative_low_rank_matrix() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(200, 4, generator=g) @ torch.rand(60, 4, generator=g).T
    model = NMFModel(60, 4, with_critic=False, x_mean=float(x.mean()), seed=1)
    h = nmf_init(float(x.mean()), (200, 4), torch.Generator().manual_seed(2), torch.float32)

    def relative_error() -> float:
        return float(((x - h @ model.w.detach().T) ** 2).sum().sqrt() / (x**2).sum().sqrt())

    start = relative_error()
    rng = np.random.default_rng(0)
    for _ in range(150):
        perm = torch.from_numpy(rng.permutation(200))
        for b in range(0, 200, 20):
            local_step(model, h, x[perm[b : b + 20]], perm[b : b + 20], lr=0.05, mi_weight=0.0)
    assert relative_error() < 0.1 < start, (start, relative_error())


def test_the_critic_ascends_the_bound_and_the_run_is_deterministic() -> None:
    def run(seed: int) -> tuple[list[float], torch.Tensor]:
        g = torch.Generator().manual_seed(5)
        topics = torch.randint(0, 3, (64,), generator=g)
        x = torch.nn.functional.one_hot(topics, 3).float().repeat(1, 4) + 0.1 * torch.rand(64, 12, generator=g)
        model = NMFModel(12, 3, with_critic=True, x_mean=float(x.mean()), seed=seed)
        h = nmf_init(float(x.mean()), (64, 3), torch.Generator().manual_seed(seed), torch.float32)
        estimates = []
        for step in range(400):
            rows = torch.arange(step % 4 * 16, step % 4 * 16 + 16)
            estimates.append(local_step(model, h, x[rows], rows, lr=0.05, mi_weight=0.1).mutual_information)
        return estimates, model.critic.out.weight.detach().clone()

    estimates, weights = run(0)
    # three clusters: I(x; h) <= log 3 = 1.10; the bound climbs from about 0 to about 0.8
    assert np.mean(estimates[-20:]) > np.mean(estimates[:20]) + 0.5, (estimates[:3], estimates[-3:])
    again, weights_again = run(0)
    assert again == estimates and torch.equal(weights, weights_again)
    other, _ = run(1)
    assert other != estimates


def test_local_epochs_visit_every_document_once_per_epoch_in_batches_of_two_or_more() -> None:
    import scipy.sparse as sp

    from fedtopic_pipelines.core.models.nmf import local_epochs, mean_reconstruction

    g = torch.Generator().manual_seed(0)
    matrix = sp.csr_matrix((torch.rand(41, 10, generator=g) > 0.6).float().numpy())
    model = NMFModel(10, 3, with_critic=True, x_mean=float(matrix.mean()), seed=0)
    h = nmf_init(float(matrix.mean()), (41, 3), torch.Generator().manual_seed(1), torch.float32)
    before = mean_reconstruction(model, h, matrix)
    results = local_epochs(model, h, matrix, 3, 20, 0.05, 0.1, torch.Generator().manual_seed(2))
    assert len(results) == 3 * 2  # 20 + 21 documents: a batch of one is merged (SMILE needs two)
    assert mean_reconstruction(model, h, matrix) < before
    with pytest.raises(ValueError, match="at least 2 documents"):
        local_epochs(model, h[:1], matrix[:1], 1, 20, 0.05, 0.0, torch.Generator().manual_seed(2))


def test_smile_reports_eq_2_and_follows_the_jensen_shannon_bound_s_gradient() -> None:
    """Song and Ermon's reference smile_lower_bound: eq. 2's value, the JS f-GAN bound's gradient."""
    x, h = batch(2)
    critic = SmileCritic(9, 3).double()
    h = h.requires_grad_(True)
    value = smile(critic, x, h)
    t = critic.pairs(x, h)
    off = ~torch.eye(6, dtype=torch.bool)
    dv = t.diagonal().mean() - torch.log(torch.clamp(t[off].exp(), math.exp(-5), math.exp(5)).mean())
    js = -torch.nn.functional.softplus(-t.diagonal()).mean() - torch.nn.functional.softplus(t[off]).mean()
    assert float(value.detach()) == pytest.approx(float(dv.detach()), abs=1e-12)
    (ours,) = torch.autograd.grad(value, [h], retain_graph=True)
    (expected,) = torch.autograd.grad(js, [h], retain_graph=True)
    (dv_grad,) = torch.autograd.grad(dv, [h])
    assert torch.allclose(ours, expected, atol=1e-12) and not torch.allclose(ours, dv_grad, atol=1e-6)


def test_an_adagrad_step_moves_each_entry_by_lr_over_the_root_of_its_squared_gradients() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.rand(8, 12, generator=g)
    model = NMFModel(12, 4, with_critic=False, x_mean=float(x.mean()), seed=0)
    h = nmf_init(float(x.mean()), (20, 4), torch.Generator().manual_seed(1), torch.float32)
    rows = torch.arange(4, 12)
    w_sums, h_sums = torch.full((12, 4), 0.25), torch.full((20, 4), 0.5)
    w0, h0 = model.w.detach().clone(), h.clone()
    w_var, h_var = w0.clone().requires_grad_(True), h0[rows].clone().requires_grad_(True)
    w_grad, h_grad = torch.autograd.grad(reconstruction(x, w_var, h_var), [w_var, h_var])
    local_step(model, h, x, rows, lr=0.1, mi_weight=0.0, w_sums=w_sums, h_sums=h_sums)
    w_expected = (w0 - 0.1 * w_grad / ((0.25 + w_grad**2).sqrt() + 1e-10)).clamp(min=0)
    assert torch.allclose(model.w.detach(), w_expected, atol=1e-7)
    assert torch.allclose(h[rows], (h0[rows] - 0.1 * h_grad / ((0.5 + h_grad**2).sqrt() + 1e-10)).clamp(min=0))
    assert torch.allclose(h_sums[rows], 0.5 + h_grad**2) and torch.equal(h_sums[:4], torch.full((4, 4), 0.5))
    assert torch.allclose(w_sums, 0.25 + w_grad**2)


def test_adagrad_learns_where_plain_sgd_on_the_batch_mean_does_not() -> None:
    """Eq. 3's loss is a batch mean: plain SGD moves each document's h by 1/B of its own gradient.
    On sparse count rows like a short text's, Adagrad's per-entry step fits in a few epochs."""
    import scipy.sparse as sp

    from fedtopic_pipelines.core.models.nmf import local_epochs, mean_reconstruction

    rng = np.random.default_rng(0)
    topics = rng.integers(0, 4, 400)
    words = rng.integers(0, 15, (400, 6)) + 15 * topics[:, None]
    counts = np.zeros((400, 60), dtype=np.float32)
    np.add.at(counts, (np.repeat(np.arange(400), 6), words.ravel()), 1.0)
    matrix = sp.csr_matrix(counts)
    mean = float(counts.mean())
    losses = {}
    for optimizer in ("sgd", "adagrad"):
        model = NMFModel(60, 4, with_critic=False, x_mean=mean, seed=0)
        h = nmf_init(mean, (400, 4), torch.Generator().manual_seed(1), torch.float32)
        start = mean_reconstruction(model, h, matrix)
        local_epochs(model, h, matrix, 10, 64, 0.1, 0.0, torch.Generator().manual_seed(2), optimizer=optimizer)
        losses[optimizer] = mean_reconstruction(model, h, matrix) / start
    assert losses["adagrad"] < 0.75 < losses["sgd"], losses
