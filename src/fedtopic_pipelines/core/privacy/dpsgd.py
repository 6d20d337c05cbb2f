"""Sample-level DP-SGD for the gradient family (``privacy.dp.level: sample``; docs/privacy.md).

Abadi et al. (2016), "Deep learning with differential privacy", Algorithm 1, run by every
organisation on its own mini-batch in each FedSGD round: the gradient of each document's
negative ELBO is computed alone (``torch.func``: ``vmap`` of ``grad`` over the batch's rows,
with the batch's own dropout masks and reparameterisation noise, row by row), clipped to L2
norm C over all shared parameters together, summed, and Gaussian noise N(0, (sigma C)^2) is
added before dividing by the batch size. What leaves the organisation is then an
(epsilon, delta)-DP release with respect to adding or removing one of its documents, whoever
reads it: the server, another organisation, or the published model.

Why not with BatchNorm: a batch-normalised layer makes every document's output depend on the
batch's mean and variance, so "one document's gradient" is not defined by the document alone
and clipping it does not bound what one document changes (Opacus refuses BatchNorm for the
same reason); its statistics would also leave in the clear. The configuration refuses
``normalization: batch`` with DP; LayerNorm (``layer``) normalises each document by itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch.func import functional_call, grad, vmap

from fedtopic_pipelines.core.privacy.defences import add_noise

CHUNK = 32  # documents whose per-document gradients are held at once (memory ~ CHUNK x the model)


def dense(batch: object) -> object:
    """A batch with dense tensors (``vmap`` takes no sparse CSR rows): a tensor, or a named tuple of them."""
    if isinstance(batch, torch.Tensor):
        return batch.to_dense() if batch.layout != torch.strided else batch
    return type(batch)(*(dense(part) for part in batch))  # a ContextualBatch: bag of words, embeddings


def _rows(value: object, start: int, stop: int) -> object:
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return value[start:stop]
    return type(value)(*(_rows(part, start, stop) for part in value))


def _one(value: object) -> object:
    """One document as a batch of one (vmap hands the function a row without its batch axis)."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        return value.unsqueeze(0)
    return type(value)(*(_one(part) for part in value))


def document_gradients(
    model: torch.nn.Module, batch: object, generator: torch.Generator | None, names: Sequence[str]
) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
    """Each document's gradient of its negative ELBO over the parameters ``names``, ``CHUNK``
    documents at a time (a dict of n_chunk x shape tensors) with their L2 norms over all of them.

    The draws (dropout masks, noise) are the ones a batch pass takes from ``generator``, in its
    order, so a replayed stream stays where a trained one is."""
    model.train()
    batch = dense(model._cast(batch))
    n = int(model._bow(batch).shape[0])
    draws = model.draws(n, generator)
    wanted = set(names)
    params = {name: p.detach() for name, p in model.named_parameters() if name in wanted}
    frozen = {name: p.detach() for name, p in model.named_parameters() if name not in params}
    buffers = dict(model.named_buffers())

    def loss(p: dict[str, torch.Tensor], doc: object, draw: object) -> torch.Tensor:
        rl, kl = functional_call(model, ({**p, **frozen}, buffers), (_one(doc), _one(draw)))
        return (rl + kl).sum()

    # a mask that is not drawn (no dropout) is None, and vmap maps over tensors only
    draw_dims = type(draws)(*(None if d is None else 0 for d in draws))
    per_document = vmap(grad(loss), in_dims=(None, 0, draw_dims))
    for start in range(0, n, CHUNK):
        stop = min(n, start + CHUNK)
        grads = per_document(params, _rows(batch, start, stop), _rows(draws, start, stop))
        norms = torch.sqrt(sum(g.reshape(g.shape[0], -1).pow(2).sum(dim=1) for g in grads.values()))
        yield grads, norms


def document_norms(
    model: torch.nn.Module, batch: object, generator: torch.Generator | None, names: Sequence[str]
) -> torch.Tensor:
    """The L2 norm of each document's gradient (what a clip bound is chosen against)."""
    return torch.cat([norms for _, norms in document_gradients(model, batch, generator, names)])


def clipped_gradient_sum(
    model: torch.nn.Module,
    batch: object,
    generator: torch.Generator | None,
    names: Sequence[str],
    bound: float,
) -> tuple[dict[str, torch.Tensor], int, int]:
    """The sum over the batch's documents of each one's gradient, clipped to L2 norm ``bound``
    over the parameters ``names``; the batch's documents; how many were clipped. With a bound
    nobody reaches the sum divided by n is the batch's mean-loss gradient (tests check it)."""
    wanted = set(names)
    total = {name: torch.zeros_like(p) for name, p in model.named_parameters() if name in wanted}
    n = clipped = 0
    for grads, norms in document_gradients(model, batch, generator, names):
        scale = torch.clamp(bound / torch.clamp(norms, min=1e-12), max=1.0)
        n, clipped = n + len(norms), clipped + int((norms > bound).sum())
        for name, g in grads.items():
            total[name] += torch.einsum("n,n...->...", scale.to(g.dtype), g)
    return total, n, clipped


def private_gradient(
    model: torch.nn.Module,
    parts: Sequence[tuple[object, torch.Generator | None]],
    names: Sequence[str],
    bound: float,
    std: float,
    noise: torch.Generator,
) -> tuple[dict[str, torch.Tensor], int, int]:
    """One DP-SGD gradient of a step's batches (``stream.next_batches()``): (the sum of the
    clipped per-document gradients + N(0, std^2)) / n, ``std`` = sigma x ``bound``, with n the
    step's documents; also n and how many documents were clipped. The noise comes from
    ``noise`` (the organisation's stream for the round), not from the batches' generators."""
    total: dict[str, torch.Tensor] = {}
    n = clipped = 0
    for batch, generator in parts:
        part, rows, over = clipped_gradient_sum(model, batch, generator, names, bound)
        total = {k: total[k] + v for k, v in part.items()} if total else part
        n, clipped = n + rows, clipped + over
    noisy = add_noise(total, std, noise)
    return {name: t / n for name, t in noisy.items()}, n, clipped
