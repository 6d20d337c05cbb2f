"""Held-out perplexity of a neural topic model from its negative ELBO."""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import torch


def perplexity(model, bow: sp.csr_matrix, batch_size: int = 512) -> float:
    """exp(sum_d -ELBO_d / sum_d N_d): an upper bound on the true perplexity.

    ``model.negative_elbo`` is evaluated at the posterior mean (deterministic, eval mode).
    Documents with no in-vocabulary token are left out (they have no words to predict).
    """
    bow = bow[np.asarray(bow.sum(axis=1)).ravel() > 0]
    if bow.shape[0] == 0:
        return float("nan")
    device = next(model.parameters()).device
    total, tokens = 0.0, 0.0
    for start in range(0, bow.shape[0], batch_size):
        chunk = torch.from_numpy(bow[start : start + batch_size].toarray().astype(np.float32)).to(device)
        total += float(model.negative_elbo(chunk).sum())
        tokens += float(chunk.sum())
    return math.exp(total / tokens)
