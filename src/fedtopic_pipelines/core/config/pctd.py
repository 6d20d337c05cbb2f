"""PC-TD's ``train.model`` block (the statistics family)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Self

from pydantic import Field, model_validator

from fedtopic_pipelines.core.capabilities import DataKind, FamilyCapabilities
from fedtopic_pipelines.core.config.base import (
    GLOVE_VECTORS,
    Name,
    NonNegativeFloat,
    NonNegativeInt,
    OpenFraction,
    PositiveFloat,
    PositiveInt,
    check_one_of,
    check_vectors,
)
from fedtopic_pipelines.core.config.family import FamilyConfig

NO_VECTORS = "none"  # consistency_vectors: no consistency matrix


class PCTDConfig(FamilyConfig):
    """PC-TD (seed 002): federated EM over semantic units with Gaussian noise on the counts.

    Each party cuts its documents (their common-vocabulary tokens in order) into units of
    ``unit_length`` words that share a topic; every round it runs one E-step with noise of
    standard deviation ``sigma`` on the counts (eq. 4, sensitivity 1; ``noise``: how it is
    drawn, docs/pctd.md) and sends its M_t (K x V) as statistics. ``target_epsilon``, when
    set, chooses sigma instead (``sigma`` null): the smallest whose T = the run's rounds
    compositions are (target_epsilon, ``delta``)-DP by ``accountant``; with neither, sigma is
    the paper's 0.25. The server sums, adds
    ``beta`` to every entry (0: the paper's eq. 11 as printed; docs/pctd.md says why the default
    smooths), normalises and applies eq. 13 with ``tau`` over the similarity matrix R of
    ``consistency_vectors`` ("glove-6b-50d", a word2vec text / binary file such as the word2vec
    pipeline's, or "none"; a gensim KeyedVectors file is a pickle, which can run code, and loads
    only with ``trust_pickle: true``): each of the ``consistency_frequent`` most frequent words
    linked to its ``consistency_neighbours`` nearest ones above ``consistency_threshold``.
    ``fold_in_iterations``: noise-free E-steps that give held-out documents their p(z|d).
    """

    block: ClassVar[str] = "train.model"
    capabilities: ClassVar[FamilyCapabilities] = FamilyCapabilities(
        data_kind=DataKind.SEQUENCES,
        rules=frozenset({"fedsgd"}),
        rule_refusal=(
            "'train.aggregation.rule' is {rule!r}, but PC-TD's parties send E-step statistics that the "
            "server sums (seed 002 Algorithm 1): no averaging rule applies; leave it null"
        ),
        privacy=frozenset({"secure_aggregation"}),
        privacy_refusal=(
            "'privacy.dp' or 'privacy.robust_rule' set for pctd: PC-TD's parties add their own Gaussian noise "
            "to the statistics ('train.model.sigma' / 'target_epsilon', accounted per round), and the server "
            "sums them (a median is not a sum); secure aggregation applies"
        ),
        in_default_chain=False,
        pipelines=frozenset({"pctd"}),
        probabilistic=False,  # perplexity is the pctd pipeline's document completion, no word_distribution
    )

    family: Literal["pctd"] = "pctd"
    n_topics: Annotated[int, Field(ge=2)] = 20
    unit_length: PositiveInt = 3
    sigma: NonNegativeFloat | None = None  # null, and no target: the paper's 0.25 (DEFAULT_SIGMA)
    target_epsilon: PositiveFloat | None = None
    delta: OpenFraction = 1e-5
    accountant: Literal["rdp", "pld"] = "rdp"
    noise: Literal["projected", "per_entry"] = "projected"
    beta: NonNegativeFloat = 0.01
    tau: NonNegativeFloat = 0.3
    consistency_vectors: Name = GLOVE_VECTORS
    trust_pickle: bool = False
    consistency_frequent: PositiveInt = 5000
    consistency_neighbours: NonNegativeInt = 20
    consistency_threshold: Annotated[float, Field(ge=-1.0, lt=1.0)] = 0.5
    fold_in_iterations: PositiveInt = 20

    @model_validator(mode="after")
    def _one_noise_setting(self) -> Self:
        check_one_of("train.model", False, sigma=self.sigma, target_epsilon=self.target_epsilon)
        vectors = "train.model.consistency_vectors"
        check_vectors(self.consistency_vectors, self.trust_pickle, vectors, (GLOVE_VECTORS, NO_VECTORS))
        return self
