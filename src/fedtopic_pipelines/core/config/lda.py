"""LDA's ``train.model`` block: gensim's variational Bayes LDA, federated by its own distributed scheme."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from fedtopic_pipelines.core.capabilities import DataKind, FamilyCapabilities
from fedtopic_pipelines.core.config.base import NonNegativeFloat, PositiveFloat, PositiveInt
from fedtopic_pipelines.core.config.family import FamilyConfig


class LDAConfig(FamilyConfig):
    """Latent Dirichlet allocation as gensim's ``LdaModel`` fits it in batch mode
    (``update_every=0``): every round each organisation runs gensim's variational E-step on
    all its documents from the broadcast topics and sends the expected topic-word counts
    (``sstats``, n_topics x vocabulary) and its document count; the server sums them and runs
    gensim's M-step. Federated, this is FedLDA; on one organisation's or the pooled documents it
    is gensim's LDA (docs/compare.md).

    ``alpha`` and ``eta`` are gensim's symmetric Dirichlet priors on topic proportions and on
    topics (null: gensim's ``"symmetric"``, 1 / n_topics); ``iterations`` and
    ``gamma_threshold`` bound each document's E-step; ``decay``, ``offset`` and ``chunksize``
    set gensim's M-step weight rho = (offset + pass + documents / chunksize)^-decay (chunksize
    enters only there: an organisation's E-step reads all its documents). ``train.max_steps``
    is gensim's ``passes``; ``train.tolerance`` stops earlier on the relative change of the
    topics. No local optimiser: ``train.optimizer`` is not read.
    """

    block: ClassVar[str] = "train.model"
    capabilities: ClassVar[FamilyCapabilities] = FamilyCapabilities(
        data_kind=DataKind.BAG_OF_WORDS,
        rules=frozenset({"fedsgd"}),
        rule_refusal=(
            "'train.aggregation.rule' is {rule!r}, but LDA's organisations send expected counts that the "
            "server adds (one E-step and M-step per round, gensim's distributed scheme): no averaging rule "
            "applies; leave it null"
        ),
        privacy=frozenset(),
        privacy_refusal=(
            "'privacy.dp', 'privacy.robust_rule' or 'privacy.secure_aggregation' set for lda: its organisations "
            "send exact expected counts (noise or a median would make it another algorithm than gensim's LDA), "
            "and counts in the hundreds lie far outside SecAgg+'s clipping range, which is not yet sized for "
            "them; for differential privacy use the pctd or nmf family"
        ),
        local_steps=False,
        every_round=True,
        reads_broadcast=True,  # an organisation's E-step reads the topics, never writes them
        probabilistic=True,  # p(w | d) = theta_d . beta: completion perplexity
    )

    family: Literal["lda"] = "lda"
    n_topics: Annotated[int, Field(ge=2)] = 20
    alpha: PositiveFloat | None = None
    eta: PositiveFloat | None = None
    iterations: PositiveInt = 50
    gamma_threshold: NonNegativeFloat = 0.001
    decay: Annotated[float, Field(gt=0.0, le=1.0)] = 0.5
    offset: Annotated[float, Field(ge=1.0)] = 1.0
    chunksize: PositiveInt = 2000
