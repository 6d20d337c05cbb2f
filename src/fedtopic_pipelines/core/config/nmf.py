"""FedNMF+MI's ``train.model`` block (the weights family)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from fedtopic_pipelines.core.capabilities import WEIGHT_RULES, DataKind, FamilyCapabilities
from fedtopic_pipelines.core.config.base import NonNegativeFloat, PositiveFloat, PositiveInt
from fedtopic_pipelines.core.config.family import FamilyConfig


class NMFConfig(FamilyConfig):
    """FedNMF+MI (seed 004): X ~ W H fitted by projected SGD, W (vocabulary x topics) shared, H
    (a topic vector per document) kept by the organisation that holds the document.

    ``mi_weight`` is eq. 3's lambda: the weight of the SMILE estimate (eq. 2, clip ``tau``)
    of the mutual information between a document's bag of words and its topic weights,
    scored by a critic with hidden layers of 32 and 256 units; 0 is plain NMF and builds no
    critic. The local optimiser is projected SGD (Algorithm 1, lines 5-7; ``train.optimizer``
    ``sgd``) or projected Adagrad (``adagrad``) at ``train.optimizer.lr``, over
    ``train.aggregation.local_epochs`` epochs of ``train.batch_size`` documents.
    ``inference_epochs``: passes of the same descent on eq. 3 (W and the critic fixed, from
    the non-negative least-squares weights) that give evaluated documents their topic
    weights when the model has a critic (docs/fednmf.md).
    """

    block: ClassVar[str] = "train.model"
    capabilities: ClassVar[FamilyCapabilities] = FamilyCapabilities(
        data_kind=DataKind.BAG_OF_WORDS,
        rules=frozenset(WEIGHT_RULES),
        default_rule="fedavg",
        local_steps=False,  # its ClientUpdate is whole epochs over the documents' own topic weights
        rule_refusal=(
            "'train.aggregation.rule' is {rule!r}, but NMF trains local epochs and sends weights (seed 004 "
            "Algorithm 1): choose one of {rules}"
        ),
        optimizers=frozenset({"sgd", "adagrad"}),
        optimizer_refusal=(
            "'train.optimizer.name' is {name!r}; NMF's local optimiser is projected SGD "
            "(seed 004 Algorithm 1, 'sgd') or projected Adagrad ('adagrad'; docs/fednmf.md)"
        ),
        pipelines=frozenset({"fednmf"}),
        probabilistic=False,
    )

    family: Literal["nmf"] = "nmf"
    n_topics: Annotated[int, Field(ge=2)] = 50
    mi_weight: NonNegativeFloat = 0.0
    tau: PositiveFloat = 5.0
    inference_epochs: PositiveInt = 5
