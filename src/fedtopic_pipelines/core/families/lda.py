"""LDA as a federated family: gensim's E-step at each organisation, its M-step at the server (FedLDA).

Every round each organisation runs gensim's variational E-step on all its training documents
from the broadcast topics (``core/models/lda.py``) and sends ``STATISTICS``: its expected
topic-word counts and its document count. The server sums them
(:class:`~fedtopic_pipelines.core.federated.strategies.SummedStatistics`) and runs gensim's
M-step. The centralized scenario is gensim's batch ``LdaModel`` on the pooled documents, an
organisation alone gensim's on its own: the baselines a user would otherwise run.

An update is checked beyond its shapes: expected counts are >= 0 and the document count it
states is the one it claims as its weight.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
import scipy.sparse as sp
import torch

from fedtopic_pipelines.core.config import LDAConfig, TrainConfig
from fedtopic_pipelines.core.families.prodlda import BagOfWordsData
from fedtopic_pipelines.core.federated.aggregation import TensorSpec, UpdateRejected
from fedtopic_pipelines.core.federated.family import LocalStep
from fedtopic_pipelines.core.federated.messages import Update, UpdateKind
from fedtopic_pipelines.core.federated.strategies import SummedStatistics
from fedtopic_pipelines.core.metrics.perplexity import completion_perplexity
from fedtopic_pipelines.core.models.lda import LDAModel

COUNTS, DOCUMENTS = "counts", "documents"


class LDAFamily(BagOfWordsData):
    """``train.model.family: lda``."""

    name = "lda"
    config_type = LDAConfig
    update_kind = UpdateKind.STATISTICS
    # Each organisation's E-step starts its documents from its own draws, so a federation equals
    # gensim on the pooled documents to the E-step's tolerance, not bit for bit: its own test
    # measures it. The contract's check of concatenated batch streams does not apply (no batches).
    exact_federation = False
    loss_names = ("loss",)

    def create_model(self, vocab_size: int, config: TrainConfig, device: torch.device) -> LDAModel:
        """gensim's priors and initial topics, drawn from the run's seed (the same everywhere)."""
        return LDAModel(vocab_size, config.model, config.seed)

    def shared_names(self, model: LDAModel) -> list[str]:
        return ["lam"]

    def local_update(self, model: LDAModel, data: sp.spmatrix, config: TrainConfig, seed: int) -> LocalStep:
        """gensim's E-step on every training document of the organisation: its expected counts
        and its document count. No loss is sent: the
        variational bound would cost a second pass, and validation scores the topics instead."""
        counts, documents = model.e_step(data, seed)
        tensors = {
            COUNTS: torch.from_numpy(np.ascontiguousarray(counts)),
            DOCUMENTS: torch.tensor([float(documents)], dtype=torch.float64),
        }
        return LocalStep(tensors, documents, {})

    def prepare_server_model(
        self, model: LDAModel, vocabulary: pd.DataFrame, rows: Mapping[str, int], config: TrainConfig
    ) -> None:
        """The documents the running statistics stand for: every organisation's declared count
        (gensim's ``state.numdocs`` after it reads the corpus's length)."""
        model.numdocs.fill_(float(sum(rows.values())))

    def validation_loss(self, model: LDAModel, data: sp.spmatrix, seed: int) -> tuple[float, int]:
        """The log of the held-out documents' completion perplexity (a per-word loss), from the
        broadcast topics."""
        perplexity = completion_perplexity(model, sp.csr_matrix(data), seed)
        return (math.log(perplexity) if math.isfinite(perplexity) else math.nan), self.rows(data)

    def strategy(self, model: LDAModel, config: TrainConfig) -> SummedStatistics:
        """Sum, gensim's M-step; the history records rho."""
        k, vocab = model.lam.shape
        specs = {COUNTS: TensorSpec((k, vocab), model.lam.dtype), DOCUMENTS: TensorSpec((1,), torch.float64)}

        def combine(params: dict[str, torch.Tensor], sums: dict[str, torch.Tensor], iteration: int) -> dict:
            rho = model.m_step(sums[COUNTS].numpy(), float(sums[DOCUMENTS].item()), iteration)
            return {"rho": rho}

        return SummedStatistics(
            model, combine, shared=self.shared_names(model), metric_names=self.loss_names, check=_e_step, specs=specs
        )

    def validate_data(self, name: str, data: sp.spmatrix, config: TrainConfig | None = None) -> None:
        """An organisation needs a document, and counts LDA can read (finite, >= 0)."""
        self.check_counts(name, data, "LDA reads word counts")


def _e_step(update: Update) -> None:
    """Expected counts are >= 0; the documents stated are the weight claimed (which the engine
    bounds by what the organisation declared)."""
    if float(update.tensors[COUNTS].min()) < 0:
        raise UpdateRejected(update.client_id, "expected topic-word counts have negative entries")
    stated = float(update.tensors[DOCUMENTS].item())
    if stated != float(update.num_examples):
        raise UpdateRejected(
            update.client_id, f"states {stated:g} documents but claims {update.num_examples} as its weight"
        )
