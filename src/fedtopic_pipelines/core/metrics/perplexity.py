"""Held-out perplexity of a topic model by document completion.

Each held-out document's tokens are split at random into an observed half and a held-out
half (binomial thinning of its counts, seeded). The model infers the document's topic
proportions from the observed half and predicts the held-out half:
perplexity = exp(-sum log p(held-out words | theta) / number of held-out tokens).

Why not exp(negative ELBO per token): in eval mode ProdLDA's BatchNorm uses running
statistics, and on documents unlike its training data the posterior log-variance can reach
30, so the KL term (up to 1e13 per document, measured) swamps the bound. Completion
perplexity scores only the predictive distribution, as used for LDA (Wallach et al., 2009).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import torch

from fedtopic_pipelines.core.models.ctm import ContextualBatch
from fedtopic_pipelines.core.models.prodlda import csr_tensor


def split_tokens(bow: sp.csr_matrix, seed: int) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Observed and held-out halves of every document (counts thinned by Binomial(n, 1/2))."""
    bow = bow.tocsr().astype(np.int64)
    rng = np.random.default_rng(seed)
    observed = bow.copy()
    observed.data = rng.binomial(bow.data, 0.5)
    held_out = bow - observed
    observed.eliminate_zeros()
    held_out.eliminate_zeros()
    return observed.astype(np.float32), held_out.astype(np.float32)


def held_out_log_likelihood(target: torch.Tensor, word_dist: torch.Tensor) -> torch.Tensor:
    """sum_w n_w log p_w over the words of a sparse CSR ``target`` only (the held-out half of each
    document), gathered from the predicted distributions ``word_dist``."""
    crow, col = target.crow_indices(), target.col_indices()
    rows = torch.repeat_interleave(torch.arange(target.shape[0], device=target.device), crow.diff())
    return (target.values() * torch.log(word_dist[rows, col] + 1e-10)).sum()


def completion_perplexity(
    model, bow: sp.csr_matrix, seed: int = 0, batch_size: int = 512, embeddings: np.ndarray | None = None
) -> float:
    """Document-completion perplexity on ``bow``; documents with no observed or no
    held-out token are left out. NaN when nothing is left.

    ``embeddings`` (a contextualized topic model's second input, one row per document) are
    of the whole document: the model then sees the held-out half through them, so its
    completion perplexity is not comparable with a bag-of-words model's (docs/ctm.md)."""
    observed, held_out = split_tokens(bow, seed)
    usable = (np.asarray(observed.sum(1)).ravel() > 0) & (np.asarray(held_out.sum(1)).ravel() > 0)
    observed, held_out = observed[usable], held_out[usable]
    if embeddings is not None:
        embeddings = np.asarray(embeddings, dtype=np.float32)[usable]
    if observed.shape[0] == 0:
        return float("nan")
    device = next(model.parameters()).device
    log_likelihood, tokens = 0.0, 0.0
    for start in range(0, observed.shape[0], batch_size):
        # sparse batches: the encoder's first layer and the held-out words' log-probabilities
        # skip the zeros (the same sums, in another order: equal up to float rounding)
        seen = csr_tensor(observed[start : start + batch_size], device)
        target = csr_tensor(held_out[start : start + batch_size], device)
        if embeddings is not None:
            seen = ContextualBatch(seen, torch.from_numpy(embeddings[start : start + batch_size]).to(device))
        word_dist = model.word_distribution(seen)
        log_likelihood += float(held_out_log_likelihood(target, word_dist))
        tokens += float(target.values().sum())
    return math.exp(-log_likelihood / tokens)
