"""ProdLDA (Srivastava & Sutton, 2017) as in the CTM reference implementation.

Two deliberate differences from CTM, both needed for exact federated training:

* Randomness (dropout masks, reparameterisation noise) is drawn from an explicit
  ``torch.Generator`` passed to :meth:`ProdLDA.loss_on_batch`, so that a federated
  client and the centralized trainer can draw the same numbers for the same documents.
* BatchNorm layers (affine-free, as in CTM) normalise with the statistics of the batch
  they see but never update their running statistics in ``forward``: they *return* the
  batch mean and variance. Whoever owns the global model (the server, or the centralized
  trainer) averages those statistics over clients / ghost batches weighted by batch size
  and applies them with :meth:`ProdLDA.apply_statistics`. See docs/batchnorm.md.

The loss is the *mean* negative ELBO over the batch (CTM sums it); with the mean,
the batch-size-weighted average of client gradients (gFedNTM eq. 2) equals the gradient
of the mean loss over the concatenated batch.
"""

from __future__ import annotations

import contextlib
import itertools
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

from fedtopic_pipelines.core.config import ProdLDAConfig
from fedtopic_pipelines.core.models.fused import EncoderTail
from fedtopic_pipelines.core.rows import add_bag_rows, bag_times_rows, bag_totals_and_dots, subtract_bag


class RunningBatchNorm(nn.Module):
    """Affine-free BatchNorm whose running statistics are updated explicitly."""

    def __init__(self, size: int, momentum: float = 0.1, eps: float = 1e-5) -> None:
        super().__init__()
        self.momentum = momentum
        self.eps = eps
        self.register_buffer("running_mean", torch.zeros(size))
        self.register_buffer("running_var", torch.ones(size))

    def forward(self, x: torch.Tensor, stats: dict[str, torch.Tensor] | None, name: str) -> torch.Tensor:
        if self.training:
            if stats is not None:
                # unbiased variance, as nn.BatchNorm1d tracks it
                stats[f"{name}.var"], stats[f"{name}.mean"] = torch.var_mean(x.detach(), dim=0, unbiased=True)
            return F.batch_norm(x, None, None, training=True, eps=self.eps)
        return F.batch_norm(x, self.running_mean, self.running_var, training=False, eps=self.eps)

    @torch.no_grad()
    def update(self, mean: torch.Tensor, var: torch.Tensor) -> None:
        """Exponential moving average, as ``nn.BatchNorm1d`` does with ``momentum``."""
        self.running_mean.mul_(1 - self.momentum).add_(mean, alpha=self.momentum)
        self.running_var.mul_(1 - self.momentum).add_(var, alpha=self.momentum)


class PassComplete(Exception):
    """Raised inside a forward pass once a :class:`PooledPass` has every sum it came for: the rest
    of the pass is not needed in that exchange."""


class PooledPass(dict):
    """One organisation's side of a pooled (synchronised) BatchNorm step: the statistics of the
    step's batch over *all* organisations, exchanged as sums (docs/batchnorm.md, section 8).

    ``given`` maps a pooled layer to the pooled sums (S1 = sum of x, S2 = sum of x squared, over
    every organisation's documents; float64, so the variance S2/N - (S1/N)^2 loses nothing to
    cancellation) and ``total`` is N. A layer whose sums are given normalises with them; one
    whose sums are not yet given records this organisation's own sums in ``local`` (and lets its
    input through), and once the last layer named in ``collect`` (in forward order) has done so
    the pass on this batch ends with :class:`PassComplete`. ``local`` also holds, for the given
    layers, this organisation's sums as functions of the parameters: the backward exchanges
    differentiate through them. It is a dict so that per-organisation BatchNorm layers still
    write their statistics into it.
    """

    def __init__(
        self,
        given: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None,
        total: float = 0.0,
        collect: tuple[str, ...] = (),
    ) -> None:
        super().__init__()
        self.given = given or {}
        self.total = total
        self.collect = collect
        self.local: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def normalise(self, name: str, x: torch.Tensor, eps: float) -> torch.Tensor:
        wide = x.double()
        sums = (wide.sum(dim=0), (wide * wide).sum(dim=0))
        if name in self.local:  # another part of the same step (the centralized trainer's ghost batches)
            sums = (self.local[name][0] + sums[0], self.local[name][1] + sums[1])
        self.local[name] = sums
        if name not in self.given:
            if self.collect and name == self.collect[-1]:  # the last the pass came for, on this batch
                raise PassComplete
            return x
        s1, s2 = self.given[name]
        mean = s1 / self.total
        var = (s2 / self.total - mean * mean).clamp(min=0.0)  # biased, as BatchNorm normalises
        return (x - mean.to(x.dtype)) * torch.rsqrt(var + eps).to(x.dtype)


