"""Skip-gram Word2Vec with negative sampling (Mikolov et al. 2013; seed 003 sec. 3.1.2).

Two matrices: ``input`` (U, the word vectors that are kept) and ``output`` (V, the
context vectors). A pair (centre c, context o) with negatives n_1..n_K costs

    -log sigma(u_c . v_o) - sum_k log sigma(-u_c . v_{n_k})

and a batch's loss is the mean over its pairs. The gradient is non-zero only on the rows
the batch touched (its centres in U; its contexts and negatives in V), so a step computes
it on those rows alone (:func:`sparse_step`) and returns them with their indices: the
``SPARSE_ROWS`` update of thesis sec. 4.5.1, never a dense V x D table.

Pair generation (:func:`skipgram_pairs`) follows word2vec's C code and gensim: frequent
words are dropped with Mikolov's subsampling rule, each centre draws its window b
uniformly in 1..window, and its pairs are the words at distance <= b in the same
document. Every random draw comes from an explicit seeded generator, so a federated
client and the centralized trainer draw the same numbers for the same documents.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedtopic_pipelines.core.config import Word2VecConfig
from fedtopic_pipelines.core.rows import distinct_positions, prefetch_row


@dataclass(frozen=True)
class PairBatch:
    """Skip-gram pairs and their negatives: ``negatives`` is (K,) shared by every pair of
    the batch, or (B, K), K for each pair."""

    centers: torch.Tensor
    contexts: torch.Tensor
    negatives: torch.Tensor

    def __len__(self) -> int:
        return int(self.centers.numel())


class SkipGram(nn.Module):
    """U and V as plain parameters; initialised as word2vec's C code and gensim do
    (U uniform in +-0.5 / D, V zero), from ``seed``."""

    def __init__(self, vocab_size: int, config: Word2VecConfig, seed: int) -> None:
        super().__init__()
        self.config = config
        dim = config.dimension
        generator = torch.Generator().manual_seed(seed)
        # in place: a 200k x 200 table is 160 MB, and each temporary would be another
        self.input = nn.Parameter(torch.rand(vocab_size, dim, generator=generator).sub_(0.5).div_(dim))
        self.output = nn.Parameter(torch.zeros(vocab_size, dim))

    @property
    def vectors(self) -> torch.Tensor:
        """The word vectors (rows of U, in vocabulary order)."""
        return self.input.detach()


def pair_losses(u: torch.Tensor, v: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """Each pair's negative-sampling loss; ``n`` is (K, D) shared or (B, K, D) per pair."""
    positive = F.logsigmoid((u * v).sum(-1))
    scores = u @ n.T if n.dim() == 2 else torch.einsum("bd,bkd->bk", u, n)
    return -positive - F.logsigmoid(-scores).sum(-1)


CHUNK = 512  # pairs computed together inside a batch
# the pair whose rows the compiled loop requests while it computes the current one: 2 ahead
# measured 1.2-1.3x on the loop at 100 and 200 dimensions, 1 ahead the same within the noise,
# 4 ahead with a wider spread (docs/performance.md)
PREFETCH_DISTANCE = 2


@dataclass
class SparseGradient:
    """The gradient of a step's mean loss on the rows it touched, and its loss."""

    rows: dict[str, torch.Tensor]
    values: dict[str, torch.Tensor]
    loss: float
    pairs: int


def _shared_negatives_chunk(
    u: torch.Tensor,
    v: torch.Tensor,
    n_shared: torch.Tensor,
    ic: torch.Tensor,
    io: torch.Tensor,
    grads: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
) -> float:
    """One chunk whose negatives the whole batch shares, as matrix products; its summed loss.

    ``grads`` (du_rows, dv_rows, dn_shared), when given, accumulates the chunk's gradient.
    """
    positive = (u * v).sum(-1)
    scores = u @ n_shared.T
    # -log sigma(x) = softplus(-x); -log sigma(-s) = softplus(s)
    loss = float(F.softplus(-positive).sum() + F.softplus(scores).sum())
    if grads is not None:
        du_rows, dv_rows, dn_shared = grads
        g_pos = -torch.sigmoid(-positive).unsqueeze(-1)  # d loss / d (u . v)
        g_neg = torch.sigmoid(scores)  # d loss / d (u . n_k)
        du_rows.index_add_(0, ic, g_pos * v + g_neg @ n_shared)
        dv_rows.index_add_(0, io, g_pos * u)
        dn_shared.add_(g_neg.T @ u)
    return loss


