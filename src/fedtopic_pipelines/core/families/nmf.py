"""FedNMF+MI as a federated family: the weights rules on W and the critic (seed 004).

Each sampled organisation runs Algorithm 1's ClientUpdate (``local_epochs`` of projected
SGD on eq. 3 over its own documents, the critic ascending eq. 2) from the broadcast W and
critic, and sends them back weighted by its document count; its H stays with it between
rounds (a local parameter, kept in the client's state and, while the server checkpoints, in
the organisation's own folder). The server averages (FedAvg) or steps FedAdagrad / FedYogi
/ FedAdam on the pseudo-gradient, then projects W onto W >= 0 (an adaptive step can leave
the orthant); an update with a negative or non-finite weight is rejected.

FedAvg of local epochs is not centralized training on concatenated batches (the local
steps are non-linear in W), so the family does not claim ``exact_federation``; one full-batch
local step per organisation and round does equal one centralized step, which
``tests/core/families/test_nmf.py`` checks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd
import scipy.sparse as sp
import torch

from fedtopic_pipelines.core.config import NMFConfig, TrainConfig
from fedtopic_pipelines.core.families.prodlda import BagOfWordsData
from fedtopic_pipelines.core.federated.aggregation import UpdateRejected
from fedtopic_pipelines.core.federated.family import LocalStep
from fedtopic_pipelines.core.federated.messages import Update, UpdateKind
from fedtopic_pipelines.core.federated.strategies import FedOpt
from fedtopic_pipelines.core.models.nmf import (
    DEFAULT_MEAN,
    Inference,
    NMFModel,
    local_epochs,
    mean_reconstruction,
)

LOCAL = ("h", "h_sums")  # the documents' topic weights (and their Adagrad sums): never shared


def _mean_entry(data: sp.spmatrix) -> float:
    return float(data.sum()) / max(1, data.shape[0] * data.shape[1])


class NMFFamily(BagOfWordsData):
    """``train.model.family: nmf``."""

    name = "nmf"
    config_type = NMFConfig
    update_kind = UpdateKind.WEIGHTS
    exact_federation = False
    loss_names = ("loss", "reconstruction", "mutual_information")

    def create_model(self, vocab_size: int, config: TrainConfig, device: torch.device) -> NMFModel:
        model_config: NMFConfig = config.model
        model = NMFModel(vocab_size, model_config.n_topics, model_config.mi_weight > 0, DEFAULT_MEAN, config.seed)
        model.inference = Inference(
            model_config.inference_epochs,
            config.batch_size,
            config.optimizer.lr,
            model_config.mi_weight,
            model_config.tau,
            config.seed,
            config.optimizer.name,
        )
        return model.to(device)

    def shared_names(self, model: NMFModel) -> list[str]:
        return [name for name, _ in model.named_parameters() if name not in LOCAL]

    def init_local(self, model: NMFModel, data: sp.spmatrix, config: TrainConfig, seed: int) -> None:
        """The organisation's H, one row per training document, at its own data's scale."""
        model.attach_documents(self.rows(data), _mean_entry(data), seed, sums=config.optimizer.name == "adagrad")

    def local_update(self, model: NMFModel, data: sp.spmatrix, config: TrainConfig, seed: int) -> LocalStep:
        """ClientUpdate (Algorithm 1): ``local_epochs`` epochs of batches of ``batch_size`` at
        ``train.optimizer.lr``; returns W and the critic, the documents as weight, mean losses."""
        model_config: NMFConfig = config.model
        results = local_epochs(
            model,
            model.h,
            data,
            config.aggregation.local_epochs,
            config.batch_size,
            config.optimizer.lr,
            model_config.mi_weight,
            torch.Generator().manual_seed(seed),
            model_config.tau,
            optimizer=config.optimizer.name,
            h_sums=model.h_sums,
        )
        n = len(results)
        losses = {
            "loss": sum(r.loss for r in results) / n,
            "reconstruction": sum(r.reconstruction for r in results) / n,
            "mutual_information": sum(r.mutual_information for r in results) / n,
        }
        params = dict(model.named_parameters())
        shared = {name: params[name].detach().clone() for name in self.shared_names(model)}
        return LocalStep(shared, self.rows(data), losses)

    def prepare_server_model(
        self, model: NMFModel, vocabulary: pd.DataFrame, rows: Mapping[str, int], config: TrainConfig
    ) -> None:
        """W's initial scale from what the server knows: the consensus's summed counts over the
        documents the organisations declared."""
        if "frequency" in vocabulary:
            model.set_data_scale(float(vocabulary["frequency"].sum()), sum(rows.values()))

    def validation_loss(self, model: NMFModel, data: sp.spmatrix, seed: int) -> tuple[float, int]:
        """Eq. 3's least-squares term on held-out documents, their H fitted to the broadcast W
        (and critic) by the model's inference (``inference_epochs`` of the same descent)."""
        h = model.doc_topic(data)
        return mean_reconstruction(model, h, data), self.rows(data)

    def weights_strategy(self, model: NMFModel, config: TrainConfig) -> FedOpt:
        return FedOpt(
            model,
            config.aggregation,
            config.rule,
            shared=self.shared_names(model),
            metric_names=self.loss_names,
            project=_project,
            check=_non_negative,
        )

    def strategy(self, model: NMFModel, config: TrainConfig) -> FedOpt:
        return self.weights_strategy(model, config)

    def validate_data(self, name: str, data: sp.spmatrix, config: TrainConfig | None = None) -> None:
        """An organisation needs two documents (the SMILE estimate scores pairs of a batch)."""
        if data.shape[0] < 2:
            raise ValueError(
                f"organisation '{name}' has {data.shape[0]} training document(s) with words of the common "
                "vocabulary; NMF by SGD needs at least 2"
            )
        if not math.isfinite(float(data.sum())) or (data.nnz and float(data.data.min()) < 0):
            raise ValueError(f"organisation '{name}' has negative or non-finite counts: NMF factorises X >= 0")


def _project(params: dict[str, torch.Tensor]) -> None:
    params["w"].clamp_(min=0.0)  # an adaptive server step may leave the orthant


def _non_negative(update: Update) -> None:
    if bool((update.tensors["w"] < 0).any()):
        raise UpdateRejected(update.client_id, "weights 'w' has negative entries: NMF's W is non-negative")
