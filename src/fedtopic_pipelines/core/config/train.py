"""The ``train`` block and the rules that tie its parts together (family, rule, optimizer,
privacy)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import Field, model_validator

from fedtopic_pipelines.core.capabilities import WEIGHT_RULES
from fedtopic_pipelines.core.config.aggregation import AggregationConfig, OptimizerConfig
from fedtopic_pipelines.core.config.base import (
    ConfigError,
    ConfigModel,
    Fraction,
    Name,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    Seed,
    check_distinct,
    check_one_of,
    from_mapping,
)
from fedtopic_pipelines.core.config.hosting import EmbeddingsConfig, FlowerConfig
from fedtopic_pipelines.core.config.privacy import PrivacyConfig
from fedtopic_pipelines.core.config.prodlda import ProdLDAConfig
from fedtopic_pipelines.core.config.registry import ModelConfig

Scenario = Literal["federated", "centralized", "non_collaborative"]
SCENARIOS: tuple[Scenario, ...] = ("federated", "centralized", "non_collaborative")


class TrainConfig(ConfigModel):
    """The ``train`` block: scenarios, model family, stopping rules, checkpoints, engine.

    A run stops after ``max_steps`` rounds, or ``max_epochs`` epochs of the scenario's data
    (one epoch = the largest organisation's training documents / batch size rounds),
    whichever one is set. With ``validation_fraction`` > 0 each organisation holds out that
    share of its training documents (gFedNTM: 0.25); the model is then validated every
    ``validation_every`` rounds (null: once per epoch), training stops after ``patience``
    validations without improvement, and the best weights are kept. With
    ``checkpoint_every`` > 0 the server's state is written to ``checkpoint_dir`` every that
    many rounds, on either engine, and a restarted run resumes from it.

    ``threads``: torch's compute threads while the in-process scenarios train (None: torch's
    default, every core). On a host that other work shares, OpenMP threads that spin for
    cores they do not get make a step several times slower than the CPU share it lost;
    one thread does not (docs/performance.md, "Thread policy").

    ``batch_size`` counts documents for a topic model and skip-gram pairs for Word2Vec.

    ``mlflow_every`` (log every N-th round's loss to MLflow) and ``engine`` (in process or
    on a running Flower federation, ``flower``) say how the Kedro node hosts the run; the
    training itself does not read them.
    """

    block: ClassVar[str] = "train"

    scenarios: Annotated[tuple[Scenario, ...], Field(min_length=1)] = SCENARIOS
    model: ModelConfig = Field(default_factory=ProdLDAConfig)
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    aggregation: AggregationConfig = Field(default_factory=AggregationConfig)
    batch_size: Annotated[int, Field(ge=2)] = 64
    max_steps: PositiveInt | None = 1000
    max_epochs: PositiveInt | None = None
    tolerance: NonNegativeFloat = 0.0
    validation_fraction: Fraction = 0.0
    patience: PositiveInt = 5
    validation_every: PositiveInt | None = None
    checkpoint_every: NonNegativeInt = 0
    checkpoint_dir: Name | None = None
    seed: Seed = 42
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: PositiveInt | None = None
    mlflow_every: PositiveInt = 10
    engine: Literal["in_process", "flower"] = "in_process"
    flower: FlowerConfig = Field(default_factory=FlowerConfig)
    embeddings: EmbeddingsConfig = Field(default_factory=EmbeddingsConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)  # set from the top-level ``privacy`` block

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        check_one_of("train", True, max_steps=self.max_steps, max_epochs=self.max_epochs)
        check_distinct(self.scenarios, "train.scenarios", "scenario")
        if self.checkpoint_every and not self.checkpoint_dir:
            raise ValueError("'train.checkpoint_every' > 0 needs 'train.checkpoint_dir'")
        rule, capabilities = self.rule, self.model.capabilities
        refusal = capabilities.refuse_rule(rule) or capabilities.refuse_optimizer(self.optimizer.name)
        if refusal:
            raise ValueError(refusal)
        if rule in WEIGHT_RULES and self.model.batch_coupled():
            raise ValueError(
                f"'train.aggregation.rule' is {rule!r} with {self.model.batch_setting()}: BatchNorm's "
                "running statistics have no defined average over local epochs here; use 'layer' or 'none'"
            )
        if rule in WEIGHT_RULES and self.optimizer.name == "sparse_adam":
            raise ValueError("'train.optimizer.name' 'sparse_adam' is for sparse rows, not local epochs")
        self._privacy_fits(rule)
        steps = self.aggregation.local_steps
        if steps is not None and rule not in WEIGHT_RULES:
            raise ValueError(
                f"'train.aggregation.local_steps' is {steps}, but {rule!r} sends one mini-batch's gradient per "
                f"round; local steps need a weights rule ({list(WEIGHT_RULES)})"
            )
        if steps is not None and not capabilities.local_steps:
            raise ValueError(
                f"'train.aggregation.local_steps' is {steps}, but this family's local update runs whole epochs: "
                "set 'train.aggregation.local_epochs' instead"
            )
        if capabilities.every_round and self.aggregation.client_fraction < 1:
            raise ValueError(
                f"'train.aggregation.client_fraction' is {self.aggregation.client_fraction:g}, but "
                f"{self.model.family} sums every organisation's statistics in every round: set it to 1.0"
            )
        if rule == "fedsgd" and self.aggregation.local_epochs != 1:
            raise ValueError(
                f"'train.aggregation.local_epochs' is {self.aggregation.local_epochs}, but FedSGD sends one "
                "mini-batch's gradient per round; local epochs need a weights rule "
                f"({list(WEIGHT_RULES)})"
            )
        if self.engine == "flower" and "federated" in self.scenarios:
            self.flower_training()  # a schedule this configuration cannot take fails here, before any node
        return self

    def _privacy_fits(self, rule: str) -> None:
        """Refuse a ``privacy`` setting this family cannot honour, with the reason (docs/privacy.md)."""
        privacy = self.privacy
        asked = {
            name
            for name, on in (
                ("dp", privacy.dp.on),
                ("robust", privacy.robust),
                ("secure_aggregation", privacy.secure_aggregation),
            )
            if on
        }
        refusal = self.model.capabilities.refuse_privacy(asked)
        if refusal:
            raise ValueError(refusal)
        if privacy.dp.on and self.model.batch_coupled():
            raise ValueError(
                f"'privacy.dp' is on with {self.model.batch_setting()}: each organisation would also send its "
                "batch's BatchNorm means and variances, in the clear and outside what the accountant bounds; use "
                "normalization layer or none (docs/privacy.md)"
            )
        if privacy.robust and self.model.pooled():
            raise ValueError(
                f"'privacy.robust_rule' is {privacy.robust_rule!r} with {self.model.batch_setting()}: under pooled "
                "BatchNorm each organisation's gradient carries parts that only the others' cancel, so a median, "
                "trimmed mean or Krum of them is no gradient; use the mean (the screen still applies) or "
                "normalization batch, layer or none (docs/batchnorm.md)"
            )
        if privacy.secure_aggregation and self.model.pooled():
            raise ValueError(
                f"'privacy.secure_aggregation' is on with {self.model.batch_setting()}: pooled BatchNorm's sums go to "
                "the server in the clear before each step, outside the secure sum; use normalization batch, layer or "
                "none (docs/batchnorm.md)"
            )
        if privacy.dp.on and self.validation_fraction > 0:
            raise ValueError(
                f"'privacy.dp' is on with 'train.validation_fraction: {self.validation_fraction}': every validation "
                "sends each organisation's loss on its held-out documents without noise, outside what the "
                "accountant bounds; set validation_fraction: 0 (a fixed number of rounds), as PC-TD does"
            )
        if privacy.dp.level == "sample" and rule != "fedsgd":
            raise ValueError(
                f"'privacy.dp.level' is 'sample' with 'train.aggregation.rule: {rule}': DP-SGD is built here for one "
                "noisy step per round (FedSGD: ProdLDA, CombinedTM); local epochs would need noise at every local "
                "step and an accountant over all of them. Use dp.level: client for a weights rule (docs/privacy.md)"
            )
        if privacy.secure_aggregation and self.engine != "flower":
            raise ValueError(
                "'privacy.secure_aggregation' is true with 'train.engine: in_process': SecAgg+ is Flower's "
                "protocol between processes; set train.engine: flower (docs/deployment.md)"
            )

    @property
    def rule(self) -> str:
        """The aggregation rule: ``train.aggregation.rule``, or the family's own when null."""
        if self.aggregation.rule is not None:
            return self.aggregation.rule
        return self.model.capabilities.default_rule

    def flower_training(self) -> TrainConfig:
        """The federated scenario's configuration on the Flower engine: this one under
        ``train.flower.schedule: exact``; under ``local_steps``, ``train.flower.local_steps``'s rule,
        server learning rate, local steps, local optimiser and rounds in place of
        ``train.aggregation``'s, ``train.optimizer`` and ``train.max_steps`` (the rest kept, the
        client fraction too). The result says ``exact``: it is what the nodes run, and what the
        in-process engine trains to check them."""
        flower = self.flower
        if flower.schedule == "exact":
            return self
        schedule = flower.local_steps
        aggregation = self.aggregation.replace(rule=schedule.rule, eta=schedule.eta, local_steps=schedule.steps)
        try:
            return self.replace(
                aggregation=aggregation.replace(local_epochs=1),
                optimizer=schedule.optimizer,
                max_steps=schedule.rounds,
                max_epochs=None,
                flower=flower.replace(schedule="exact"),
            )
        except ConfigError as exc:
            raise ConfigError(
                f"'train.flower.schedule' is 'local_steps', which this configuration cannot take: "
                f"{str(exc).removeprefix('parameter block ' + repr('train') + ': ')}. Set "
                "'train.flower.schedule: exact' to train on Flower as in process (docs/deployment.md)"
            ) from None

    @classmethod
    def from_params(cls, raw: Mapping[str, Any] | None) -> TrainConfig:
        """Parse the ``train`` parameter block."""
        return from_mapping(cls, raw, "train")

    def training_key(self) -> dict[str, Any]:
        """What one scenario's run depends on, for checkpoint identity: the block without the
        Flower timeouts, MLflow thinning, checkpoint place and interval, or the list of scenarios
        (each scenario has its own checkpoint). The engine stays in: a checkpoint written in
        process is not handed back as the result of a run asked for on Flower. The embedding
        settings are left out too: the organisations' data fingerprints cover their embeddings."""
        exclude = {"flower", "mlflow_every", "checkpoint_dir", "checkpoint_every", "scenarios", "embeddings"}
        return self.model_dump(mode="json", exclude=exclude)
