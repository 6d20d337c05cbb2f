"""Federated skip-gram's ``train.model`` block (the sparse-row family)."""

from __future__ import annotations

from typing import ClassVar, Literal

from fedtopic_pipelines.core.capabilities import DataKind, FamilyCapabilities
from fedtopic_pipelines.core.config.base import NonNegativeFloat, PositiveInt
from fedtopic_pipelines.core.config.family import FamilyConfig


class Word2VecConfig(FamilyConfig):
    """Skip-gram with negative sampling (Mikolov et al. 2013; seed 003 sec. 3.1.2 and 4.1).

    Defaults are the thesis's sec. 4.1: 200 dimensions, a window of 8, 64 negatives per
    batch (``negative_sharing: batch``, as TensorFlow's sampled losses draw them: one set
    for all the batch's pairs; ``pair`` draws ``negatives`` for every pair, as gensim does).
    The batch size (2048 pairs) and the learning rate (0.1) are ``train.batch_size`` and
    ``train.optimizer.lr``. ``subsample`` is Mikolov's threshold t for dropping frequent
    words (0: keep every token); ``noise_power`` the exponent of the unigram noise
    distribution; both read the consensus vocabulary's summed counts. ``reduction`` says
    what one server step applies: ``sum`` the gradient of the round's summed pair losses
    (per-pair SGD, as word2vec's C code and gensim: a pair moves the vectors by the same
    amount whatever the batch size), ``mean`` that of their mean (the thesis's TensorFlow
    ``reduce_mean``: each pair's step shrinks with the batch; docs/word2vec.md).
    ``validation_pairs`` caps the held-out pairs an organisation scores per validation.
    """

    block: ClassVar[str] = "train.model"
    capabilities: ClassVar[FamilyCapabilities] = FamilyCapabilities(
        data_kind=DataKind.SEQUENCES,
        rules=frozenset({"fedsgd"}),
        rule_refusal=(
            "'train.aggregation.rule' is {rule!r}; word2vec sends sparse gradient rows (FedSGD): weights "
            "of 2 x V x D floats per organisation and round would undo its sparse updates"
        ),
        privacy=frozenset(),
        privacy_refusal=(
            "'privacy' asks for dp, a robust rule or secure aggregation for word2vec: its updates are sparse "
            "rows whose indices are themselves the leak (attack b); clipping and noising only the rows sent "
            "hides nothing, a median of rows most organisations did not send is zero, and SecAgg+ masks a "
            "dense vector (2 x V x D floats per organisation and round). Not offered; see docs/privacy.md"
        ),
        in_default_chain=False,
        pipelines=frozenset({"word2vec"}),
        probabilistic=False,
        reads_broadcast=True,
    )

    family: Literal["word2vec"] = "word2vec"
    dimension: PositiveInt = 200
    window: PositiveInt = 8
    negatives: PositiveInt = 64
    negative_sharing: Literal["batch", "pair"] = "batch"
    subsample: NonNegativeFloat = 1e-3
    noise_power: NonNegativeFloat = 0.75
    reduction: Literal["sum", "mean"] = "mean"
    validation_pairs: PositiveInt = 100_000
