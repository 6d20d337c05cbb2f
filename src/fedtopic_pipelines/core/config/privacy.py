"""The ``privacy`` block (docs/privacy.md): differential privacy, secure aggregation, robust rules
and the vocabulary's protections."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Self

from pydantic import Field, model_validator

from fedtopic_pipelines.core.config.base import (
    ConfigModel,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    check_one_of,
)

ROBUST_RULES = ("median", "trimmed_mean", "krum")


class DPConfig(ConfigModel):
    """Differential privacy for the gradient and weight families (``privacy.dp``).

    ``level``: ``client`` clips each organisation's whole update (a round's gradient, or its
    weights minus the broadcast ones) to L2 norm ``clip`` and adds Gaussian noise of std
    ``noise_multiplier`` x ``clip`` to their sum (DP-FedAvg, McMahan et al. 2018; Flower's
    DifferentialPrivacy*FixedClipping); the server then divides by the number of updates, so
    every organisation weighs the same. ``sample`` is DP-SGD (Abadi et al. 2016) inside each
    organisation: every document's gradient is clipped to ``clip``, noise of std
    ``noise_multiplier`` x ``clip`` is added to their sum, which is divided by the batch size;
    the guarantee covers one document of an organisation, whoever reads its update. It is built
    for the gradient family (ProdLDA, CombinedTM: one step per round) without BatchNorm, whose
    batch statistics make a document's gradient depend on the other documents of its batch.

    ``noise_at`` (client level; sample level draws it at the organisations, where each document's
    gradient is): ``clients`` each organisation adds its share of the noise,
    N(0, (sigma C)^2 / m) for m organisations, before sending, so no single update leaves in
    the clear (a curious server sees noisy updates; with secure aggregation only their sum,
    which carries the full noise); ``server`` the server adds it after clipping, as Flower's
    server-side wrapper does: the released model is private, the server itself sees every
    clipped update. Epsilon is accounted with the same library as PC-TD (dp_accounting), at
    the run's rounds, sampling rate and sigma; ``target_epsilon`` instead picks sigma.
    """

    block: ClassVar[str] = "privacy.dp"

    level: Literal["off", "client", "sample"] = "off"
    noise_at: Literal["clients", "server"] = "clients"
    clip: PositiveFloat = 1.0
    noise_multiplier: NonNegativeFloat | None = None
    target_epsilon: PositiveFloat | None = None
    delta: Annotated[float, Field(gt=0.0, lt=1.0)] = 1e-5
    accountant: Literal["rdp", "pld"] = "rdp"

    @model_validator(mode="after")
    def _one_noise(self) -> Self:
        if self.level != "off":
            check_one_of("privacy.dp", True, noise_multiplier=self.noise_multiplier, target_epsilon=self.target_epsilon)
        if self.level == "sample" and self.noise_at == "server":
            raise ValueError(
                "'privacy.dp.noise_at' is 'server' with 'privacy.dp.level: sample': the server never sees a single "
                "document's gradient to clip; DP-SGD clips and noises inside each organisation (noise_at: clients)"
            )
        return self

    @property
    def on(self) -> bool:
        return self.level != "off"


class SecAggConfig(ConfigModel):
    """Flower's SecAgg+ (``privacy.secagg``): the defaults are Flower 1.42's ``SecAggPlusWorkflow``'s
    own, except the two without one (shares and threshold: 3 and 2 here, for small federations).
    Updates are clipped to [-clipping_range, clipping_range] and quantised to
    ``quantization_range`` levels before masking; ``max_weight`` bounds an example count."""

    block: ClassVar[str] = "privacy.secagg"

    num_shares: Annotated[int, Field(ge=2)] | Annotated[float, Field(gt=0.0, le=1.0)] = 3
    reconstruction_threshold: Annotated[int, Field(ge=2)] | Annotated[float, Field(gt=0.0, le=1.0)] = 2
    max_weight: PositiveFloat = 1000.0
    clipping_range: PositiveFloat = 8.0
    quantization_range: PositiveInt = 4194304
    modulus_range: PositiveInt = 4294967296
    timeout: PositiveFloat | None = None


class PrivacyConfig(ConfigModel):
    """The one privacy switch (``privacy``; docs/privacy.md): it applies to whichever family is trained.

    ``dp`` differential privacy (above); ``secure_aggregation`` Flower's SecAgg+ (``train.engine:
    flower`` only: the server sees the sum of the updates, never one of them); ``robust_rule``
    a Byzantine-robust rule instead of the weighted mean: coordinate-wise ``median``,
    ``trimmed_mean`` (``trim_fraction`` cut from each end) or ``krum`` (``krum_byzantine`` = f
    assumed attackers; ``krum_keep`` > 0: multi-Krum's average of that many), as Flower 1.42's
    FedMedian / FedTrimmedAvg / Krum compute them; ``outlier_factor`` F: an update whose example
    count or size exceeds F times the round's median (a batch statistic: or lies under 1/F of it)
    is left out of the round, logged by name and counted, whatever the rule (0: off; at least 3
    updates a round).
    ``vocab_k``: a term enters the consensus vocabulary only if at least k organisations
    hold it (``vocab_min_count``: or, with k, a summed count of at least m), and with k > 1 the
    server only ever reads terms that pass (``vocab_keyed``: proposals travel as keyed hashes
    only the organisations can invert); ``vocab_count_noise`` > 0 adds Laplace noise of that
    scale to each proposed count. ``attacks``: run the curious-server attacks on the trained
    models and report them in ``data/08_reporting/privacy.json``.

    Combinations that cannot work are refused here: secure aggregation hides the individual
    updates that median, trimmed mean and Krum need; the noise of DP is calibrated to a mean
    of clipped updates, not to an order statistic.
    """

    block: ClassVar[str] = "privacy"

    dp: DPConfig = Field(default_factory=DPConfig)
    secure_aggregation: bool = False
    secagg: SecAggConfig = Field(default_factory=SecAggConfig)
    robust_rule: Literal["mean", "median", "trimmed_mean", "krum"] = "mean"
    trim_fraction: Annotated[float, Field(ge=0.0, lt=0.5)] = 0.2
    krum_byzantine: NonNegativeInt = 1
    krum_keep: NonNegativeInt = 0
    outlier_factor: NonNegativeFloat = 100.0
    vocab_k: PositiveInt = 1
    vocab_min_count: NonNegativeInt = 0
    vocab_keyed: bool = True
    vocab_count_noise: NonNegativeFloat = 0.0
    attacks: bool = True

    @model_validator(mode="after")
    def _possible(self) -> Self:
        robust = self.robust_rule != "mean"
        if self.secure_aggregation and robust:
            raise ValueError(
                f"'privacy.robust_rule' is {self.robust_rule!r} with 'privacy.secure_aggregation: true': secure "
                "aggregation shows the server only the sum of the updates, and a median, trimmed mean or Krum "
                "needs each update; choose one"
            )
        if self.dp.level == "client" and robust:
            raise ValueError(
                f"'privacy.robust_rule' is {self.robust_rule!r} with 'privacy.dp.level: {self.dp.level}': DP's "
                "noise is calibrated to the mean of clipped updates (sensitivity C / m), not to a median or "
                "Krum's choice; use robust_rule: mean (clipping already bounds what one organisation moves), or "
                "dp.level: sample, whose updates are private before any rule reads them"
            )
        if self.secure_aggregation and self.dp.on and self.dp.noise_at == "server":
            raise ValueError(
                "'privacy.dp.noise_at' is 'server' with secure aggregation: the server cannot clip updates it "
                "never sees; use noise_at: clients"
            )
        return self

    @property
    def robust(self) -> bool:
        return self.robust_rule != "mean"
