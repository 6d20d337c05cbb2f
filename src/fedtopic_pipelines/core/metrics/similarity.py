"""Ground-truth scores of gFedNTM sec. 4.1.2: DSS (eq. 5) and TSS (eq. 6).

Both rest on the Hellinger similarity of eq. 4, 1 - H^2(p, q) = sqrt(p)^T sqrt(q) (the
Bhattacharyya coefficient), computed for all pairs at once as a matrix product of
square roots.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import gammaln

DSS_BLOCK = 1024


def _check_distributions(name: str, matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array of distributions (rows), got shape {matrix.shape}")
    if not np.isfinite(matrix).all() or (matrix < 0).any():
        raise ValueError(f"{name} has negative or non-finite entries")
    return matrix


def hellinger_similarity(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Eq. 4 for every row pair: ``sqrt(p) @ sqrt(q).T``."""
    return np.sqrt(_check_distributions("p", p)) @ np.sqrt(_check_distributions("q", q)).T


def dss(theta_true: np.ndarray, theta_inferred: np.ndarray) -> float:
    """Document similarity-based score, eq. 5 (lower is better).

    (1 / D) * sum over i != j of |w_ij(true) - w_ij(inferred)|. The two mixtures may have
    different numbers of topics: only document-document similarities are compared, so no
    topic alignment is needed. Computed in row blocks to bound memory (D x 1024 doubles).
    """
    true = np.sqrt(_check_distributions("theta_true", theta_true))
    inferred = np.sqrt(_check_distributions("theta_inferred", theta_inferred))
    if true.shape[0] != inferred.shape[0]:
        raise ValueError(f"DSS needs the same documents on both sides: {true.shape[0]} vs {inferred.shape[0]} rows")
    d = true.shape[0]
    total = 0.0
    for start in range(0, d, DSS_BLOCK):
        stop = min(start + DSS_BLOCK, d)
        diff = np.abs(true[start:stop] @ true.T - inferred[start:stop] @ inferred.T)
        rows = np.arange(stop - start)
        diff[rows, rows + start] = 0.0  # j != i
        total += float(diff.sum())
    return total / d


def tss(beta_true: np.ndarray, beta_inferred: np.ndarray) -> float:
    """Topic similarity score, eq. 6 (K is perfect): for each true topic, the similarity
    of the closest inferred topic, summed. Both must be over the same vocabulary, in the
    same column order (see :func:`align_topics`)."""
    true = _check_distributions("beta_true", beta_true)
    inferred = _check_distributions("beta_inferred", beta_inferred)
    if true.shape[1] != inferred.shape[1]:
        raise ValueError(f"TSS needs the same vocabulary on both sides: {true.shape[1]} vs {inferred.shape[1]} terms")
    return float(hellinger_similarity(true, inferred).max(axis=1).sum())


def align_topics(beta: np.ndarray, model_vocabulary: Sequence[str], reference_vocabulary: Sequence[str]) -> np.ndarray:
    """Re-index a learned topic-word matrix onto the reference (generator) vocabulary.

    Column j of the result is the probability the model gives to ``reference_vocabulary[j]``;
    terms the model never saw get 0. Matching is by term string, never by position.
    """
    beta = np.asarray(beta, dtype=np.float64)
    if beta.shape[1] != len(model_vocabulary):
        raise ValueError(f"beta has {beta.shape[1]} columns but the model vocabulary {len(model_vocabulary)} terms")
    position = {term: j for j, term in enumerate(reference_vocabulary)}
    unknown = [t for t in model_vocabulary if t not in position]
    if unknown:
        raise ValueError(f"{len(unknown)} model term(s) are not in the reference vocabulary, e.g. {unknown[:3]}")
    aligned = np.zeros((beta.shape[0], len(reference_vocabulary)))
    aligned[:, [position[t] for t in model_vocabulary]] = beta
    return aligned


def tss_baseline(beta_true: np.ndarray, eta: float, draws: int, rng: np.random.Generator) -> tuple[float, float]:
    """A-priori TSS baseline (sec. 4.1.2): TSS between the true topics and a model drawn
    independently from the same prior Dir(eta), averaged over ``draws`` draws.

    Returns the mean and the standard deviation over the draws.
    """
    if draws < 1:
        raise ValueError("the TSS baseline needs at least one draw")
    k, v = beta_true.shape
    values = [tss(beta_true, rng.dirichlet(np.full(v, eta), size=k)) for _ in range(draws)]
    return float(np.mean(values)), float(np.std(values))


def expected_pair_similarity(eta: float, vocab_size: int) -> float:
    """E[sqrt(p)^T sqrt(q)] for independent p, q ~ Dir(eta * 1_V), in closed form.

    Each p_v ~ Beta(eta, (V - 1) eta), so E[sqrt(p_v)] = G(eta + 1/2) G(V eta) /
    (G(eta) G(V eta + 1/2)) and, by independence, E[BC] = V * E[sqrt(p_v)]^2. The
    baseline TSS lies between K times this (a max is at least a mean) and K times
    min(1, K_inferred times this) (a max of non-negative numbers is at most their sum).
    """
    log_e_sqrt = gammaln(eta + 0.5) + gammaln(vocab_size * eta) - gammaln(eta) - gammaln(vocab_size * eta + 0.5)
    return float(vocab_size * np.exp(2 * log_e_sqrt))
