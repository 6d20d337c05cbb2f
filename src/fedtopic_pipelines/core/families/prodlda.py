"""ProdLDA as a federated family: FedSGD on bag-of-words mini-batches (gFedNTM).

A client's update is the gradient of its mini-batch's mean negative ELBO with respect to
every parameter (all are shared), with the batch's BatchNorm statistics beside it; the
server averages both weighted by batch size (eq. 2) and takes one optimizer step (eq. 3).
Federated training equals centralized training on the concatenated mini-batches
(docs/batchnorm.md), which the contract tests check.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import scipy.sparse as sp
import torch
from torch import nn

from fedtopic_pipelines.core.config import ProdLDAConfig, TrainConfig
from fedtopic_pipelines.core.families.base import Declared
from fedtopic_pipelines.core.federated.aggregation import weighted_mean
from fedtopic_pipelines.core.federated.batching import BatchSource, GhostBatchSource, max_batch_rows
from fedtopic_pipelines.core.federated.family import LocalStep
from fedtopic_pipelines.core.federated.messages import UpdateKind
from fedtopic_pipelines.core.federated.pooled import SOLO, backward_group, forward_group, grad_names, sum_names
from fedtopic_pipelines.core.federated.strategies import BatchStatistics, FedSGD, PooledFedSGD
from fedtopic_pipelines.core.models.prodlda import PassComplete, PooledPass, ProdLDA
from fedtopic_pipelines.core.privacy.dpsgd import private_gradient

VALIDATION_CHUNK = 1024


class BagOfWordsData(Declared):
    """How a family whose data is a bag-of-words matrix (one row a document) counts, selects and
    pools it (ProdLDA, NMF)."""

    def rows(self, data: sp.spmatrix) -> int:
        return int(data.shape[0])

    def select(self, data: sp.csr_matrix, rows: Sequence[int]) -> sp.csr_matrix:
        return data[np.asarray(rows)]

    def concatenate(self, parts: Sequence[sp.csr_matrix]) -> sp.csr_matrix:
        return sp.vstack(list(parts)).tocsr()

    @staticmethod
    def check_counts(name: str, data: sp.spmatrix, needs: str) -> None:
        """Refuse an organisation with no document, or with counts that are negative or not
        finite (``needs``: why the family needs counts, for the message)."""
        if data.shape[0] < 1:
            raise ValueError(f"organisation '{name}' has no training document with words of the common vocabulary")
        values = data.data if sp.issparse(data) else np.asarray(data)
        if values.size and (not np.isfinite(values).all() or float(values.min()) < 0):
            raise ValueError(f"organisation '{name}' has negative or non-finite counts: {needs}")


class ProdLDAFamily(BagOfWordsData):
    """The first registered family (``train.model.family: prodlda``)."""

    name = "prodlda"
    config_type = ProdLDAConfig
    update_kind = UpdateKind.GRADIENTS
    exact_federation = True
    loss_names = ("loss", "kl", "reconstruction")  # the only metrics its clients may report

    def create_model(self, vocab_size: int, config: TrainConfig, device: torch.device) -> ProdLDA:
        return ProdLDA.create(vocab_size, config.model, config.seed).to(device)

    def shared_names(self, model: nn.Module) -> list[str]:
        return [name for name, _ in model.named_parameters()]

    def stream(
        self, data: sp.csr_matrix, config: TrainConfig, seed: int, device: torch.device, ghosts: int | None = None
    ) -> BatchSource | GhostBatchSource:
        """An organisation's mini-batches, or (``ghosts``) the pooled corpus cut into ghost batches."""
        if ghosts is None:
            return BatchSource(data, config.batch_size, seed, device)
        return GhostBatchSource(data, config.batch_size, ghosts, seed, device)

    def local_step(self, model: ProdLDA, stream: BatchSource | GhostBatchSource) -> LocalStep:
        """The gradient of this step's batches' mean loss; ghost batches are normalised apart. When
        the normalisation couples no documents (``layer``, ``none``) a document's terms do not depend
        on the batch it is in, so the ghost batches go through the model as one batch (each with its
        own draws, :meth:`ProdLDA.loss_on_union`): the same loss and gradient up to float rounding, in
        one pass instead of one per ghost batch."""
        model.train()
        model.zero_grad(set_to_none=True)
        batches = stream.next_batches()
        if len(batches) > 1 and not model.config.batch_coupled():
            parts = [model.loss_on_union(batches)]
        else:
            parts = [model.loss_on_batch(batch, noise) for batch, noise in batches]
        n = sum(p.n for p in parts)
        loss = sum(p.loss * (p.n / n) for p in parts)
        loss.backward()
        # Fresh tensors every step (zero_grad(set_to_none=True) above), so no copy is needed.
        grads = self._shared_grads(model)
        statistics = weighted_mean([p.statistics for p in parts], [p.n for p in parts])
        return LocalStep(grads, n, _losses(parts), statistics=statistics)

    def pooled_step(
        self,
        model: ProdLDA,
        stream: BatchSource | GhostBatchSource,
        state: Mapping[str, torch.Tensor],
        phase: int,
        total: float,
    ) -> LocalStep:
        """One exchange of a pooled-BatchNorm step (core/federated/pooled.py): this organisation's
        sums of a group (forward), its derivatives with respect to a group's pooled sums
        (backward), or its gradient (``phase`` 2G). Only the last advances the stream."""
        model.train()
        if phase == SOLO:  # the whole step is this party's: one BatchNorm batch, no exchange
            return self._union_step(model, stream)
        groups = model.pooled_groups()
        forward, backward = forward_group(phase, len(groups)), backward_group(phase, len(groups))
        if forward is not None:
            return _keep_position(stream, lambda: _collect_sums(model, stream, groups, forward, state, total))
        done = [layer for group in groups for layer in group]
        sums = {layer: tuple(state[n].to(torch.float64) for n in sum_names(layer)) for layer in done}
        if backward is not None:
            leaves = {layer: tuple(t.clone().requires_grad_() for t in sums[layer]) for layer in groups[backward]}
            later = [layer for group in groups[backward + 1 :] for layer in group]
            objective, parts = _pooled_objective(model, stream, {**sums, **leaves}, total, state, later)
            wrt = [t for layer in groups[backward] for t in leaves[layer]]
            derivatives = torch.autograd.grad(objective, wrt)
            names = [n for layer in groups[backward] for n in grad_names(layer)]
            n = sum(p.n for p in parts)
            return LocalStep({k: d.detach() for k, d in zip(names, derivatives, strict=True)}, n, {})
        model.zero_grad(set_to_none=True)
        objective, parts = _pooled_objective(model, stream, sums, total, state, done, keep=False)
        objective.backward()
        grads = self._shared_grads(model)
        return LocalStep(grads, sum(p.n for p in parts), _losses(parts))

    def _shared_grads(self, model: ProdLDA) -> dict[str, torch.Tensor]:
        """The gradients that leave: only the shared parameters' (a subclass may keep some local)."""
        shared = set(self.shared_names(model))
        return {name: p.grad.detach() for name, p in model.named_parameters() if name in shared}

    def _union_step(self, model: ProdLDA, stream: BatchSource | GhostBatchSource) -> LocalStep:
        model.zero_grad(set_to_none=True)
        part = model.loss_on_union(stream.next_batches())
        part.loss.backward()
        grads = self._shared_grads(model)
        return LocalStep(grads, part.n, _losses([part]), statistics=part.statistics)

    def private_step(
        self, model: ProdLDA, stream: BatchSource | GhostBatchSource, bound: float, std: float, noise: torch.Generator
    ) -> LocalStep:
        """Sample-level DP-SGD's step (``privacy.dp.level: sample``; core/privacy/dpsgd.py): each
        document's gradient clipped to ``bound``, their sum noised with std ``std``, divided by
        the batch's documents. The batch draws what :meth:`local_step` would (replay stays
        exact); no loss terms and no BatchNorm statistics leave (DP refuses BatchNorm)."""
        grads, n, _ = private_gradient(model, stream.next_batches(), self.shared_names(model), bound, std, noise)
        return LocalStep(grads, n, {})

    def replay(self, model: ProdLDA, stream: BatchSource | GhostBatchSource, steps: int) -> None:
        # The draws (batch rows, dropout masks, reparameterisation noise) depend on the
        # batch shapes only: a forward pass without gradients reproduces them.
        model.train()
        with torch.no_grad():
            for _ in range(steps):
                for batch, noise in stream.next_batches():
                    model.loss_on_batch(batch, noise)

    def prepare_server_model(
        self, model: ProdLDA, vocabulary: pd.DataFrame, rows: Mapping[str, int], config: TrainConfig
    ) -> None:
        """``word_bias`` starts at the words' log relative frequency (the consensus's summed counts)."""
        if "frequency" in vocabulary:
            model.set_background(vocabulary["frequency"].to_numpy(dtype="float64"))

    def validation_loss(self, model: ProdLDA, data: sp.csr_matrix, seed: int) -> tuple[float, int]:
        """avitm's validation pass (eval mode, one seeded sample) averaged over the documents."""
        data = data.tocsr().astype(np.float32)
        device = next(model.parameters()).device
        generator = torch.Generator(device=device).manual_seed(seed)
        total, n = 0.0, data.shape[0]
        for start in range(0, n, VALIDATION_CHUNK):
            bow = torch.from_numpy(data[start : start + VALIDATION_CHUNK].toarray()).to(device)
            total += float(model.validation_loss(bow, generator).sum())
        return total / n, n

    def strategy(self, model: ProdLDA, config: TrainConfig) -> FedSGD:
        if model.pooled_groups():  # pooled_batch: the step's exchanges before its gradient
            return PooledFedSGD(model, config.optimizer, shared=self.shared_names(model), metric_names=self.loss_names)
        return FedSGD(
            model,
            config.optimizer,
            BatchStatistics(model),
            shared=self.shared_names(model),
            metric_names=self.loss_names,
        )

    def max_update_examples(self, rows: int, config: TrainConfig, ghosts: int | None = None) -> int:
        return max_batch_rows(rows, (ghosts or 1) * config.batch_size)  # what the stream's sampler can yield

    def steps_per_epoch(self, rows: int, config: TrainConfig, ghosts: int | None = None) -> int:
        return max(1, math.ceil(rows / (config.batch_size * (ghosts or 1))))

    def validate_data(self, name: str, data: sp.spmatrix, config: TrainConfig | None = None) -> None:
        """An organisation's training data must allow a batch of two documents (the batch sampler's
        floor, and BatchNorm's under ``normalization: batch``)."""
        if data.shape[0] < 2:
            why = " (BatchNorm)" if config is not None and config.model.batch_coupled() else ""
            raise ValueError(
                f"organisation '{name}' has {data.shape[0]} training document(s) with a word of the common "
                f"vocabulary of {data.shape[1]} terms; training needs at least 2{why}. The vocabulary floors or "
                "the privacy rule left too few terms for it: lower 'vocab_consensus.min_total_count' or "
                "'vocab_consensus.min_organisations' (the consensus report's per_organisation entry says what they "
                "took from each organisation)"
            )


