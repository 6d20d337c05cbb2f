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

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedtopic_pipelines.core.config import Word2VecConfig


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

    The gradient is written out (d/dx softplus(x) = sigma(x)) and accumulated with
    ``index_add_``: autograd through the row gathers accumulates with a sort per step and
    took 5x longer on the CPU. A test checks it against autograd.
    """
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