class PooledBatchNorm(RunningBatchNorm):
    """Affine-free BatchNorm over the step's batch of *every* organisation (``pooled_batch``):
    synchronised BatchNorm, its statistics exchanged as sums (:class:`PooledPass`). Outside a
    pooled pass (one party holding the whole step, :meth:`ProdLDA.loss_on_union`, or a replay)
    it is BatchNorm on what it sees, which is then the same thing. Running statistics as
    :class:`RunningBatchNorm`; the server folds in the pooled batch's."""

    def forward(self, x: torch.Tensor, stats: dict[str, torch.Tensor] | None, name: str) -> torch.Tensor:
        if self.training and isinstance(stats, PooledPass):
            return stats.normalise(name, x, self.eps)
        return super().forward(x, stats, name)


class DocumentNorm(nn.Module):
    """Affine-free LayerNorm over each document's units (``normalization: layer``).

    Each row is normalised with its own mean and variance, so a document's output never
    depends on the other documents of its batch: any grouping of documents into client
    batches computes the same function (docs/batchnorm.md). No statistics, no buffers.
    """

    def __init__(self, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, stats: dict[str, torch.Tensor] | None, name: str) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], eps=self.eps)


class NoNorm(nn.Module):
    """No normalisation (``normalization: none``): the layer's input unchanged."""

    def forward(self, x: torch.Tensor, stats: dict[str, torch.Tensor] | None, name: str) -> torch.Tensor:
        return x


NORM_LAYERS = ("mu_bn", "sigma_bn", "beta_bn")


def _norm(kind: str, size: int) -> nn.Module:
    """The normalisation layer ``train.model.normalization`` names (docs/batchnorm.md, section 5);
    the decoder's ``centred`` and ``standardised`` act on beta instead (:func:`decoder_weight`)."""
    if kind == "batch":
        return RunningBatchNorm(size)
    if kind == "pooled_batch":
        return PooledBatchNorm(size)
    return DocumentNorm() if kind.endswith("layer") else NoNorm()


def decoder_weight(beta: torch.Tensor, kind: str) -> torch.Tensor:
    """The topic-word weights the decoder multiplies theta with. ``centred``: each word's column
    minus its mean over the topics, so a word's background cannot live in beta (BatchNorm removes
    it per batch; this removes it from the weights, batch-free); ``standardised``: also divided
    by the column's standard deviation over the topics (docs/batchnorm.md, section 7). A
    ``+layer`` suffix adds the document LayerNorm on the logits (:func:`_norm`)."""
    kind = kind.removesuffix("+layer")
    if kind == "centred":
        return beta - beta.mean(dim=0, keepdim=True)
    if kind == "standardised":
        return F.layer_norm(beta.t(), beta.shape[:1]).t()
    return beta


@dataclass
class BatchLoss:
    """Mean negative ELBO of one batch, its parts and the batch's BatchNorm statistics."""

    loss: torch.Tensor
    kl: torch.Tensor
    reconstruction: torch.Tensor
    statistics: dict[str, torch.Tensor]
    n: int


class Draws(NamedTuple):
    """The random numbers of one pass over n documents, drawn before it: the encoder's dropout
    mask (n x last hidden size), the reparameterisation noise and theta's dropout mask (n x K).
    A mask is None without dropout (or in eval mode, where only the noise is drawn). Drawing
    them first, in the pass's own order, gives the same numbers as drawing them inside it, and
    lets a per-document pass (sample-level DP-SGD) take each document's row of them."""

    encoder_keep: torch.Tensor | None
    eps: torch.Tensor
    theta_keep: torch.Tensor | None