def _losses(parts: Sequence) -> dict[str, float]:
    """A step's named loss terms: its batches' means weighted by their documents."""
    n = sum(p.n for p in parts)
    return {
        "loss": float(sum(p.loss.detach() * (p.n / n) for p in parts)),
        "kl": float(sum(p.kl * (p.n / n) for p in parts)),
        "reconstruction": float(sum(p.reconstruction * (p.n / n) for p in parts)),
    }


def _keep_position(stream: BatchSource | GhostBatchSource, exchange):
    """Run ``exchange`` on the stream's next batches, then put the stream back where it was: the
    step's later exchanges draw the same documents, dropout masks and noise."""
    position = stream.state_dict()
    try:
        return exchange()
    finally:
        stream.load_state_dict(position)


def _collect_sums(model: ProdLDA, stream, groups: list[list[str]], group: int, state, total: float) -> LocalStep:
    """A forward exchange: this organisation's sums of ``group``'s inputs, given the pooled sums
    of the groups before it (nothing past the group is computed)."""
    before = [layer for g in groups[:group] for layer in g]
    given = {layer: tuple(state[n].to(torch.float64) for n in sum_names(layer)) for layer in before}
    pooled = PooledPass(given, total, collect=tuple(groups[group]))
    n = 0
    with torch.no_grad():
        for batch, noise in stream.next_batches():
            n += model.documents(batch)
            with contextlib.suppress(PassComplete):
                model.loss_on_batch(batch, noise, pooled)
    names = [(name, layer, i) for layer in groups[group] for i, name in enumerate(sum_names(layer))]
    tensors = {name: pooled.local[layer][i] for name, layer, i in names}
    return LocalStep(tensors, n, {})


def _pooled_objective(model: ProdLDA, stream, sums, total: float, state, layers: list[str], keep: bool = True):
    """This organisation's mean loss under the pooled sums, plus N / n times the pooled
    derivatives of ``layers`` dotted with its own sums of them (core/federated/pooled.py). With
    ``keep`` the stream is put back afterwards (a backward exchange)."""

    def run():
        pooled = PooledPass(sums, total)
        parts = [model.loss_on_batch(batch, noise, pooled) for batch, noise in stream.next_batches()]
        n = sum(p.n for p in parts)
        objective = sum(p.loss * (p.n / n) for p in parts)
        scale = total / n
        for layer in layers:
            g1, g2 = (state[name].to(torch.float64) for name in grad_names(layer))
            s1, s2 = pooled.local[layer]
            objective = objective + (scale * ((g1 * s1).sum() + (g2 * s2).sum())).to(objective.dtype)
        return objective, parts

    return _keep_position(stream, run) if keep else run()