def _per_pair_negatives_chunk(
    u: torch.Tensor,
    v_table: torch.Tensor,
    words: torch.Tensor,
    targets: torch.Tensor,
    ic: torch.Tensor,
    grads: tuple[torch.Tensor, torch.Tensor] | None,
) -> float:
    """One chunk with negatives per pair: the context and its negatives (``words``) as one (B, 1 + K) block.

    ``targets`` are their positions among the touched output rows; ``grads`` (du_rows,
    dv_rows), when given, accumulates the chunk's gradient. Returns the chunk's summed loss.
    """
    t = v_table.index_select(0, words.reshape(-1)).view(*words.shape, -1)  # (B, 1 + K, D)
    scores = (t * u.unsqueeze(1)).sum(-1)
    scores[:, 0].neg_()  # the context enters as -log sigma(x), the negatives as -log sigma(-s)
    loss = float(F.softplus(scores).sum())
    if grads is not None:
        du_rows, dv_rows = grads
        g = torch.sigmoid(scores)
        g[:, 0].neg_()
        du_rows.index_add_(0, ic, torch.bmm(g.unsqueeze(1), t).squeeze(1))
        dv_rows.index_add_(0, targets.reshape(-1), (g.unsqueeze(-1) * u.unsqueeze(1)).flatten(0, 1))
    return loss


def sparse_step(model: SkipGram, batches: list[PairBatch], grad: bool = True) -> SparseGradient:
    """The mean loss over all ``batches``' pairs (each batch with its own negatives) and, with
    ``grad``, its gradient with respect to the touched rows of U and V only.

    The gradient is written out (d/dx softplus(x) = sigma(x)). With negatives per pair, on the
    CPU, one compiled loop over the pairs computes it (:func:`_pair_kernel`, as word2vec's C
    code and gensim loop, but into gradient rows instead of updating the tables in place);
    on an accelerator, or with negatives a batch shares, batched tensor operations do
    (:func:`_tensor_sparse_step`). Tests check both against autograd.
    """
    if model.input.device.type != "cpu" or any(b.negatives.dim() == 1 for b in batches):
        # negatives a batch shares are matrix products, which BLAS runs 2.3x faster than the loop
        return _tensor_sparse_step(model, batches, grad)
    u_table, v_table = model.input.detach().numpy(), model.output.detach().numpy()
    centres = [b.centers.numpy() for b in batches]
    contexts = [b.contexts.numpy() for b in batches]
    negatives = [np.atleast_2d(b.negatives.numpy()) for b in batches]  # (K,) shared: one row
    rows_in, inv_in = distinct_positions(np.concatenate(centres), len(u_table))
    targets = np.concatenate([part for c, n in zip(contexts, negatives, strict=True) for part in (c, n.ravel())])
    rows_out, inv_out = distinct_positions(targets, len(v_table))
    dim = u_table.shape[1]
    du = np.zeros((len(rows_in) if grad else 0, dim), dtype=u_table.dtype)
    dv = np.zeros((len(rows_out) if grad else 0, dim), dtype=v_table.dtype)
    total, start_c, start_t = 0.0, 0, 0
    n_pairs = len(inv_in)
    one, per_pair = u_table.dtype.type(1), u_table.dtype.type(1 / max(n_pairs, 1))  # the mean's weight
    for c, o, n in zip(centres, contexts, negatives, strict=True):
        b, k = len(c), n.size
        ic = inv_in[start_c : start_c + b]
        io = inv_out[start_t : start_t + b]
        ineg = inv_out[start_t + b : start_t + b + k].reshape(n.shape)
        start_c, start_t = start_c + b, start_t + b + k
        total += _pair_kernel(u_table, v_table, c, o, n, ic, io, ineg, du, dv, grad, one, per_pair)
    loss = total / n_pairs
    if not grad:
        return SparseGradient({}, {}, loss, n_pairs)
    return SparseGradient(
        {"input": torch.from_numpy(rows_in), "output": torch.from_numpy(rows_out)},
        {"input": torch.from_numpy(du), "output": torch.from_numpy(dv)},
        loss,
        n_pairs,
    )


