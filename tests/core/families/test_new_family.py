"""A family defined in this module alone, registered, and run through the family contract on both
engines: a mixture of unigrams trained by federated EM on summed sufficient statistics.

Nothing outside this file knows it: it declares its capabilities on its config model, implements
the contract and the optional protocols it needs (:class:`LocalRounds`, no batch stream), and
registers itself. The contract tests (``test_family_contract.py``) run on it from here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Literal

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from torch import nn

from fedtopic_pipelines.core.capabilities import DataKind, FamilyCapabilities
from fedtopic_pipelines.core.config import ConfigError, FamilyConfig, TrainConfig
from fedtopic_pipelines.core.families import families, get_family, register, unregister
from fedtopic_pipelines.core.families.prodlda import BagOfWordsData
from fedtopic_pipelines.core.federated.engine import InProcessEngine
from fedtopic_pipelines.core.federated.family import LocalRounds, LocalStep, Streaming
from fedtopic_pipelines.core.federated.messages import UpdateKind
from fedtopic_pipelines.core.federated.strategies import SummedStatistics
from fedtopic_pipelines.core.federation import run_federation
from fedtopic_pipelines.core.site import MemoryEndpoint
from tests.conftest import poisson_matrices
from tests.core.federated.test_family_contract import (  # noqa: F401  (collected here, on this module's case)
    FamilyCase,
    _vocabulary,
    test_a_bad_update_is_rejected_without_touching_the_model,
    test_checkpoint_resume_gives_the_uninterrupted_result,
    test_nothing_but_the_declared_update_kind_leaves_a_client,
    test_the_family_declares_what_it_does,
    test_the_in_process_flower_grid_and_kedro_paths_give_identical_results,
)

NAME = "unigram_mixture"


class MixtureConfig(FamilyConfig):
    """A mixture of unigrams: each document is drawn from one of ``n_topics`` word distributions."""

    capabilities: ClassVar[FamilyCapabilities] = FamilyCapabilities(
        data_kind=DataKind.BAG_OF_WORDS,
        rules=frozenset({"fedsgd"}),
        rule_refusal="'train.aggregation.rule' is {rule!r}: EM's statistics are summed, not averaged",
        privacy=frozenset({"secure_aggregation"}),
        privacy_refusal="'privacy.dp' or 'privacy.robust_rule' for a mixture of unigrams: not offered",
        in_default_chain=False,
        probabilistic=False,
    )

    family: Literal["unigram_mixture"] = "unigram_mixture"
    n_topics: int = 3
    smoothing: float = 0.01


class Mixture(nn.Module):
    """Word distributions ``phi`` (K x V) and mixture weights ``pi`` (K), in float64."""

    def __init__(self, vocab_size: int, config: MixtureConfig, seed: int) -> None:
        super().__init__()
        rng = np.random.default_rng(seed)
        self.phi = nn.Parameter(torch.from_numpy(rng.dirichlet(np.ones(vocab_size), config.n_topics)), False)
        self.pi = nn.Parameter(torch.full((config.n_topics,), 1.0 / config.n_topics, dtype=torch.float64), False)

    def responsibilities(self, counts: sp.spmatrix) -> tuple[np.ndarray, float]:
        """The E-step: each document's posterior over components, and the data's log-likelihood."""
        log_joint = counts @ np.log(self.phi.detach().numpy()).T + np.log(self.pi.detach().numpy())
        top = log_joint.max(axis=1, keepdims=True)
        log_evidence = top + np.log(np.exp(log_joint - top).sum(axis=1, keepdims=True))
        return np.exp(log_joint - log_evidence), float(log_evidence.sum())


class MixtureFamily(BagOfWordsData):
    name = NAME
    config_type = MixtureConfig
    update_kind = UpdateKind.STATISTICS
    exact_federation = False  # no batch streams to concatenate: EM's exactness is tested below
    loss_names = ("loss",)

    def create_model(self, vocab_size: int, config: TrainConfig, device: torch.device) -> Mixture:
        return Mixture(vocab_size, config.model, config.seed)

    def shared_names(self, model: Mixture) -> list[str]:
        return ["phi", "pi"]

    def local_update(self, model: Mixture, data: sp.spmatrix, config: TrainConfig, seed: int) -> LocalStep:
        """The E-step on every document; the expected counts are sums over documents."""
        counts = sp.csr_matrix(data, dtype=np.float64)
        r, log_likelihood = model.responsibilities(counts)
        phi = torch.from_numpy(np.asarray(counts.T @ r).T.copy())
        words = float(counts.sum())
        return LocalStep(
            {"phi": phi, "pi": torch.from_numpy(r.sum(axis=0))}, self.rows(data), {"loss": -log_likelihood / words}
        )

    def validation_loss(self, model: Mixture, data: sp.spmatrix, seed: int) -> tuple[float, int]:
        counts = sp.csr_matrix(data, dtype=np.float64)
        _, log_likelihood = model.responsibilities(counts)
        return -log_likelihood / max(float(counts.sum()), 1.0), self.rows(data)

    def strategy(self, model: Mixture, config: TrainConfig) -> SummedStatistics:
        smoothing = config.model.smoothing

        def combine(params: dict[str, torch.Tensor], sums: dict[str, torch.Tensor], iteration: int) -> dict:
            phi = sums["phi"] + smoothing
            params["phi"].copy_(phi / phi.sum(dim=1, keepdim=True))
            params["pi"].copy_((sums["pi"] + smoothing) / (sums["pi"] + smoothing).sum())
            return {}

        return SummedStatistics(model, combine, shared=self.shared_names(model), metric_names=self.loss_names)

    def validate_data(self, name: str, data: Any, config: TrainConfig | None = None) -> None:
        if not sp.issparse(data) or data.shape[0] < 1:
            raise ValueError(f"organisation '{name}': a mixture of unigrams needs a bag of words with a document")


TRAIN = {"model": {"family": NAME, "n_topics": 3}, "max_steps": 10, "seed": 7, "device": "cpu"}
MIXTURE = FamilyCase(
    train=TRAIN,
    data=lambda: dict(zip(("a", "b", "c"), poisson_matrices((30, 21, 45), 40), strict=True)),
    vocab_size=40,
    preprocess={"min_df": 1, "max_df": 1.0, "min_token_length": 2, "processes": 1},
    consensus={"top_n": 50, "min_count": 0, "merge": "union"},
)


@pytest.fixture
def registered() -> Iterator[MixtureFamily]:
    family = register(MixtureFamily())
    try:
        yield family
    finally:
        unregister(NAME)


@pytest.fixture
def case(registered) -> tuple[str, FamilyCase]:
    """The contract tests imported above run on this family (this module's ``case``)."""
    return NAME, MIXTURE


def test_registered_from_here_alone_it_is_a_family_with_a_config_block(registered) -> None:
    assert NAME in families() and get_family(NAME) is registered
    config = TrainConfig.from_params(TRAIN)
    assert isinstance(config.model, MixtureConfig) and config.rule == "fedsgd"
    assert TrainConfig.from_params(config.to_params()) == config  # its block survives a round trip (Flower's job)
    assert isinstance(registered, LocalRounds) and not isinstance(registered, Streaming)
    with pytest.raises(ConfigError, match="EM's statistics are summed, not averaged"):
        TrainConfig.from_params({**TRAIN, "aggregation": {"rule": "fedavg"}})
    with pytest.raises(ConfigError, match="for a mixture of unigrams: not offered"):
        TrainConfig.from_params({**TRAIN, "privacy": {"robust_rule": "median"}})


def test_unregistered_it_is_unknown_again() -> None:
    assert NAME not in families()
    with pytest.raises(ConfigError, match=f"'train.model.family' is '{NAME}'; expected one of"):
        TrainConfig.from_params(TRAIN)


def test_federated_em_equals_em_on_the_pooled_documents(registered) -> None:
    data = MIXTURE.data()
    config = TrainConfig.from_params(TRAIN)
    vocabulary = _vocabulary(MIXTURE.vocab_size)

    def run(endpoints: list[MemoryEndpoint]) -> Mapping[str, torch.Tensor]:
        names = [e.name for e in endpoints]
        return run_federation(
            InProcessEngine(endpoints), names, config, vocabulary=vocabulary, progress=False
        ).model.state

    federated = run([MemoryEndpoint(org, matrix) for org, matrix in data.items()])
    pooled = run([MemoryEndpoint("pooled", sp.vstack(list(data.values())).tocsr())])
    for name in ("phi", "pi"):
        torch.testing.assert_close(federated[name], pooled[name], rtol=1e-10, atol=1e-12)
    assert not torch.allclose(federated["phi"], Mixture(40, config.model, config.seed).phi)  # it learnt


class _NoRounds(MixtureFamily):
    local_update = None  # neither a batch stream nor its own rounds


class _WeightsUnderFedSGD(MixtureFamily):
    update_kind = UpdateKind.WEIGHTS  # weights, yet its config allows FedSGD


@pytest.mark.parametrize(
    ("family", "message"),
    [(_NoRounds(), "has neither a batch stream nor local rounds"), (_WeightsUnderFedSGD(), "sends weights")],
)
def test_a_family_whose_declaration_and_abilities_disagree_is_refused(family, message) -> None:
    with pytest.raises(ValueError, match=message):
        register(family)
    assert NAME not in families()  # nothing half-registered
    with pytest.raises(ConfigError, match="expected one of"):
        TrainConfig.from_params(TRAIN)