def _keep(shape: tuple[int, ...], p: float, generator: torch.Generator | None, like: torch.Tensor) -> torch.Tensor:
    return torch.rand(shape, generator=generator, device=like.device, dtype=like.dtype) >= p


def _dropout(x: torch.Tensor, keep: torch.Tensor | None, p: float) -> torch.Tensor:
    if keep is None:
        return x
    return x * keep / (1.0 - p)


def csr_tensor(matrix: sp.csr_matrix, device: torch.device | str = "cpu") -> torch.Tensor:
    """A scipy CSR matrix as a torch sparse CSR tensor (sorted indices): the batch sources' layout,
    and what evaluation's completion perplexity gathers the held-out words' probabilities from."""
    matrix = matrix.tocsr()
    matrix.sort_indices()
    return csr_from_arrays(matrix.indptr, matrix.indices, matrix.data, matrix.shape, device)


def csr_from_arrays(
    indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, shape: tuple[int, int], device: torch.device | str
) -> torch.Tensor:
    """A torch sparse CSR tensor from CSR arrays (indices sorted within each row)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse (CSR tensor support|invariant checks)", category=UserWarning)
        return torch.sparse_csr_tensor(
            torch.from_numpy(indptr.astype(np.int64, copy=False)),
            torch.from_numpy(indices.astype(np.int64, copy=False)),
            torch.from_numpy(data),
            size=shape,
            device=device,
        )


def _compiled_loops(bow: torch.Tensor, other: torch.Tensor) -> bool:
    """Whether a batch goes through the compiled loops of core/rows.py: a sparse CSR batch on the
    CPU in ``other``'s floating type (a dense batch, as sample-level DP-SGD's ``vmap`` gives, or
    an accelerator takes dense torch operations)."""
    return bow.layout == torch.sparse_csr and bow.device.type == "cpu" and bow.dtype == other.dtype


def dense_bow(bow: torch.Tensor) -> torch.Tensor:
    """A bag-of-words batch as a dense tensor (a sparse CSR batch, as the batch sources give it,
    densified once per pass)."""
    return bow.to_dense() if bow.layout == torch.sparse_csr else bow


class _BagTimesRows(torch.autograd.Function):
    """A sparse CSR batch times a (words x units) table on the CPU, forward and backward as compiled
    loops over the batch's entries (:func:`~fedtopic_pipelines.core.rows.bag_times_rows`)."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        crow: torch.Tensor,
        col: torch.Tensor,
        values: torch.Tensor,
        table: torch.Tensor,
    ) -> torch.Tensor:
        rows = table.detach().numpy()
        out = np.zeros((crow.shape[0] - 1, rows.shape[1]), dtype=rows.dtype)
        bag_times_rows(crow.numpy(), col.numpy(), values.numpy(), rows, out)
        ctx.save_for_backward(crow, col, values)
        ctx.table_shape = tuple(table.shape)  # type: ignore[attr-defined]
        return torch.from_numpy(out)

    @staticmethod
    @once_differentiable
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple[None, None, None, torch.Tensor]:
        crow, col, values = ctx.saved_tensors  # type: ignore[attr-defined]
        grad = grad.contiguous().numpy()
        table_grad = np.zeros(ctx.table_shape, dtype=grad.dtype)  # type: ignore[attr-defined]
        add_bag_rows(crow.numpy(), col.numpy(), values.numpy(), grad, table_grad)
        return None, None, None, torch.from_numpy(table_grad)


