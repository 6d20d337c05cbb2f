"""NMF by SGD with the SMILE mutual-information regulariser (seed 004, FedNMF+MI, eq. 2-3).

X ~ W H with X the documents' bag-of-words (here one row per document: ``x_j`` is the
paper's column ``A(:, j)``), W (V x k, the topic-word factor) shared by the federation and
H (one k-vector per document) local to the organisation that holds the document.

Non-negativity is kept by **projection**: after every SGD step W and H are clipped at 0.
It is projected gradient descent, the classical way to fit NMF by gradient steps (Lin
2007); it keeps exact zeros (sparse topics), the gradient of the paper's loss is used as
written, and a FedAvg / FedOpt average of non-negative matrices is non-negative except
for the adaptive optimisers' steps, which the server projects the same way. A softplus or
exponential parameterisation would change the loss's geometry (its gradients shrink near
zero, so entries never reach it), and multiplicative updates are not SGD.

The SMILE estimator (Song and Ermon 2020) of eq. 2 lower-bounds I(x; h) on a batch with a
critic T_theta(x, h): the mean of T over the batch's (x_j, h_j) pairs minus the log of the
mean of clip(exp T, e^-tau, e^tau) over its B (B - 1) mismatched pairs (x_j, h_j'). The
critic is a feed-forward network on [x; h] with hidden layers of 32 and 256 units (sec.
IV-C). Its first layer is linear in the concatenation, so its pre-activation for a pair
is ``a_j + b_j'`` with ``a = x U_x``, ``b = h U_h``: every pair of the batch costs B^2
additions of 32 numbers, not B^2 passes over V inputs. (The paper writes the clip as
max(min(v, l), u), which would be constant; the clip of SMILE is min(max(v, l), u).)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

TAU = 5.0  # the paper's clip (sec. III)
HIDDEN = (32, 256)  # the critic's hidden layers (sec. IV-C)


class SmileCritic(nn.Module):
    """T_theta(x, h): ReLU layers of 32 and 256 units on [x; h], then one output."""

    def __init__(self, vocab_size: int, n_topics: int, hidden: tuple[int, int] = HIDDEN) -> None:
        super().__init__()
        self.words = nn.Linear(vocab_size, hidden[0])  # U_x and the first layer's bias
        self.topics = nn.Linear(n_topics, hidden[0], bias=False)  # U_h
        self.hidden = nn.Linear(hidden[0], hidden[1])
        self.out = nn.Linear(hidden[1], 1)

    def _rest(self, pre: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(torch.relu(pre)))).squeeze(-1)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """T for matched pairs: (B,) from x (B, V) and h (B, k)."""
        return self._rest(self.words(x) + self.topics(h))

    def pairs(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """T(x_j, h_j') for every j, j' of the batch: (B, B), the diagonal the matched pairs."""
        a, b = self.words(x), self.topics(h)
        return self._rest(a[:, None, :] + b[None, :, :])


def smile(critic: SmileCritic, x: torch.Tensor, h: torch.Tensor, tau: float = TAU) -> torch.Tensor:
    """Eq. 2 on one batch (B >= 2): the SMILE lower bound of I(x; h), with the gradient of the
    Jensen-Shannon bound, as Song and Ermon's reference ``smile_lower_bound`` computes it.

    The value is eq. 2's: the matched pairs' mean score minus the log of the mean clipped
    exp-score of the mismatched pairs. Its own gradient lets the critic raise every score
    past tau, where the clipped term no longer pushes back, and the scores grow without
    limit (measured: NaN after 1,403 steps on the SMS corpus); the reference implementation
    therefore follows the gradient of the f-GAN Jensen-Shannon bound,
    -softplus(-T_jj) averaged minus softplus(T_jj') averaged, and reports the clipped value."""
    batch = x.shape[0]
    if batch < 2:
        raise ValueError(f"the SMILE estimator needs a batch of at least 2 documents, got {batch}")
    scores = critic.pairs(x, h)
    diagonal = scores.diagonal()
    off = ~torch.eye(batch, dtype=torch.bool, device=scores.device)
    clipped = torch.clamp(scores[off].exp(), math.exp(-tau), math.exp(tau))
    value = diagonal.mean() - torch.log(clipped.mean())
    js = -F.softplus(-diagonal).mean() - F.softplus(scores[off]).mean()
    return js + (value - js).detach()


def reconstruction(x: torch.Tensor, w: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """(1 / B) sum_j ||x_j - W h_j||^2 (eq. 3's least-squares term); W is (V, k), h (B, k)."""
    return ((x - h @ w.T) ** 2).sum(dim=1).mean()


def nmf_init(x_mean: float, shape: tuple[int, ...], generator: torch.Generator, dtype: torch.dtype) -> torch.Tensor:
    """scikit-learn's ``init='random'`` scale: |N(0, 1)| * sqrt(mean(X) / k), so that W H starts at
    X's mean (k is the last dimension of W's shape and of H's)."""
    k = shape[-1]
    scale = math.sqrt(max(x_mean, 1e-12) / k)
    return torch.randn(shape, generator=generator, dtype=dtype).abs_() * scale


@dataclass
class NMFStepResult:
    """What one local step measured: the loss of eq. 3, its two terms, and the estimate of eq. 2."""

    loss: float
    reconstruction: float
    mutual_information: float


def _seeded_linear_init(layer: nn.Linear, generator: torch.Generator) -> None:
    """What ``nn.Linear.reset_parameters`` draws, from ``generator`` instead of the global RNG."""
    with torch.no_grad():
        nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
        if layer.bias is not None:
            bound = 1.0 / math.sqrt(layer.in_features) if layer.in_features > 0 else 0.0
            nn.init.uniform_(layer.bias, -bound, bound, generator=generator)


DEFAULT_MEAN = 0.01  # the initial scale's X mean when nothing says what it is
ADAGRAD_EPS = 1e-10  # torch's Adagrad default


@dataclass(frozen=True)
class Inference:
    """How the model gives documents their topic weights (:func:`infer_topics`): the training's
    batch size, learning rate, MI weight and clip, ``epochs`` passes, from ``seed``."""

    epochs: int = 5
    batch_size: int = 64
    lr: float = 0.05
    mi_weight: float = 0.0
    tau: float = TAU
    seed: int = 0
    optimizer: str = "sgd"


class NMFModel(nn.Module):
    """FedNMF+MI's model: W (V x k) and the critic theta (``critic``; absent when the MI weight
    is 0, so plain NMF sends W alone) are shared; H (``h``, one row per document) exists only
    in an organisation's copy (:meth:`attach_documents`) and never leaves it."""

    def __init__(self, vocab_size: int, n_topics: int, with_critic: bool, x_mean: float, seed: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.seed = seed
        self.w = nn.Parameter(nmf_init(x_mean, (vocab_size, n_topics), generator, torch.float32))
        self.critic = SmileCritic(vocab_size, n_topics) if with_critic else None
        if self.critic is not None:  # nn.Linear's own initialisation, drawn from the seeded generator
            for layer in self.critic.modules():
                if isinstance(layer, nn.Linear):
                    _seeded_linear_init(layer, generator)
        self.register_parameter("h", None)
        self.register_parameter("h_sums", None)
        self.inference = Inference()

    def doc_topic(self, bow: Any) -> torch.Tensor:
        """Topic weights of documents (a scipy matrix or a dense or sparse tensor of counts) by
        :func:`infer_topics` under :attr:`inference` (evaluation's ``TopicModel``)."""
        if isinstance(bow, torch.Tensor):
            bow = bow.to_dense().cpu().numpy() if bow.layout != torch.strided else bow.cpu().numpy()
        i = self.inference
        return infer_topics(self, bow, i.epochs, i.batch_size, i.lr, i.mi_weight, i.seed, i.tau, i.optimizer)

    @property
    def n_topics(self) -> int:
        return int(self.w.shape[1])

    def set_data_scale(self, total_count: float, documents: int) -> None:
        """Redraw W at scikit-learn's ``init='random'`` scale for a count matrix whose mean entry
        is ``total_count / (documents V)`` (the consensus's summed counts over the documents
        the organisations declared: what the server knows), from the same seed."""
        if total_count <= 0 or documents <= 0:
            return
        x_mean = total_count / (documents * self.w.shape[0])
        generator = torch.Generator().manual_seed(self.seed)
        with torch.no_grad():
            self.w.copy_(nmf_init(x_mean, tuple(self.w.shape), generator, self.w.dtype))

    def attach_documents(self, rows: int, x_mean: float, seed: int, sums: bool = False) -> None:
        """An organisation's H for its ``rows`` documents, at the initial scale of its own mean entry;
        with ``sums``, also Adagrad's squared-gradient sums of H (``h_sums``), kept with it."""
        generator = torch.Generator().manual_seed(seed)
        self.h = nn.Parameter(nmf_init(x_mean, (rows, self.n_topics), generator, self.w.dtype).to(self.w.device))
        if sums:
            self.h_sums = nn.Parameter(torch.zeros_like(self.h.detach()), requires_grad=False)

    @torch.no_grad()
    def topic_word(self) -> torch.Tensor:
        """The topics as rows (k x V): W's columns, each normalised to sum 1 (a topic with no
        weight stays 0); their largest entries are the topic's top words."""
        topics = self.w.detach().T
        return topics / topics.sum(dim=1, keepdim=True).clamp_min(1e-30)


def _descend(value: torch.Tensor, grad: torch.Tensor, lr: float, sums: torch.Tensor | None) -> torch.Tensor:
    """One projected step: plain SGD, or (with ``sums``, updated in place) Adagrad's per-entry
    step lr g / sqrt(sum of g^2), then onto the non-negative orthant."""
    if sums is None:
        return (value - lr * grad).clamp_(min=0.0)
    sums.addcmul_(grad, grad)
    return (value - lr * grad / (sums.sqrt() + ADAGRAD_EPS)).clamp_(min=0.0)


def local_step(
    model: NMFModel,
    h: torch.Tensor,
    x: torch.Tensor,
    rows: torch.Tensor,
    lr: float,
    mi_weight: float,
    tau: float = TAU,
    shared: bool = True,
    w_sums: torch.Tensor | None = None,
    h_sums: torch.Tensor | None = None,
) -> NMFStepResult:
    """Algorithm 1's inner loop on one batch (``rows`` of the organisation's documents):
    W and H step down eq. 3 with the critic fixed, then the critic steps up eq. 2 with H
    fixed (sec. III: the estimator and the factorisation are learned separately); W and H
    are projected onto the non-negative orthant. ``h`` is the organisation's H, updated in
    place. With ``shared`` False only H moves (W and the critic fixed: inference). With
    ``w_sums`` / ``h_sums`` (Adagrad's squared-gradient sums, H's one row per document) W and
    H take Adagrad's step instead of plain SGD's (docs/fednmf.md: plain SGD on eq. 3's mean
    moves each document's h by 1/B of its own gradient and learns nothing in the epochs
    that fit here)."""
    h_batch = h[rows].detach().clone().requires_grad_(True)
    with_mi = mi_weight > 0 and model.critic is not None and len(rows) >= 2
    recon = reconstruction(x, model.w, h_batch)
    loss = recon
    info = torch.zeros(())
    if with_mi:
        for p in model.critic.parameters():
            p.requires_grad_(False)
        info = smile(model.critic, x, h_batch, tau)
        loss = recon - mi_weight * info
        for p in model.critic.parameters():
            p.requires_grad_(True)
    if shared:
        w_grad, h_grad = torch.autograd.grad(loss, [model.w, h_batch])
    else:
        (h_grad,) = torch.autograd.grad(loss, [h_batch])
    with torch.no_grad():
        if shared:
            model.w.copy_(_descend(model.w, w_grad, lr, w_sums))
        row_sums = None if h_sums is None else h_sums[rows]
        h[rows] = _descend(h_batch, h_grad, lr, row_sums)
        if h_sums is not None:
            h_sums[rows] = row_sums
    if shared and with_mi:
        estimate = smile(model.critic, x, h[rows].detach(), tau)
        grads = torch.autograd.grad(estimate, list(model.critic.parameters()))
        with torch.no_grad():
            for p, g in zip(model.critic.parameters(), grads, strict=True):
                p.add_(lr * g)  # ascent: the critic maximises the bound
    return NMFStepResult(float(loss.detach()), float(recon.detach()), float(info.detach()))


def dense_rows(matrix: Any, rows: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Rows of a scipy sparse (or dense numpy) document-term matrix as a dense tensor batch."""
    picked = matrix[rows.numpy()]
    values = picked.toarray() if hasattr(picked, "toarray") else np.asarray(picked)
    return torch.from_numpy(np.ascontiguousarray(values)).to(dtype)


def local_epochs(
    model: NMFModel,
    h: torch.Tensor,
    matrix: Any,
    epochs: int,
    batch_size: int,
    lr: float,
    mi_weight: float,
    generator: torch.Generator,
    tau: float = TAU,
    shared: bool = True,
    optimizer: str = "sgd",
    h_sums: torch.Tensor | None = None,
    w_sums: torch.Tensor | None = None,
) -> list[NMFStepResult]:
    """ClientUpdate of Algorithm 1: ``epochs`` passes over the organisation's documents (the rows
    of ``matrix``) in shuffled batches of ``batch_size`` (a last batch of one document is
    merged into the previous one: the SMILE estimate needs two). Centralized NMF by SGD is the
    same loop on the pooled matrix; with ``shared`` False it fits H alone (inference).
    ``optimizer`` ``adagrad``: W's squared-gradient sums start at 0 here (a ClientUpdate's own)
    unless ``w_sums`` is given, H's are ``h_sums`` (the organisation's, kept with H; zeros when
    not given); both are updated in place."""
    n = matrix.shape[0]
    if n < 2:
        raise ValueError(f"NMF by SGD needs at least 2 documents, got {n}")
    adagrad = optimizer == "adagrad"
    w_sums = (torch.zeros_like(model.w.detach()) if w_sums is None else w_sums) if adagrad and shared else None
    h_sums = (torch.zeros_like(h) if h_sums is None else h_sums) if adagrad else None
    results = []
    for _ in range(epochs):
        order = torch.randperm(n, generator=generator)
        starts = list(range(0, n, batch_size))
        if n - starts[-1] == 1 and len(starts) > 1:
            starts.pop()
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else n
            rows = order[start:end]
            x = dense_rows(matrix, rows, h.dtype)
            results.append(local_step(model, h, x, rows, lr, mi_weight, tau, shared, w_sums, h_sums))
    return results


def infer_topics(
    model: NMFModel,
    matrix: Any,
    epochs: int,
    batch_size: int,
    lr: float,
    mi_weight: float,
    seed: int,
    tau: float = TAU,
    optimizer: str = "sgd",
) -> torch.Tensor:
    """Topic weights of documents under the trained model (evaluation, validation): eq. 3 with W
    and the critic fixed. Its least-squares part is a non-negative least-squares problem per
    document, solved by scikit-learn's coordinate descent (``non_negative_factorization`` with
    W fixed); with an MI weight, ``epochs`` passes of the training's projected descent on the
    whole of eq. 3 follow from there. The learned H of the training documents never leaves its
    organisation; this gives any document its weights under the objective it was trained with."""
    from sklearn.decomposition import non_negative_factorization  # deferred: scikit-learn is a heavy import

    n, k = matrix.shape[0], model.n_topics
    if n == 0:
        return torch.zeros((0, k), dtype=model.w.dtype)
    components = np.ascontiguousarray(model.w.detach().cpu().double().numpy().T)
    if not components.any():  # every topic empty: nothing explains any word
        return torch.zeros((n, k), dtype=model.w.dtype)
    weights, _, _ = non_negative_factorization(
        matrix.astype(np.float64),
        H=components,
        n_components=k,
        init="custom",
        update_H=False,
        solver="cd",
        max_iter=400,
        tol=1e-5,
        random_state=seed,
    )
    h = torch.from_numpy(np.ascontiguousarray(weights)).to(model.w.dtype)
    if mi_weight > 0 and model.critic is not None and n >= 2 and epochs > 0:
        generator = torch.Generator().manual_seed(seed)
        local_epochs(model, h, matrix, epochs, batch_size, lr, mi_weight, generator, tau, False, optimizer)
    return h


def mean_reconstruction(model: NMFModel, h: torch.Tensor, matrix: Any, batch_size: int = 4096) -> float:
    """Eq. 3's least-squares term over every document (no MI): the loss the benchmarks compare."""
    total = 0.0
    with torch.no_grad():
        for start in range(0, matrix.shape[0], batch_size):
            rows = torch.arange(start, min(start + batch_size, matrix.shape[0]))
            total += float(reconstruction(dense_rows(matrix, rows), model.w, h[rows])) * len(rows)
    return total / matrix.shape[0]