# reassoc/contract: the dot products may be vectorised; no flag that assumes finite values,
# so a non-finite table still yields a non-finite gradient for the screen to refuse
@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, error_model="numpy")
def _pair_kernel(
    u_table: np.ndarray,
    v_table: np.ndarray,
    centres: np.ndarray,
    contexts: np.ndarray,
    negatives: np.ndarray,
    ic: np.ndarray,
    io: np.ndarray,
    ineg: np.ndarray,
    du: np.ndarray,
    dv: np.ndarray,
    grad: bool,
    one: np.floating,
    weight: np.floating,
) -> float:
    """The summed loss of one batch's pairs and, with ``grad``, the gradient of ``weight`` times
    it added into ``du`` (rows ``ic``) and ``dv`` (rows ``io`` for contexts, ``ineg`` for
    negatives); ``weight`` 1 / pairs gives the mean's gradient without another pass over the rows.

    ``negatives`` is (B, K), or (1, K) shared by every pair. Each pair costs
    softplus(-u.v) + sum_k softplus(u.n_k); the derivative of softplus is sigma. Arithmetic
    is in the tables' precision (``one`` is 1 in it: a float64 literal would widen float32
    work, 2.5x slower); the batch's loss is summed in float64, its log terms as one log of a
    pair's product of the factors 1 + e^-|x| (each in (1, 2]; a log per target was 1.18x the
    loop's time, docs/performance.md).
    """
    b, dim, k = len(centres), u_table.shape[1], negatives.shape[1]
    shared = negatives.shape[0] == 1
    total = 0.0
    for i in range(b):
        uc = u_table[centres[i]]
        du_row = du[ic[i]] if grad else uc
        row = 0 if shared else i
        ahead = i + PREFETCH_DISTANCE
        if ahead < b:  # a later pair's rows requested now, so they are in cache when it comes
            later = 0 if shared else ahead
            prefetch_row(u_table, centres[ahead])
            prefetch_row(v_table, contexts[ahead])
            for j in range(k):
                prefetch_row(v_table, negatives[later, j])
            if grad:
                prefetch_row(du, ic[ahead])
                prefetch_row(dv, io[ahead])
                for j in range(k):
                    prefetch_row(dv, ineg[later, j])
        product = 1.0  # of the pair's factors 1 + e^-|x|, logged once below
        for j in range(k + 1):
            vw = v_table[contexts[i] if j == 0 else negatives[row, j - 1]]
            score = uc[0] * vw[0]
            for d in range(1, dim):
                score += uc[d] * vw[d]
            x = -score if j == 0 else score
            # softplus(x) = max(x, 0) + log(1 + e^-|x|) and sigma(x), without overflow on either side
            e = np.exp(-abs(x))
            total += max(x, 0 * one)
            product *= 1.0 + e
            if product > 1e300:  # past 996 factors of 2: logged before it could overflow
                total += np.log(product)
                product = 1.0
            sigma = one / (one + e) if x > 0 else e / (one + e)
            if grad:
                g = (-sigma if j == 0 else sigma) * weight
                dv_row = dv[io[i] if j == 0 else ineg[row, j - 1]]
                for d in range(dim):
                    du_row[d] += g * vw[d]
                    dv_row[d] += g * uc[d]
        total += np.log(product)
    return total