def bag_linear(bow: torch.Tensor, table: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``bow @ table + bias`` for a table stored one row per word (words x units), the encoder's
    first layer. On the CPU a sparse CSR batch reads and writes only its words' rows: 6 to 13x
    faster than densifying it for a (units x words) product, at 13,729 words and 0.7 % non-zero,
    forward and backward, on a loaded host (docs/performance.md). Elsewhere, or for a dense batch (sample-level
    DP-SGD's ``vmap`` differentiates dense rows), it is a dense product."""
    if _compiled_loops(bow, table):
        out = _BagTimesRows.apply(bow.crow_indices(), bow.col_indices(), bow.values(), table)
    else:
        out = dense_bow(bow) @ table
    return out if bias is None else out + bias


class BagOfWordsLinear(nn.Module):
    """A linear layer stored one row per input (``weight``: in x out), so that a bag of words reads
    its words' rows only (:func:`bag_linear`). It draws its initial weights as ``nn.Linear`` does,
    so a seed gives the same function as before; the stored weight is that one transposed."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        linear = nn.Linear(in_features, out_features)
        self.weight = nn.Parameter(linear.weight.detach().t().contiguous())
        self.bias = nn.Parameter(linear.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return bag_linear(x, self.weight, self.bias)

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: object, **kwargs: object) -> None:
        """A model saved with the layer as an ``nn.Linear`` (out x in) still loads: its weight is
        transposed. A square layer cannot tell the layouts apart; it has no bag of words to read."""
        key = prefix + "weight"
        weight = state_dict.get(key)
        rows, columns = self.weight.shape
        if isinstance(weight, torch.Tensor) and rows != columns and tuple(weight.shape) == (columns, rows):
            state_dict[key] = weight.t().contiguous()
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)  # type: ignore[arg-type]


class _SparseCountsNLL(torch.autograd.Function):
    """-sum_w n_w log softmax(logits)_w per document of a sparse CSR bag of words on the CPU,
    without densifying it: N lse(logits) - sum_w n_w logits_w (N: the document's count) reads the
    logits at the present words only, and the gradient N softmax(logits) - n writes them only,
    each as one compiled loop over the batch's entries
    (:func:`~fedtopic_pipelines.core.rows.bag_totals_and_dots`)."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        logits: torch.Tensor,
        crow: torch.Tensor,
        col: torch.Tensor,
        values: torch.Tensor,
    ) -> torch.Tensor:
        logits = logits.contiguous()
        table = logits.detach().numpy()
        totals = np.empty(table.shape[0], dtype=table.dtype)
        dots = np.empty_like(totals)
        bag_totals_and_dots(crow.numpy(), col.numpy(), values.numpy(), table, totals, dots)
        lse = torch.logsumexp(logits, dim=1)
        counts = torch.from_numpy(totals)
        ctx.save_for_backward(logits, lse, counts, crow, col, values)
        return counts * lse - torch.from_numpy(dots)

    @staticmethod
    @once_differentiable
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        logits, lse, counts, crow, col, values = ctx.saved_tensors  # type: ignore[attr-defined]
        grad = grad.contiguous()
        out = torch.exp(logits - lse[:, None]).mul_((grad * counts)[:, None])
        subtract_bag(crow.numpy(), col.numpy(), values.numpy(), grad.numpy(), out.numpy())
        return out, None, None, None


def _reconstruction(bow: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """Per-document negative log-likelihood of the counts, -sum_w n_w log p_w with
    p = softmax(logits). A sparse CSR batch never becomes a dense (batch x V) tensor
    (:class:`_SparseCountsNLL`); a dense one (sample-level DP-SGD's ``vmap``) goes through the
    log-softmax: one pass over the logits forward and one backward."""
    if _compiled_loops(bow, logits):
        return _SparseCountsNLL.apply(logits, bow.crow_indices(), bow.col_indices(), bow.values())
    return -torch.sum(dense_bow(bow) * F.log_softmax(logits, dim=1), dim=1)


class ProdLDA(nn.Module):
    """Encoder (softplus MLP) -> logistic-normal topic proportions -> product-of-experts decoder."""

    def __init__(self, vocab_size: int, config: ProdLDAConfig) -> None:
        super().__init__()
        self.config = config
        k = config.n_topics
        sizes = (self._encoder_input_size(vocab_size, config), *config.hidden_sizes)
        self.hidden = nn.ModuleList(
            [BagOfWordsLinear(sizes[0], sizes[1]), *(nn.Linear(a, b) for a, b in itertools.pairwise(sizes[1:]))]
        )
        # No bias before an affine-free BatchNorm: BN subtracts it, so its true gradient
        # is exactly zero and Adam would turn float rounding noise into lr-sized steps
        # (CTM keeps the bias; the function computed is the same). See docs/batchnorm.md.
        # LayerNorm removes only a bias shared by all units, so there (and without
        # normalisation) the per-topic bias is a real parameter and is kept.
        bias = "batch" not in config.normalization  # the encoder's normalisation (batch, pooled_batch)
        self.f_mu = nn.Linear(sizes[-1], k, bias=bias)
        self.f_sigma = nn.Linear(sizes[-1], k, bias=bias)
        # affine=False as in CTM: a learned scale would let the encoder undo the
        # normalisation and collapse the posterior.
        self.mu_bn = _norm(config.normalization, k)
        self.sigma_bn = _norm(config.normalization, k)
        self.beta_bn = _norm(config.decoder, vocab_size)
        # The prior mean stays at 0, its optimum: affine-free BN makes the batch mean of
        # mu exactly 0, so d(loss)/d(prior_mean) = prior_mean / prior_var carries no data
        # and Adam would only make it oscillate on rounding noise (docs/batchnorm.md).
        # ``learn_priors`` learns the prior variance, as CTM does.
        self.register_buffer("prior_mean", torch.zeros(k))
        prior_var = torch.full((k,), 1.0 - 1.0 / k)
        if config.learn_priors:
            self.prior_variance = nn.Parameter(prior_var)
        else:
            self.register_buffer("prior_variance", prior_var)
        self.beta = nn.Parameter(torch.empty(k, vocab_size))
        nn.init.xavier_uniform_(self.beta)
        if config.word_bias:
            self.word_bias = nn.Parameter(torch.zeros(vocab_size))
        else:
            self.word_bias = None
        self._activation = F.softplus if config.activation == "softplus" else F.relu

    def _encoder_input_size(self, vocab_size: int, config: ProdLDAConfig) -> int:
        """Width of the encoder's input: the bag of words (subclasses add an embedding view)."""
        return vocab_size

    def _encoder_input(self, batch: torch.Tensor) -> torch.Tensor:
        """The encoder's first layer on a batch, before its activation."""
        return self.hidden[0](batch)

    def documents(self, batch: torch.Tensor) -> int:
        """How many documents a batch holds."""
        return int(self._bow(batch).shape[0])

    @staticmethod
    def _bow(batch: torch.Tensor) -> torch.Tensor:
        """The bag of words of a batch (what the decoder reconstructs)."""
        return batch

    def set_background(self, frequency: np.ndarray) -> None:
        """Start ``word_bias`` at the words' log relative frequency (Scholar's background term),
        so that beta's rows begin as deviations from it. ``frequency``: summed counts per term,
        which the vocabulary consensus already has. No-op without ``word_bias``."""
        if self.word_bias is None:
            return
        counts = torch.as_tensor(frequency, dtype=self.word_bias.dtype).clamp(min=1.0)
        with torch.no_grad():
            self.word_bias.copy_(torch.log(counts / counts.sum()))

    @classmethod
    def create(cls, vocab_size: int, config: ProdLDAConfig, seed: int) -> ProdLDA:
        """Build with weights drawn from ``seed`` without touching the global RNG."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return cls(vocab_size, config)

    @property
    def n_topics(self) -> int:
        return self.config.n_topics

    def encode(
        self, bow: torch.Tensor, keep: torch.Tensor | None, stats: dict[str, torch.Tensor] | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior mean and log-variance of the logistic-normal topic proportions (``keep``: the
        encoder's dropout mask, in training mode)."""
        x = self._activation(self._encoder_input(bow))
        for layer in self.hidden[1:]:
            x = self._activation(layer(x))
        if self.training:
            x = _dropout(x, keep, self.config.dropout)
        mu = self.mu_bn(self.f_mu(x), stats, "mu_bn")
        log_var = self.sigma_bn(self.f_sigma(x), stats, "sigma_bn")
        return mu, log_var

    def decoder_logits(self, theta: torch.Tensor, stats: dict[str, torch.Tensor] | None) -> torch.Tensor:
        """The decoder's logits over the vocabulary: BN(theta @ beta) [+ word_bias]."""
        logits = self.beta_bn(theta @ decoder_weight(self.beta, self.config.decoder), stats, "beta_bn")
        if self.word_bias is not None:
            logits = logits + self.word_bias
        return logits

    def decode(self, theta: torch.Tensor, stats: dict[str, torch.Tensor] | None) -> torch.Tensor:
        """Word distribution of each document: softmax(BN(theta @ beta) [+ word_bias])."""
        return F.softmax(self.decoder_logits(theta, stats), dim=1)

    def _kl(self, mu: torch.Tensor, log_var: torch.Tensor) -> torch.Tensor:
        prior_var = self.prior_variance
        var_division = torch.sum(log_var.exp() / prior_var, dim=1)
        diff = self.prior_mean - mu
        diff_term = torch.sum(diff * diff / prior_var, dim=1)
        logvar_det_division = prior_var.log().sum() - log_var.sum(dim=1)
        return 0.5 * (var_division + diff_term - self.n_topics + logvar_det_division)

    def loss_on_batch(
        self, bow: torch.Tensor, generator: torch.Generator | None, pooled: PooledPass | None = None
    ) -> BatchLoss:
        """Mean negative ELBO of a training batch (dropout and noise drawn from ``generator``);
        ``pooled``: the pooled BatchNorm sums of the step (raises :class:`PassComplete` when the
        pass came only to collect this batch's own)."""
        bow = self._cast(bow)
        return self._batch_loss(bow, self.draws(self.documents(bow), generator), {} if pooled is None else pooled)

    def loss_on_union(self, parts: list[tuple[torch.Tensor, torch.Generator | None]]) -> BatchLoss:
        """Mean negative ELBO of several batches normalised as ONE BatchNorm batch, each drawing
        its dropout and noise from its own generator as :meth:`loss_on_batch` would: what pooled
        BatchNorm computes when one party holds the whole step (a trusted server's ghost batches,
        an organisation training alone), without the exchanges."""
        batches = [self._cast(batch) for batch, _ in parts]
        generators = [generator for _, generator in parts]
        draws = [self.draws(self.documents(b), g) for b, g in zip(batches, generators, strict=True)]
        joined = Draws(*(torch.cat(d) if d[0] is not None else None for d in zip(*draws, strict=True)))
        return self._batch_loss(self.join(batches), joined, {})

    def _batch_loss(self, batch: torch.Tensor, draws: Draws, stats: dict[str, torch.Tensor]) -> BatchLoss:
        """The mean negative ELBO of a training batch with its draws; BatchNorm needs 2 documents."""
        n = self.documents(batch)
        if n < 2 and self.config.batch_coupled():
            raise ValueError("ProdLDA needs at least 2 documents per batch (BatchNorm statistics)")
        rl, kl = self(batch, draws, stats)
        return BatchLoss((rl + kl).mean(), kl.detach().mean(), rl.detach().mean(), stats, n)

    @staticmethod
    def join(batches: list[torch.Tensor]) -> torch.Tensor:
        """Batches as one: sparse CSR rows stacked (dense ones concatenated)."""
        if batches[0].layout != torch.sparse_csr:
            return torch.cat(batches)
        offsets, rows, crows = 0, 0, []
        for batch in batches:
            crows.append(batch.crow_indices()[:-1] + offsets)
            offsets += int(batch.crow_indices()[-1])
            rows += batch.shape[0]
        crows.append(torch.tensor([offsets], dtype=crows[0].dtype, device=crows[0].device))
        return torch.sparse_csr_tensor(
            torch.cat(crows),
            torch.cat([b.col_indices() for b in batches]),
            torch.cat([b.values() for b in batches]),
            size=(rows, batches[0].shape[1]),
        )

    def _cast(self, batch: torch.Tensor) -> torch.Tensor:
        """The batch in the model's floating type."""
        return batch.to(self.beta.dtype)

    def draws(self, n: int, generator: torch.Generator | None) -> Draws:
        """The random numbers a pass over ``n`` documents takes from ``generator``, in its order:
        in training mode the encoder's dropout mask, the noise, theta's dropout mask; in eval
        mode the noise alone."""
        like = self.beta
        p = self.config.dropout
        dropout = self.training and p > 0.0
        encoder_keep = _keep((n, self.config.hidden_sizes[-1]), p, generator, like) if dropout else None
        eps = torch.randn((n, self.n_topics), generator=generator, device=like.device, dtype=like.dtype)
        theta_keep = _keep((n, self.n_topics), p, generator, like) if dropout else None
        return Draws(encoder_keep, eps, theta_keep)

    def forward(
        self, batch: torch.Tensor, draws: Draws, stats: dict[str, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-document reconstruction and KL terms of ``batch`` with the given draws (what
        ``torch.func`` differentiates document by document for sample-level DP-SGD)."""
        bow = self._bow(batch)
        if self._fused(bow):
            theta, kl = self._fused_tail(batch, draws)
            return _reconstruction(bow, self.decoder_logits(theta, stats)), kl
        mu, log_var = self.encode(batch, draws.encoder_keep, stats)
        theta = F.softmax(mu + draws.eps * torch.exp(0.5 * log_var), dim=1)
        if self.training:
            theta = _dropout(theta, draws.theta_keep, self.config.dropout)
        rl = _reconstruction(bow, self.decoder_logits(theta, stats))
        return rl, self._kl(mu, log_var)

    def _fused(self, bow: torch.Tensor) -> bool:
        """Whether a pass takes the compiled encoder tail (core/models/fused.py): a sparse CSR batch
        on the CPU (as the compiled loops of the first layer), one hidden layer after the first,
        per-document LayerNorm on mu and log-variance. Anything else (BatchNorm, a dense batch such
        as sample-level DP-SGD's per-document ``vmap``, an accelerator) goes through torch."""
        return (
            _compiled_loops(bow, self.beta)
            and len(self.hidden) == 2
            and isinstance(self.mu_bn, DocumentNorm)
            and isinstance(self.sigma_bn, DocumentNorm)
            and self.mu_bn.eps == self.sigma_bn.eps
        )

    def _fused_tail(self, batch: torch.Tensor, draws: Draws) -> tuple[torch.Tensor, torch.Tensor]:
        """theta and each document's KL term through :class:`EncoderTail`: the same function as
        :meth:`encode`, the draw and :meth:`_kl`."""
        middle = self.hidden[1]
        dropout = self.training and self.config.dropout > 0.0
        return EncoderTail.apply(
            self._encoder_input(batch),
            middle.weight,
            middle.bias,
            self.f_mu.weight,
            self.f_mu.bias,
            self.f_sigma.weight,
            self.f_sigma.bias,
            self.prior_variance,
            self.prior_mean,
            draws.eps,
            draws.encoder_keep if dropout else None,
            draws.theta_keep if dropout else None,
            1.0 - self.config.dropout,
            self.config.activation == "relu",
            self.mu_bn.eps,
        )

    def _negative_elbo(
        self, bow: torch.Tensor, generator: torch.Generator | None, stats: dict[str, torch.Tensor] | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-document reconstruction and KL terms from one reparameterised sample.

        Dropout (encoder and theta) applies in training mode only; in eval mode BatchNorm
        uses its running statistics, so this is also avitm's validation pass.
        """
        return self(bow, self.draws(self._bow(bow).shape[0], generator), stats)

    def statistics_shapes(self, pooled: bool = False) -> dict[str, torch.Size]:
        """Names and shapes of the batch statistics a training step returns (``pooled``: those a
        one-party pooled step returns, its whole batch's)."""
        shapes = {}
        for name in self._statistic_layers(pooled):
            size = getattr(self, name).running_mean.shape
            shapes[f"{name}.mean"] = size
            shapes[f"{name}.var"] = size
        return shapes

    def _statistic_layers(self, pooled: bool) -> list[str]:
        return [layer for group in self.pooled_groups() for layer in group] if pooled else self._batch_norms()

    def _batch_norms(self) -> list[str]:
        """The per-organisation BatchNorm layers (``batch``), whose statistics each client sends."""
        return [name for name in NORM_LAYERS if type(getattr(self, name)) is RunningBatchNorm]

    def pooled_groups(self) -> list[list[str]]:
        """The pooled BatchNorm layers (``pooled_batch``) in the order a forward pass reaches them,
        grouped by what one exchange can collect: mu's and sigma's together (both read the
        encoder's output), then the decoder's (it reads theta, which needs the first group's)."""
        groups = (("mu_bn", "sigma_bn"), ("beta_bn",))
        pooled = [[n for n in group if isinstance(getattr(self, n), PooledBatchNorm)] for group in groups]
        return [group for group in pooled if group]

    @torch.no_grad()
    def apply_pooled_statistics(self, sums: dict[str, tuple[torch.Tensor, torch.Tensor]], total: float) -> None:
        """Fold a pooled step's mean and unbiased variance (from its sums) into the running estimates."""
        for name, (s1, s2) in sums.items():
            layer = getattr(self, name)
            mean = s1 / total
            var = (s2 - s1 * mean).clamp(min=0.0) / max(total - 1.0, 1.0)
            layer.update(mean.to(layer.running_mean.dtype), var.to(layer.running_var.dtype))

    @torch.no_grad()
    def apply_statistics(self, statistics: dict[str, torch.Tensor], pooled: bool = False) -> None:
        """Fold aggregated batch statistics into the BatchNorm running estimates (``pooled``: of
        the pooled layers, from a step one party held whole)."""
        for name in self._statistic_layers(pooled):
            getattr(self, name).update(statistics[f"{name}.mean"], statistics[f"{name}.var"])

    @contextlib.contextmanager
    def _eval_mode(self) -> Iterator[None]:
        """Eval mode (running BatchNorm statistics, no dropout) for the block, then back."""
        was_training = self.training
        self.eval()
        try:
            yield
        finally:
            self.train(was_training)

    @torch.no_grad()
    def doc_topic(self, bow: torch.Tensor) -> torch.Tensor:
        """Document-topic proportions at the posterior mean (eval mode, deterministic)."""
        with self._eval_mode():
            mu, _ = self.encode(self._cast(bow), None, None)
        return F.softmax(mu, dim=1)

    @torch.no_grad()
    def validation_loss(self, bow: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """Per-document negative ELBO in eval mode, for early stopping.

        As avitm's validation pass: BatchNorm with running statistics, no dropout, one
        reparameterised sample (from ``generator``, so a fixed seed gives the same noise
        at every validation and the comparison between validations reflects the weights).
        """
        with self._eval_mode():
            rl, kl = self._negative_elbo(self._cast(bow), generator, None)
        return rl + kl

    @torch.no_grad()
    def sampled_doc_topic(self, bow: torch.Tensor, n_samples: int, generator: torch.Generator | None) -> torch.Tensor:
        """Document-topic proportions averaged over ``n_samples`` posterior draws (eval mode).

        avitm's ``get_doc_topic_distribution`` (20 samples), which the gFedNTM synthetic
        experiment used; ``n_samples=0`` gives :meth:`doc_topic` (the posterior mean).
        """
        if n_samples == 0:
            return self.doc_topic(bow)
        with self._eval_mode():
            mu, log_var = self.encode(self._cast(bow), None, None)
        sigma = torch.exp(0.5 * log_var)
        total = torch.zeros_like(mu)
        for _ in range(n_samples):
            eps = torch.randn(mu.shape, generator=generator, device=mu.device, dtype=mu.dtype)
            total += F.softmax(mu + eps * sigma, dim=1)
        return total / n_samples

    @torch.no_grad()
    def word_distribution(self, bow: torch.Tensor) -> torch.Tensor:
        """Predicted word distribution of each document at its posterior mean (eval mode)."""
        with self._eval_mode():
            return self.decode(self.doc_topic(self._cast(bow)), None)

    @torch.no_grad()
    def topic_word(self) -> torch.Tensor:
        """Topic-word distributions: softmax of each row of the decoder's weights (K x V): beta,
        or its column-centred / standardised form, which the decoder uses."""
        return F.softmax(decoder_weight(self.beta, self.config.decoder), dim=1)
