"""FedNMF exact as a federated family: scikit-learn's coordinate descent from summed statistics.

Each round every organisation sweeps its own documents' topic weights W_o once from the
broadcast H (``core/models/nmf_exact.py``) and sends ``STATISTICS``: W_o^T W_o, X_o^T W_o, its
sweep's violation and ||X_o||^2, weighted by its document count. The server sums them
(:class:`~fedtopic_pipelines.core.federated.strategies.SummedStatistics`), sweeps H, and records
the pooled reconstruction error and the violation relative to the first round's, which is
scikit-learn's stopping test (``train.tolerance`` is its ``tol``). With every organisation in
every round this is ``NMF(solver="cd")`` on the pooled documents from the same initial W and H,
to rounding: ``tests/core/families/test_nmf_exact.py`` checks it against scikit-learn.

A statistics update is checked beyond its shapes: W >= 0 makes every entry of both products
non-negative, and a violation or squared norm is too; anything else is not an organisation's
sweep. The outlier screen (``privacy.outlier_factor``) judges them per document, as PC-TD's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd
import scipy.sparse as sp
import torch

from fedtopic_pipelines.core.config import NMFExactConfig, TrainConfig
from fedtopic_pipelines.core.families.prodlda import BagOfWordsData
from fedtopic_pipelines.core.federated.aggregation import TensorSpec, UpdateRejected
from fedtopic_pipelines.core.federated.family import LocalStep
from fedtopic_pipelines.core.federated.messages import Update, UpdateKind
from fedtopic_pipelines.core.federated.strategies import SummedStatistics
from fedtopic_pipelines.core.models.nmf_exact import ExactNMFModel, Penalties, random_scale

GRAM, CROSS, VIOLATION, NORM = "gram", "cross", "violation", "squared_norm"
CONVERGENCE = "relative_violation"  # scikit-learn's violation / violation of the first iteration


class ExactNMFFamily(BagOfWordsData):
    """``train.model.family: nmf_exact``."""

    name = "nmf_exact"
    config_type = NMFExactConfig
    update_kind = UpdateKind.STATISTICS
    # Exact against scikit-learn on the pooled documents, checked in its own test; the contract's
    # check of concatenated batch streams does not apply (no batches).
    exact_federation = False
    loss_names = ("loss",)

    def create_model(self, vocab_size: int, config: TrainConfig, device: torch.device) -> ExactNMFModel:
        """H at unit scale from the run's seed (the server scales it: :meth:`prepare_server_model`).
        W's penalties scale by the vocabulary (known everywhere); H's by the pooled document count,
        which only the server knows: zero until it prepares, and only the server sweeps H."""
        model: NMFExactConfig = config.model
        penalties = Penalties.scaled(0, vocab_size, model.alpha_w, model.alpha_h, model.l1_ratio)
        return ExactNMFModel(
            vocab_size, model.n_topics, config.seed, penalties, model.transform_max_iter, config.tolerance
        )

    def shared_names(self, model: ExactNMFModel) -> list[str]:
        return ["ht", "hht"]

    def init_local(self, model: ExactNMFModel, data: sp.spmatrix, config: TrainConfig, seed: int) -> None:
        """The organisation's documents as the sweeps read them and its W, drawn from its own seed."""
        model.attach_documents(data, seed)

    def local_update(self, model: ExactNMFModel, data: sp.spmatrix, config: TrainConfig, seed: int) -> LocalStep:
        """One sweep over W_o from the broadcast H; its share of H's statistics, its documents as
        the weight, its reconstruction error per document at the broadcast H as its loss."""
        step = model.local_round()
        n = self.rows(data)
        tensors = {
            GRAM: torch.from_numpy(step.gram),
            CROSS: torch.from_numpy(step.cross),
            VIOLATION: torch.tensor([step.violation], dtype=torch.float64),
            NORM: torch.tensor([step.squared_norm], dtype=torch.float64),
        }
        return LocalStep(tensors, n, {"loss": step.reconstruction / max(n, 1)})

    def prepare_server_model(
        self, model: ExactNMFModel, vocabulary: pd.DataFrame, rows: Mapping[str, int], config: TrainConfig
    ) -> None:
        """H at scikit-learn's random scale for the consensus's summed counts over the declared
        documents, and the penalties scaled by the pooled document count."""
        settings: NMFExactConfig = config.model
        documents = sum(rows.values())
        vocab = model.ht.shape[0]
        if "frequency" in vocabulary:
            model.set_scale(random_scale(float(vocabulary["frequency"].sum()), documents, vocab, model.n_topics))
        model.penalties = Penalties.scaled(documents, vocab, settings.alpha_w, settings.alpha_h, settings.l1_ratio)

    def validation_loss(self, model: ExactNMFModel, data: sp.spmatrix, seed: int) -> tuple[float, int]:
        """The held-out documents' mean ||x - w H||^2, their w by scikit-learn's ``transform``."""
        loss, n = model.reconstruction(data)
        return loss / max(n, 1), n

    def strategy(self, model: ExactNMFModel, config: TrainConfig) -> SummedStatistics:
        """Sum, sweep H, record the pooled loss and the relative violation (the stopping test)."""
        k, vocab = model.n_topics, model.ht.shape[0]
        specs = {
            GRAM: TensorSpec((k, k), torch.float64),
            CROSS: TensorSpec((vocab, k), torch.float64),
            VIOLATION: TensorSpec((1,), torch.float64),
            NORM: TensorSpec((1,), torch.float64),
        }

        def combine(params: dict[str, torch.Tensor], sums: dict[str, torch.Tensor], iteration: int) -> dict:
            h_violation, loss = model.server_sweep(sums[GRAM].numpy(), sums[CROSS].numpy(), float(sums[NORM].item()))
            violation = float(sums[VIOLATION].item()) + h_violation
            if iteration == 1:
                model.violation_init.fill_(violation)
            first = float(model.violation_init)
            relative = 0.0 if first == 0 else violation / first
            return {CONVERGENCE: relative, "reconstruction_error": math.sqrt(max(loss, 0.0))}

        return SummedStatistics(
            model,
            combine,
            shared=self.shared_names(model),
            metric_names=self.loss_names,
            check=_sweep_statistics,
            specs=specs,
            convergence_metric=CONVERGENCE,
        )

    def validate_data(self, name: str, data: sp.spmatrix, config: TrainConfig | None = None) -> None:
        """An organisation needs a document, and counts that NMF can factorise (finite, >= 0)."""
        self.check_counts(name, data, "NMF factorises X >= 0")


def _sweep_statistics(update: Update) -> None:
    """W >= 0, so W^T W, X^T W, the violation and ||X||^2 are all >= 0; a negative entry is no sweep's."""
    for name, tensor in update.tensors.items():
        if float(tensor.min()) < 0:  # one reduction, no mask of V x k (shapes are checked before)
            raise UpdateRejected(update.client_id, f"statistic '{name}' has negative entries: W >= 0 and X >= 0")
