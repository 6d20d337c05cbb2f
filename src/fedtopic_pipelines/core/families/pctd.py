"""PC-TD as a federated family: one noisy E-step per party and round, summed statistics (seed 002).

An organisation's data are its documents as common-vocabulary id sequences (the word2vec
family's :class:`~fedtopic_pipelines.core.families.word2vec.Sentences`), cut into semantic
units of ``unit_length`` words. Every round each party runs eq. 4-10 on all its units from
the broadcast p(w|z) with the round's noise (a generator seeded by its stream and the
round, so both engines and a resumed run draw the same), keeps its documents' p(z|d) (a
local parameter, copied to its own folder while the server checkpoints) and sends M_t as
``STATISTICS``. The server sums them (:class:`SummedStatistics`), applies eq. 11 (clip,
smooth by ``beta``, normalise) and eq. 13 over the similarity matrix it built from the
vocabulary's terms, and records the entries clipped and the privacy spent so far (RDP).

What a party sends beside M_t: its document count (the update's weight, which the
federation already knows from the preparation stage) and, only without noise, its
log-likelihood per word (``loss``); with sigma > 0 no loss leaves it, since a noise-free
score of its documents is outside the mechanism the accountant bounds (docs/pctd.md).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
import torch

from fedtopic_pipelines.core.config import PCTDConfig, TrainConfig
from fedtopic_pipelines.core.families.word2vec import Sentences, SequenceData
from fedtopic_pipelines.core.federated.family import LocalStep
from fedtopic_pipelines.core.federated.messages import UpdateKind
from fedtopic_pipelines.core.federated.strategies import SummedStatistics
from fedtopic_pipelines.core.models.pctd import (
    PCTDModel,
    SemanticUnits,
    completion_perplexity,
    e_step,
    server_step,
)
from fedtopic_pipelines.core.privacy.accountant import rdp_epsilon, sigma_for_epsilon

logger = logging.getLogger(__name__)

DEFAULT_SIGMA = 0.25  # the paper's experiments (sec. "Experiments")


def iterations(config: TrainConfig) -> int:
    """T, the rounds the run is configured for (one EM iteration per round)."""
    return int(config.max_steps if config.max_steps is not None else config.max_epochs)


def noise_multiplier(config: TrainConfig) -> float:
    """sigma: ``train.model.sigma``, or the smallest that keeps T iterations within
    ``target_epsilon`` at ``delta`` by the chosen accountant, or the paper's 0.25."""
    model: PCTDConfig = config.model
    if model.sigma is not None:
        return float(model.sigma)
    if model.target_epsilon is None:
        return DEFAULT_SIGMA
    return sigma_for_epsilon(float(model.target_epsilon), iterations(config), float(model.delta), model.accountant)


class PCTDFamily(SequenceData):
    """``train.model.family: pctd`` (the ``STATISTICS`` family)."""

    name = "pctd"
    config_type = PCTDConfig
    update_kind = UpdateKind.STATISTICS
    # Without noise, federated EM equals EM on the pooled documents; tests/core/families/test_pctd.py
    # checks it. The contract's check of concatenated batch streams does not apply (no batches).
    exact_federation = False
    loss_names = ("loss",)

    def create_model(self, vocab_size: int, config: TrainConfig, device: torch.device) -> PCTDModel:
        model: PCTDConfig = config.model
        return PCTDModel(vocab_size, model.n_topics, config.seed, model.unit_length, model.fold_in_iterations)

    def shared_names(self, model: PCTDModel) -> list[str]:
        return ["phi"]

    def init_local(self, model: PCTDModel, data: Sentences, config: TrainConfig, seed: int) -> None:
        """The party's semantic units and its documents' p(z|d)."""
        units = SemanticUnits.from_sequences(data.tokens, data.offsets, data.shape[1], config.model.unit_length)
        model.attach_documents(units)

    def local_update(self, model: PCTDModel, data: Sentences, config: TrainConfig, seed: int) -> LocalStep:
        """Algorithm 1, lines 5-9: the noisy E-step on every unit, p(z|d) kept, M_t sent."""
        assert model.units is not None and model.theta is not None
        sigma = noise_multiplier(config)
        step = e_step(
            model.units,
            model.phi.detach().numpy(),
            model.theta.detach().numpy(),
            sigma,
            np.random.default_rng(seed),
            config.model.noise,
        )
        with torch.no_grad():
            model.theta.copy_(torch.from_numpy(step.doc_topic))
        words = float(model.units.counts.sum())
        losses = {"loss": -step.log_likelihood / words} if sigma == 0 and words > 0 else {}
        return LocalStep({"phi": torch.from_numpy(step.statistics)}, self.rows(data), losses)

    def prepare_server_model(
        self, model: PCTDModel, vocabulary: pd.DataFrame, rows: Mapping[str, int], config: TrainConfig
    ) -> None:
        """Eq. 12's similarity matrix over the terms, at the server only."""
        frequency = vocabulary["frequency"].to_numpy(dtype="float64") if "frequency" in vocabulary else None
        model.set_terms(vocabulary["term"].tolist(), frequency, config)

    def validation_loss(self, model: PCTDModel, data: Sentences, seed: int) -> tuple[float, int]:
        """The log of the held-out documents' completion perplexity (a per-word loss), from the
        broadcast p(w|z). Noise-free: a party that validates releases it outside the mechanism."""
        perplexity, _ = completion_perplexity(
            data.tokens, data.offsets, model.phi.detach().numpy(), model.unit_length, model.fold_in_iterations, seed
        )
        return (math.log(perplexity) if math.isfinite(perplexity) else math.nan), self.rows(data)

    def strategy(self, model: PCTDModel, config: TrainConfig) -> SummedStatistics:
        """Sums, eq. 11 and 13 at the server; the history records the noise's effect and epsilon."""
        settings: PCTDConfig = config.model
        sigma = noise_multiplier(config)
        steps = iterations(config)
        logger.info(
            "PC-TD: noise sigma %.4g; over T = %d iterations (epsilon, delta) = (%.4g, %g) by RDP",
            sigma,
            steps,
            rdp_epsilon(sigma, steps, settings.delta),
            settings.delta,
        )

        def combine(params: dict[str, torch.Tensor], sums: dict[str, torch.Tensor], iteration: int) -> dict:
            step = server_step(sums["phi"].double().numpy(), model.similarity, settings.tau, settings.beta)
            params["phi"].copy_(torch.from_numpy(step.topic_word))
            recorded = {"clipped": float(step.clipped), "empty_topics": float(step.empty_topics), "sigma": sigma}
            if sigma > 0:
                recorded["epsilon_rdp"] = rdp_epsilon(sigma, iteration, settings.delta)
            return recorded

        return SummedStatistics(model, combine, shared=self.shared_names(model), metric_names=self.loss_names)

    def validate_data(self, name: str, data: Any, config: TrainConfig | None = None) -> None:
        """A party needs a document with a word of the common vocabulary (an empty party is an error)."""
        if not isinstance(data, Sentences):
            raise ValueError(
                f"organisation '{name}': the pctd family trains on token sequences (Sentences), "
                f"got {type(data).__name__}"
            )
        if not len(data.tokens):
            raise ValueError(
                f"organisation '{name}' has {data.shape[0]} training document(s) and no word of the common "
                "vocabulary: PC-TD needs at least one semantic unit"
            )
