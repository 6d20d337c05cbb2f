"""ProdLDA's encoder after its first layer, the reparameterised draw and the KL term as one
compiled pass forward and one backward (numba, BLAS for the products).

At the demo's shape (32 documents per organisation and step, 100 hidden units, 20 topics) these
are some thirty torch operations forward and as many autograd nodes backward on tensors of a few
thousand numbers: each costs its call overhead, not its arithmetic, and together they were half
of a federated step (docs/performance.md). Here they are two calls. The first layer (a sparse
bag of words times a table of word rows, ``core/rows.py``) and the decoder over the vocabulary
(large tensors, where torch's vectorised kernels win) stay as they are.

It computes exactly the function of :meth:`ProdLDA.forward`'s general path, for the shape it
covers: one hidden layer after the first, softplus or ReLU, affine-free LayerNorm on mu and
log-variance (``normalization: layer``), dropout from the step's masks. Sums run in float64, so
results differ from torch's in the last bits of float32; the tests compare both paths and their
gradients.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

NO_MASK = np.empty((0, 0), dtype=np.bool_)


@numba.njit(cache=True, nogil=True)
def _drop(x: np.ndarray, keep: np.ndarray, kept: float) -> None:
    """Dropout in place with the step's mask: ``x * keep / kept`` (``kept`` = 1 - p); an empty mask: none."""
    if keep.size == 0:
        return
    rows, columns = x.shape
    for i in range(rows):
        for j in range(columns):
            x[i, j] = x[i, j] * keep[i, j] / kept


@numba.njit(cache=True, nogil=True)
def _layer_norm(x: np.ndarray, rstd: np.ndarray, eps: float) -> None:
    """Affine-free LayerNorm of each row in place (biased variance, ``eps`` added to it), keeping 1 / std per row."""
    rows, columns = x.shape
    for i in range(rows):
        mean = 0.0
        for j in range(columns):
            mean += x[i, j]
        mean /= columns
        var = 0.0
        for j in range(columns):
            diff = x[i, j] - mean
            var += diff * diff
        r = 1.0 / np.sqrt(var / columns + eps)
        rstd[i] = r
        for j in range(columns):
            x[i, j] = (x[i, j] - mean) * r


@numba.njit(cache=True, nogil=True)
def _layer_norm_backward(normed: np.ndarray, rstd: np.ndarray, grad: np.ndarray) -> None:
    """``grad`` (with respect to the normalised rows) becomes the gradient with respect to the input rows."""
    rows, columns = normed.shape
    for i in range(rows):
        mean_grad = 0.0
        mean_dot = 0.0
        for j in range(columns):
            mean_grad += grad[i, j]
            mean_dot += grad[i, j] * normed[i, j]
        mean_grad /= columns
        mean_dot /= columns
        for j in range(columns):
            grad[i, j] = rstd[i] * (grad[i, j] - mean_grad - normed[i, j] * mean_dot)


@numba.njit(cache=True, nogil=True)
def encoder_heads(
    h2: np.ndarray,
    w_mu: np.ndarray,
    b_mu: np.ndarray,
    w_sigma: np.ndarray,
    b_sigma: np.ndarray,
    prior_mean: np.ndarray,
    prior_var: np.ndarray,
    eps: np.ndarray,
    keep_hidden: np.ndarray,
    keep_theta: np.ndarray,
    kept: float,
    norm_eps: float,
) -> tuple:
    """Forward from the last hidden layer's activations ``h2``: theta (documents x topics), each
    document's KL, and what the backward needs. ``w*``/``b*`` as ``nn.Linear`` stores them (out x
    in); ``keep_*``: dropout masks (empty: none), ``kept`` = 1 - p; ``norm_eps``: the LayerNorm's epsilon."""
    d = h2.copy()
    _drop(d, keep_hidden, kept)
    mu = np.dot(d, w_mu.T) + b_mu
    log_var = np.dot(d, w_sigma.T) + b_sigma
    n, k = mu.shape
    rstd_mu = np.empty(n, dtype=h2.dtype)
    rstd_sigma = np.empty(n, dtype=h2.dtype)
    _layer_norm(mu, rstd_mu, norm_eps)
    _layer_norm(log_var, rstd_sigma, norm_eps)
    noise = np.empty_like(mu)
    shares = np.empty_like(mu)
    theta = np.empty_like(mu)
    kl = np.empty(n, dtype=h2.dtype)
    log_det = 0.0
    for j in range(k):
        log_det += np.log(prior_var[j])
    dropout = keep_theta.size > 0
    for i in range(n):
        top = -np.inf
        total = 0.0
        for j in range(k):
            noise[i, j] = eps[i, j] * np.exp(0.5 * log_var[i, j])
            shares[i, j] = mu[i, j] + noise[i, j]
            top = max(top, shares[i, j])
            diff = prior_mean[j] - mu[i, j]
            total += np.exp(log_var[i, j]) / prior_var[j] + diff * diff / prior_var[j] - log_var[i, j]
        kl[i] = 0.5 * (total - k + log_det)
        mass = 0.0
        for j in range(k):
            shares[i, j] = np.exp(shares[i, j] - top)
            mass += shares[i, j]
        for j in range(k):
            shares[i, j] = shares[i, j] / mass
            theta[i, j] = shares[i, j] * keep_theta[i, j] / kept if dropout else shares[i, j]
    return theta, kl, d, mu, rstd_mu, log_var, rstd_sigma, noise, shares