def _tensor_sparse_step(model: SkipGram, batches: list[PairBatch], grad: bool = True) -> SparseGradient:
    """:func:`sparse_step` as batched tensor operations (an accelerator's path): gradients are
    accumulated with ``index_add_``; autograd through the row gathers accumulates with a
    sort per step and took 5x longer."""
    centers = torch.cat([b.centers for b in batches])
    targets = torch.cat([torch.cat([b.contexts, b.negatives.reshape(-1)]) for b in batches])
    rows_in, inv_in = torch.unique(centers, return_inverse=True)
    rows_out, inv_out = torch.unique(targets, return_inverse=True)
    with torch.no_grad():
        # rows are read from the tables by word id (index_select: twice as fast as indexing with a
        # tensor on the CPU); gradients are accumulated by position among the touched rows
        u_table, v_table = model.input.detach(), model.output.detach()
        du_rows = u_table.new_zeros(len(rows_in), u_table.shape[1]) if grad else None
        dv_rows = v_table.new_zeros(len(rows_out), v_table.shape[1]) if grad else None
        total = 0.0
        n_pairs = len(centers)
        start_c = start_t = 0
        for batch in batches:
            b, k = len(batch), int(batch.negatives.numel())
            ic_all = inv_in[start_c : start_c + b]
            io_all = inv_out[start_t : start_t + b]
            ineg_all = inv_out[start_t + b : start_t + b + k].reshape(batch.negatives.shape)
            start_c, start_t = start_c + b, start_t + b + k
            shared = ineg_all.dim() == 1
            n_shared = v_table.index_select(0, batch.negatives) if shared else None
            dn_shared = torch.zeros_like(n_shared) if shared and grad else None
            # blocks of CHUNK pairs: their temporaries stay in the CPU's cache (3.4x faster than whole batches)
            for lo in range(0, b, CHUNK):
                ic, io = ic_all[lo : lo + CHUNK], io_all[lo : lo + CHUNK]
                u = u_table.index_select(0, batch.centers[lo : lo + CHUNK])
                if shared:  # negatives shared by the batch: matrix products
                    v = v_table.index_select(0, batch.contexts[lo : lo + CHUNK])
                    grads = (du_rows, dv_rows, dn_shared) if grad else None
                    total += _shared_negatives_chunk(u, v, n_shared, ic, io, grads)
                else:  # negatives per pair: the context and its negatives as one (B, 1 + K) block
                    targets = torch.cat([io.unsqueeze(-1), ineg_all[lo : lo + CHUNK]], dim=1)
                    words = torch.cat([batch.contexts[lo : lo + CHUNK, None], batch.negatives[lo : lo + CHUNK]], dim=1)
                    pair_grads = (du_rows, dv_rows) if grad else None
                    total += _per_pair_negatives_chunk(u, v_table, words, targets, ic, pair_grads)
            if shared and grad:
                dv_rows.index_add_(0, ineg_all, dn_shared)
    loss = total / n_pairs
    if not grad:
        return SparseGradient({}, {}, loss, n_pairs)
    du_rows.div_(n_pairs)
    dv_rows.div_(n_pairs)
    return SparseGradient({"input": rows_in, "output": rows_out}, {"input": du_rows, "output": dv_rows}, loss, n_pairs)


# Pair generation --------------------------------------------------------------------------
def keep_probabilities(counts: np.ndarray, threshold: float) -> np.ndarray:
    """word2vec's subsampling: a word of frequency f = count / total is kept with probability
    (sqrt(f / t) + 1) * t / f (capped at 1); ``threshold`` t = 0 keeps every word."""
    counts = np.asarray(counts, dtype=np.float64)
    if threshold <= 0 or counts.sum() <= 0:
        return np.ones_like(counts)
    scaled = threshold * counts.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        keep = (np.sqrt(counts / scaled) + 1.0) * scaled / counts
    return np.where(counts > 0, np.minimum(keep, 1.0), 1.0)


def noise_distribution(counts: np.ndarray, power: float) -> torch.Tensor:
    """The negative-sampling distribution, counts^power normalised (uniform if every count is 0)."""
    weights = np.asarray(counts, dtype=np.float64) ** power
    if not np.isfinite(weights).all() or weights.sum() <= 0:
        weights = np.ones_like(weights)
    return torch.from_numpy(weights / weights.sum())


