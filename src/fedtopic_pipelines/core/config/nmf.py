"""The NMF families' ``train.model`` blocks: FedNMF+MI (weights) and FedNMF exact (summed statistics)."""

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


class NMFExactConfig(FamilyConfig):
    """FedNMF exact: scikit-learn's coordinate-descent NMF (``NMF(solver="cd")``, Frobenius loss)
    on the pooled documents, computed from sums over the organisations (docs/fednmf.md).

    X ~ W H with H (``n_topics`` x vocabulary, the topics) shared and W (a topic vector per
    document) kept by the organisation that holds the document. Every round each organisation
    runs one cyclic coordinate-descent sweep over its own documents' W from the broadcast H and
    sends W_o^T W_o, X_o^T W_o, its sweep's violation and ||X_o||^2; the server sums them and
    sweeps H: one iteration of scikit-learn's solver. ``alpha_w``, ``alpha_h`` and ``l1_ratio``
    are scikit-learn's ``alpha_W``, ``alpha_H`` (null: ``"same"``) and ``l1_ratio``;
    ``train.tolerance`` is its ``tol`` (the violation relative to the first round's) and
    ``train.max_steps`` its ``max_iter``. ``transform_max_iter``: sweeps that give a held-out
    document its topic weights (scikit-learn's ``transform``, from zeros, to the same tolerance).
    No local optimiser: ``train.optimizer`` is not read.
    """

    block: ClassVar[str] = "train.model"
    capabilities: ClassVar[FamilyCapabilities] = FamilyCapabilities(
        data_kind=DataKind.BAG_OF_WORDS,
        rules=frozenset({"fedsgd"}),
        rule_refusal=(
            "'train.aggregation.rule' is {rule!r}, but FedNMF exact's organisations send sums that the server "
            "adds (one coordinate-descent iteration per round): no averaging rule applies; leave it null"
        ),
        privacy=frozenset({"secure_aggregation"}),
        privacy_refusal=(
            "'privacy.dp' or 'privacy.robust_rule' set for nmf_exact: its organisations send exact sums "
            "(noise or a median would make it another algorithm than scikit-learn's coordinate descent); "
            "secure aggregation applies; for differential privacy use the nmf family"
        ),
        local_steps=False,
        every_round=True,
        reads_broadcast=True,  # an organisation's sweep reads H and H H^T, never writes them
        pipelines=frozenset({"fednmf"}),
        probabilistic=False,
    )

    family: Literal["nmf_exact"] = "nmf_exact"
    n_topics: Annotated[int, Field(ge=2)] = 50
    alpha_w: NonNegativeFloat = 0.0
    alpha_h: NonNegativeFloat | None = None
    l1_ratio: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    transform_max_iter: PositiveInt = 200