@numba.njit(cache=True, nogil=True)
def encoder_heads_backward(
    grad_theta: np.ndarray,
    grad_kl: np.ndarray,
    w_mu: np.ndarray,
    w_sigma: np.ndarray,
    prior_mean: np.ndarray,
    prior_var: np.ndarray,
    keep_hidden: np.ndarray,
    keep_theta: np.ndarray,
    kept: float,
    d: np.ndarray,
    mu: np.ndarray,
    rstd_mu: np.ndarray,
    log_var: np.ndarray,
    rstd_sigma: np.ndarray,
    noise: np.ndarray,
    shares: np.ndarray,
) -> tuple:
    """The gradients of ``sum(grad_theta * theta) + sum(grad_kl * kl)`` (:func:`encoder_heads`) with
    respect to h2, w_mu, b_mu, w_sigma, b_sigma and the prior variance."""
    n, k = mu.shape
    grad_mu = np.empty_like(mu)
    grad_sigma = np.empty_like(mu)
    grad_prior = np.zeros(k, dtype=mu.dtype)
    dropout = keep_theta.size > 0
    for i in range(n):
        dot = 0.0
        for j in range(k):
            g = grad_theta[i, j] * keep_theta[i, j] / kept if dropout else grad_theta[i, j]
            grad_mu[i, j] = g
            dot += shares[i, j] * g
        g_kl = grad_kl[i]
        for j in range(k):
            variance = prior_var[j]
            through_softmax = shares[i, j] * (grad_mu[i, j] - dot)
            diff = mu[i, j] - prior_mean[j]
            ratio = np.exp(log_var[i, j]) / variance
            grad_mu[i, j] = through_softmax + g_kl * diff / variance
            grad_sigma[i, j] = 0.5 * through_softmax * noise[i, j] + 0.5 * g_kl * (ratio - 1.0)
            grad_prior[j] += 0.5 * g_kl * (1.0 - ratio - diff * diff / variance) / variance
    _layer_norm_backward(mu, rstd_mu, grad_mu)
    _layer_norm_backward(log_var, rstd_sigma, grad_sigma)
    grad_w_mu = np.dot(grad_mu.T, d)
    grad_w_sigma = np.dot(grad_sigma.T, d)
    grad_b_mu = grad_mu.sum(axis=0)
    grad_b_sigma = grad_sigma.sum(axis=0)
    grad_h2 = np.dot(grad_mu, w_mu) + np.dot(grad_sigma, w_sigma)
    _drop(grad_h2, keep_hidden, kept)
    return grad_h2, grad_w_mu, grad_b_mu, grad_w_sigma, grad_b_sigma, grad_prior


def _array(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().contiguous().numpy()


def _activate(x: torch.Tensor, relu: bool) -> torch.Tensor:
    return F.relu(x) if relu else F.softplus(x)


def _through_activation(grad: torch.Tensor, x: torch.Tensor, out: torch.Tensor, relu: bool) -> torch.Tensor:
    """``grad`` times the activation's slope at ``x`` (``out``: its value there), as autograd takes it."""
    if relu:
        return torch.ops.aten.threshold_backward(grad, out, 0)
    return torch.ops.aten.softplus_backward(grad, x, 1.0, 20.0)


class EncoderTail(torch.autograd.Function):
    """theta and each document's KL from the first layer's output: the two hidden layers'
    activations and the middle product in torch (vectorised transcendental functions), the rest as
    :func:`encoder_heads`; the parameters enter as tensors so autograd routes their gradients."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        a0: torch.Tensor,
        w2: torch.Tensor,
        b2: torch.Tensor,
        w_mu: torch.Tensor,
        b_mu: torch.Tensor,
        w_sigma: torch.Tensor,
        b_sigma: torch.Tensor,
        prior_var: torch.Tensor,
        prior_mean: torch.Tensor,
        eps: torch.Tensor,
        keep_hidden: torch.Tensor | None,
        keep_theta: torch.Tensor | None,
        kept: float,
        relu: bool,
        norm_eps: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        a0, w2 = a0.detach(), w2.detach()
        h1 = _activate(a0, relu)
        a1 = torch.addmm(b2.detach(), h1, w2.t())
        h2 = _activate(a1, relu).contiguous()
        heads = (w_mu, w_sigma, prior_mean, prior_var)
        w_mu_, w_sigma_, prior_mean_, prior_var_ = (_array(t) for t in heads)
        masks = tuple(NO_MASK if m is None else _array(m) for m in (keep_hidden, keep_theta))
        out = encoder_heads(
            h2.numpy(),
            w_mu_,
            _array(b_mu),
            w_sigma_,
            _array(b_sigma),
            prior_mean_,
            prior_var_,
            _array(eps),
            *masks,
            kept,
            norm_eps,
        )
        # numpy arrays and detached tensors, not saved tensors: nothing modifies them before the backward
        ctx.saved = (w_mu_, w_sigma_, prior_mean_, prior_var_, *masks, kept, *out[2:])  # type: ignore[attr-defined]
        ctx.layers = (a0, w2, h1, a1, h2, relu)  # type: ignore[attr-defined]
        return torch.from_numpy(out[0]), torch.from_numpy(out[1])

    @staticmethod
    @once_differentiable
    def backward(ctx: torch.autograd.function.FunctionCtx, grad_theta: torch.Tensor, grad_kl: torch.Tensor) -> tuple:
        grads = encoder_heads_backward(_array(grad_theta), _array(grad_kl), *ctx.saved)  # type: ignore[attr-defined]
        grad_h2, w_mu, b_mu, w_sigma, b_sigma, prior = (torch.from_numpy(g) for g in grads)
        a0, w2, h1, a1, h2, relu = ctx.layers  # type: ignore[attr-defined]
        grad_a1 = _through_activation(grad_h2, a1, h2, relu)
        grad_a0 = _through_activation(grad_a1 @ w2, a0, h1, relu)
        return grad_a0, grad_a1.t() @ h1, grad_a1.sum(0), w_mu, b_mu, w_sigma, b_sigma, prior, *(None,) * 7