class NoiseSampler:
    """Draws negatives from a distribution in O(1) per draw (Walker's alias method, built by
    Vose's algorithm), from a seeded torch generator: a draw is one uniform u, whose integer
    part of u V picks a word i and whose fraction keeps i or takes its alias. ``torch.multinomial``
    with replacement took 1.1 ms for a step's 10,240 negatives (a quarter of a CPU step)."""

    def __init__(self, probabilities: torch.Tensor) -> None:
        p = np.asarray(probabilities, dtype=np.float64)
        self.keep, self.alias = _alias_table(p / p.sum())

    def draw(self, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
        uniform = torch.rand(math.prod(shape), generator=generator, dtype=torch.float64)
        return torch.from_numpy(_alias_draw(uniform.numpy(), self.keep, self.alias)).reshape(shape)


@numba.njit(cache=True, nogil=True)
def _alias_draw(uniform: np.ndarray, keep: np.ndarray, alias: np.ndarray) -> np.ndarray:
    """One word per uniform: i = floor(u V), kept if the fraction u V - i is below keep[i]."""
    size = len(keep)
    out = np.empty(len(uniform), dtype=np.int64)
    for n in range(len(uniform)):
        scaled = uniform[n] * size
        word = min(int(scaled), size - 1)
        out[n] = word if scaled - word < keep[word] else alias[word]
    return out


@numba.njit(cache=True)
def _alias_table(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vose's alias table of the distribution ``p``: word i is kept with probability keep[i],
    else replaced by alias[i]. A word of probability 0 is never drawn."""
    n = len(p)
    scaled = p * n
    keep = np.zeros(n)
    alias = np.arange(n)
    small = np.empty(n, dtype=np.int64)
    large = np.empty(n, dtype=np.int64)
    ns = nl = 0
    for i in range(n):
        if scaled[i] < 1.0:
            small[ns] = i
            ns += 1
        else:
            large[nl] = i
            nl += 1
    while ns > 0 and nl > 0:
        ns -= 1
        s = small[ns]
        g = large[nl - 1]
        keep[s] = scaled[s]
        alias[s] = g
        scaled[g] -= 1.0 - scaled[s]
        if scaled[g] < 1.0:
            nl -= 1
            small[ns] = g
            ns += 1
    # what is left holds 1 up to rounding; a word of probability 0 never is, whatever the rounding
    for i in range(nl):
        keep[large[i]] = 1.0
    for i in range(ns):
        keep[small[i]] = 1.0 if p[small[i]] > 0 else 0.0
        if p[small[i]] == 0:
            alias[small[i]] = np.argmax(p)
    return keep, alias


def skipgram_pairs(
    tokens: np.ndarray,
    offsets: np.ndarray,
    window: int,
    keep: np.ndarray | None,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """(centres, contexts) of the documents ``tokens[offsets[i]:offsets[i + 1]]``.

    Tokens are dropped first (``keep``: each word's keep probability), then every kept
    token draws its window b in 1..window and pairs with the kept tokens at distance
    1..b on either side within its document. Vectorised over the whole chunk, one
    distance at a time.
    """
    doc = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    tokens = np.asarray(tokens)
    if keep is not None and len(tokens):
        kept = rng.random(len(tokens)) < keep[tokens]
        tokens, doc = tokens[kept], doc[kept]
    n = len(tokens)
    reach = rng.integers(1, window + 1, size=n) if n else np.zeros(0, dtype=np.int64)
    centres: list[np.ndarray] = []
    contexts: list[np.ndarray] = []
    for d in range(1, min(window, max(n - 1, 0)) + 1):
        left = np.arange(n - d)
        same = doc[left] == doc[left + d]
        forward = left[same & (reach[left] >= d)]  # centre i, context i + d
        backward = left[same & (reach[left + d] >= d)] + d  # centre i + d, context i
        centres += [tokens[forward], tokens[backward]]
        contexts += [tokens[forward + d], tokens[backward - d]]
    if not centres:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(centres).astype(np.int64), np.concatenate(contexts).astype(np.int64)
