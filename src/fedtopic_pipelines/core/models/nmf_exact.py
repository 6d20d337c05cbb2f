"""FedNMF exact: scikit-learn's coordinate-descent NMF on the pooled documents, by sufficient statistics.

scikit-learn's ``NMF(solver="cd")`` fits X ~ W H (X: documents x words, W: documents x topics,
H: topics x words) by alternating one cyclic coordinate-descent sweep over W and one over H
(``_fit_coordinate_descent``). Per iteration:

* **W's sweep** reads H H^T (k x k, plus the L2 penalty on its diagonal) and X H^T (n x k, minus
  the L1 penalty). Row i of X H^T is row i of X times H^T, and row i of W is updated from that
  row alone, so each organisation sweeps its own documents' rows from the broadcast H: its W and
  X never leave it, and given the same H its rows are scikit-learn's, bit for bit.
* **H's sweep** is the same sweep on the transposed problem: it reads W^T W (k x k) and X^T W
  (V x k). Both are sums over documents, hence over organisations: each sends W_o^T W_o and
  X_o^T W_o, the server adds them (the sum differs from scikit-learn's product by rounding
  only) and sweeps H.
* **Convergence**: a sweep returns the sum of |projected gradient| over its coordinates (the
  "violation"); W's part is a sum over organisations (one scalar each), H's the server's.
  scikit-learn stops when violation / violation of iteration 1 <= tol.
* **Loss**: ||X - W H||^2 = ||X||^2 - 2 <X^T W, H^T> + <W^T W, H H^T> (scikit-learn's own formula
  for sparse X), read by the server from the same sums and each organisation's ||X_o||^2.

**Initialisation** (docs/fednmf.md): scikit-learn's ``init="random"`` draws |N(0, 1)| s with
s = sqrt(mean(X) / k) for H and then W from one stream. Here H is drawn from the run's seed
(at the server, scaled by the mean the consensus's summed counts give) and each organisation
draws its own W rows from its own seed at its own data's scale: no offsets, no order between
organisations, nothing sent. The equality with scikit-learn is then stated, and tested, from
the same initial W and H (``NMF(init="custom")``).

The sweep is scikit-learn's compiled kernel (``sklearn.decomposition._cdnmf_fast``: private, but
unchanged since 0.19) when it imports, else :func:`cd_sweep_numpy`, the same arithmetic
vectorised over rows. Float64 throughout, as scikit-learn on float64 input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

try:  # the compiled sweep scikit-learn runs; the numpy one below is the same arithmetic
    from sklearn.decomposition._cdnmf_fast import _update_cdnmf_fast as _compiled_sweep
except ImportError:  # pragma: no cover - scikit-learn is a dependency of the project
    _compiled_sweep = None

DEFAULT_TOL = 1e-4  # scikit-learn's ``tol``: where ``train.tolerance`` is 0, transform stops here


def cd_sweep_numpy(w: np.ndarray, hht: np.ndarray, xht: np.ndarray, permutation: np.ndarray) -> float:
    """One cyclic coordinate-descent sweep over the columns of ``w`` in place (scikit-learn's
    ``_update_cdnmf_fast``): for each coordinate t of ``permutation`` and every row i, the
    gradient g = (w hht)[i, t] - xht[i, t] and the step w[i, t] <- max(w[i, t] - g / hht[t, t], 0).
    Returns the sum of |projected gradient| before each step (the violation)."""
    violation = 0.0
    for t in permutation:
        grad = w @ hht[t] - xht[:, t]
        column = w[:, t]
        projected = np.where(column == 0, np.minimum(grad, 0.0), grad)
        violation += float(np.abs(projected).sum())
        if hht[t, t] != 0:
            w[:, t] = np.maximum(column - grad / hht[t, t], 0.0)
    return violation


def cd_sweep(w: np.ndarray, hht: np.ndarray, xht: np.ndarray) -> float:
    """One sweep over ``w`` (C-contiguous float64) in place, coordinates in order; the compiled
    kernel when available."""
    permutation = np.arange(w.shape[1], dtype=np.intp)
    if _compiled_sweep is not None:
        return float(_compiled_sweep(w, hht, xht, permutation))
    return cd_sweep_numpy(w, hht, xht, permutation)


@dataclass(frozen=True)
class Penalties:
    """scikit-learn's scaled penalties (``NMF._compute_regularization``): alpha_W scaled by the
    number of words V, alpha_H (None: alpha_W, scikit-learn's ``"same"``) by the pooled number of
    documents n, split by ``l1_ratio``."""

    l1_w: float = 0.0
    l1_h: float = 0.0
    l2_w: float = 0.0
    l2_h: float = 0.0

    @classmethod
    def scaled(
        cls, n_samples: int, n_features: int, alpha_w: float, alpha_h: float | None, l1_ratio: float
    ) -> Penalties:
        alpha_h = alpha_w if alpha_h is None else alpha_h
        return cls(
            l1_w=n_features * alpha_w * l1_ratio,
            l1_h=n_samples * alpha_h * l1_ratio,
            l2_w=n_features * alpha_w * (1.0 - l1_ratio),
            l2_h=n_samples * alpha_h * (1.0 - l1_ratio),
        )


def random_factor(seed: int, shape: tuple[int, int], scale: float = 1.0) -> np.ndarray:
    """|N(0, 1)| x ``scale`` from ``RandomState(seed)``, as scikit-learn's random initialisation draws."""
    values = scale * np.random.RandomState(seed % 2**32).standard_normal(size=shape)
    return np.abs(values, out=values)


def random_scale(total: float, n_samples: int, n_features: int, n_components: int) -> float:
    """scikit-learn's s = sqrt(mean(X) / k) for a matrix of ``n_samples`` x ``n_features`` summing to ``total``."""
    if total <= 0 or n_samples <= 0:
        return 1.0
    return math.sqrt(total / (n_samples * n_features) / n_components)


def as_counts(matrix: Any) -> sp.csr_matrix:
    """Documents as a float64 CSR matrix (scikit-learn's input to the float64 solver)."""
    return sp.csr_matrix(matrix, dtype=np.float64)


def squared_error(
    squared_norm: float, cross: np.ndarray, factor: np.ndarray, gram: np.ndarray, hht: np.ndarray
) -> float:
    """||X - W H||^2 = ||X||^2 - 2 <cross, factor> + <W^T W, H H^T>, scikit-learn's formula for
    sparse X: ``cross`` is X H^T with ``factor`` W, or X^T W with ``factor`` H^T (the same inner
    product), ``gram`` W^T W."""
    return squared_norm - 2.0 * float(np.vdot(cross, factor)) + float(np.vdot(gram, hht))


def _gram(ht: np.ndarray, l2: float) -> np.ndarray:
    gram = ht.T @ ht
    if l2:
        gram.flat[:: gram.shape[0] + 1] += l2
    return gram


def solve_weights(x: sp.csr_matrix, ht: np.ndarray, penalties: Penalties, max_iter: int, tol: float) -> np.ndarray:
    """scikit-learn's ``transform``: documents' topic weights W from zeros, H fixed, sweeps until the
    violation falls to ``tol`` of the first one or ``max_iter`` sweeps."""
    w = np.zeros((x.shape[0], ht.shape[1]))
    hht = _gram(ht, penalties.l2_w)
    xht = np.asarray(x @ ht)
    if penalties.l1_w:
        xht -= penalties.l1_w
    first = None
    for _ in range(max_iter):
        violation = cd_sweep(w, hht, xht)
        first = violation if first is None else first
        if first == 0 or violation / first <= tol:
            break
    return w


@dataclass(frozen=True)
class LocalStatistics:
    """What one organisation's round yields: its share of H's sweep (W_o^T W_o, X_o^T W_o), its W
    sweep's violation, ||X_o||^2, and its reconstruction error at the broadcast H (its loss)."""

    gram: np.ndarray
    cross: np.ndarray
    violation: float
    squared_norm: float
    reconstruction: float


class Documents:
    """An organisation's documents as the sweeps read them, converted once: X_o (CSR float64), X_o^T
    (CSR, so that X_o^T W_o is a row-ordered product) and ||X_o||^2."""

    def __init__(self, matrix: Any) -> None:
        self.x = as_counts(matrix)
        self.xt = self.x.T.tocsr()
        self.squared_norm = float(np.square(self.x.data).sum())

    @property
    def shape(self) -> tuple[int, int]:
        return self.x.shape


class ExactNMFModel(nn.Module):
    """FedNMF exact's model: H^T (``ht``, V x k, scikit-learn's ``components_`` transposed) and H H^T
    (``hht``, k x k, which W's sweep reads) are shared;
    W (``doc_weights``, one row per document) exists only in an organisation's copy
    (:meth:`attach_documents`) and never leaves it. ``violation_init`` is the first round's
    violation (the server's convergence reference, kept in its checkpoints)."""

    def __init__(
        self, vocab_size: int, n_topics: int, seed: int, penalties: Penalties, transform_max_iter: int, tol: float
    ) -> None:
        super().__init__()
        self.penalties = penalties
        self.transform_max_iter = transform_max_iter
        self.tol = tol if tol > 0 else DEFAULT_TOL
        h = random_factor(seed, (n_topics, vocab_size))  # drawn as scikit-learn draws H, then transposed
        self.ht = nn.Parameter(torch.from_numpy(np.ascontiguousarray(h.T)), requires_grad=False)
        # H H^T, broadcast with H: the server computes it once a round (it needs it for the loss)
        # instead of every organisation computing the same k x k product from V x k
        self.hht = nn.Parameter(torch.from_numpy(_gram(self.ht.detach().numpy(), 0.0)), requires_grad=False)
        self.register_parameter("doc_weights", None)
        self.register_buffer("violation_init", torch.zeros((), dtype=torch.float64))
        self.documents: Documents | None = None

    @property
    def n_topics(self) -> int:
        return int(self.ht.shape[1])

    def set_scale(self, scale: float) -> None:
        """Scale the unit draw of H to scikit-learn's s (the server, once, before the first round)."""
        with torch.no_grad():
            self.ht.mul_(scale)
            self.hht.copy_(torch.from_numpy(_gram(self.ht.detach().numpy(), 0.0)))

    def attach_documents(self, matrix: Any, seed: int) -> None:
        """An organisation's W for its documents, |N(0, 1)| at its own data's scale from its own seed."""
        self.documents = Documents(matrix)
        n, v = self.documents.shape
        scale = random_scale(float(self.documents.x.sum()), n, v, self.n_topics)
        w = random_factor(seed, (n, self.n_topics), scale)
        self.doc_weights = nn.Parameter(torch.from_numpy(w), requires_grad=False)

    def local_round(self) -> LocalStatistics:
        """One sweep over this organisation's W from the broadcast H, then its share of H's sweep."""
        if self.documents is None or self.doc_weights is None:
            raise RuntimeError("the organisation's documents are not attached")
        docs = self.documents
        ht = self.ht.detach().numpy()
        w = self.doc_weights.detach().numpy()  # shares memory with the parameter: swept in place
        hht = self.hht.detach().numpy().copy()  # the broadcast H H^T (the penalty goes on a copy)
        xht = np.asarray(docs.x @ ht)
        # its reconstruction error at the broadcast H, before the sweep moves W (its loss)
        loss = squared_error(docs.squared_norm, xht, w, w.T @ w, hht)
        penalties = self.penalties
        if penalties.l2_w:
            hht.flat[:: hht.shape[0] + 1] += penalties.l2_w
        if penalties.l1_w:
            xht -= penalties.l1_w
        violation = cd_sweep(w, hht, xht)
        return LocalStatistics(w.T @ w, np.asarray(docs.xt @ w), violation, docs.squared_norm, loss)

    @torch.no_grad()
    def server_sweep(self, gram: np.ndarray, cross: np.ndarray, squared_norm: float) -> tuple[float, float]:
        """H's sweep from the summed W^T W and X^T W, in place (and H H^T for the next broadcast);
        its violation and the pooled ||X - W H||^2 after it (``reconstruction_err_`` squared)."""
        ht = self.ht.detach().numpy()
        hess = gram.copy()
        if self.penalties.l2_h:
            hess.flat[:: hess.shape[0] + 1] += self.penalties.l2_h
        grad_side = cross - self.penalties.l1_h if self.penalties.l1_h else cross
        violation = cd_sweep(ht, hess, np.ascontiguousarray(grad_side))
        hht = _gram(ht, 0.0)
        self.hht.copy_(torch.from_numpy(hht))
        loss = squared_error(squared_norm, cross, ht, gram, hht)
        return violation, loss

    @torch.no_grad()
    def topic_word(self) -> torch.Tensor:
        """The topics as rows (k x V), each normalised to sum 1 (an empty topic stays 0)."""
        topics = self.ht.detach().T.float()
        return topics / topics.sum(dim=1, keepdim=True).clamp_min(1e-30)

    def doc_topic(self, bow: Any) -> torch.Tensor:
        """Documents' topic weights as scikit-learn's ``transform`` gives them (evaluation's ``TopicModel``)."""
        if isinstance(bow, torch.Tensor):
            bow = bow.to_dense().cpu().numpy() if bow.layout != torch.strided else bow.cpu().numpy()
        w = solve_weights(as_counts(bow), self.ht.detach().numpy(), self.penalties, self.transform_max_iter, self.tol)
        return torch.from_numpy(w).float()

    def reconstruction(self, bow: Any) -> tuple[float, int]:
        """The summed ||x - w H||^2 of documents ``bow`` at their transformed weights, and their count."""
        x = as_counts(bow)
        ht = self.ht.detach().numpy()
        w = solve_weights(x, ht, self.penalties, self.transform_max_iter, self.tol)
        loss = squared_error(float(np.square(x.data).sum()), np.asarray(x @ ht), w, w.T @ w, self.hht.detach().numpy())
        return max(loss, 0.0), x.shape[0]
