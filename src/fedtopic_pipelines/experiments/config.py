"""Run configurations of the papers' experiments: the ``fednmf``, ``pctd`` and ``synthetic`` blocks.

Built from the library's models (``core/config/``: :class:`ConfigModel`, strict parsing
with :func:`from_mapping`, :class:`TrainConfig`, the generator's config); what each block
means is documented with its pipeline (docs/fednmf.md, docs/pctd.md, docs/synthetic.md).
This module imports pydantic and ``core.config`` only, so validating the parameters
(``fedtopic_pipelines.parameters``) loads no training stack.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import Field, model_validator

from fedtopic_pipelines.core.config import (
    GLOVE_VECTORS,
    WEIGHT_RULES,
    AggregationConfig,
    ConfigError,
    ConfigModel,
    ConsensusConfig,
    Name,
    NMFConfig,
    NonNegativeFloat,
    NonNegativeInt,
    OpenFraction,
    OptimizerConfig,
    PCTDConfig,
    PositiveFloat,
    PositiveInt,
    Scenario,
    Seed,
    SyntheticGeneratorConfig,
    TrainConfig,
    check_distinct,
    check_trained_by,
    check_vectors,
    from_mapping,
)

# FedNMF+MI's experiments (seed 004 Tables III-IV, Figs. 2-4) ------------------------------
FEDERATED_NMF_METHODS = tuple(m for rule in WEIGHT_RULES for m in (rule, f"{rule}_mi"))  # FedAvg, FedAvg+MI, ...
EXACT_NMF_METHOD = "fedexact"  # FedNMF exact: scikit-learn's coordinate descent from summed statistics
# Tables III-IV's rows, and FedNMF exact beside them
FEDNMF_METHODS = ("lda", "nmf", "nmf_sgd", "nmf_sgd_mi", "fedlda", EXACT_NMF_METHOD, *FEDERATED_NMF_METHODS)
# the methods the engine trains over the organisations
ENGINE_FEDERATED_NMF_METHODS = (EXACT_NMF_METHOD, *FEDERATED_NMF_METHODS)
FedNMFMethod = Literal[FEDNMF_METHODS]  # type: ignore[valid-type]  # Literal of the tuple's names
FederatedNMFMethod = Literal[FEDERATED_NMF_METHODS]  # type: ignore[valid-type]
TopicCount = Annotated[int, Field(ge=2)]


class LDAConfig(ConfigModel):
    """gensim ``LdaModel`` baselines, ``fednmf.lda`` (the LDA and FedLDA rows) and ``pctd.lda``
    (pooled and per party): batch passes (one M-step per pass) of at most ``iterations``
    E-step iterations per document. ``chunksize``: documents per E-step chunk of FedNMF's
    rows; PC-TD's baselines always take every document in one chunk and do not read it."""

    block: ClassVar[str] = "lda"

    passes: PositiveInt = 10
    iterations: PositiveInt = 50
    chunksize: PositiveInt = 2000


class FedNMFEvaluateConfig(ConfigModel):
    """How every model of the sweep is scored (seed 004 sec. IV-B).

    ``top_words`` per topic for the word-embedding coherence (eq. 4, over ``word_vectors``:
    GloVe or a word2vec text / binary file; a gensim KeyedVectors file is a pickle, which can
    run code, and loads only with ``trust_pickle: true``) and the pooled NPMI; a linear SVM
    (``svm_c``) on the documents' topic weights with a stratified ``svm_test_size`` split for
    macro-F1 and accuracy, over at most
    ``max_documents`` documents (a seeded sample; null: all). ``curve_topics``: the number of
    topics whose federated runs are also scored ``curve_points`` times during training
    against the bytes communicated (Fig. 3; null: no curve); a curve whose macro-F1 moved by at
    most ``curve_tolerance`` over its last interval is reported as converged at the last round.
    """

    block: ClassVar[str] = "fednmf.evaluate"

    top_words: TopicCount = 10
    word_vectors: Annotated[str, Field(min_length=1)] = GLOVE_VECTORS
    trust_pickle: bool = False
    svm_test_size: OpenFraction = 0.2
    svm_c: PositiveFloat = 1.0
    max_documents: PositiveInt | None = None
    curve_topics: TopicCount | None = 100
    curve_points: PositiveInt = 5
    curve_tolerance: PositiveFloat = 0.01

    @model_validator(mode="after")
    def _safe_vectors(self) -> Self:
        check_vectors(self.word_vectors, self.trust_pickle, "fednmf.evaluate.word_vectors")
        return self


class HeterogeneityConfig(ConfigModel):
    """Fig. 4: ``methods`` at ``topics`` topics on the pooled training documents partitioned again
    into K organisations of ``clients`` with Dirichlet(alpha p) label skew for each of
    ``alphas`` (the other setting at the main run's: alpha 1, K the organisations).
    ``enabled: false`` turns the figure off (so does an empty list): no sweep, no table, no
    figure, and a log line that says so."""

    block: ClassVar[str] = "fednmf.heterogeneity"

    enabled: bool = True
    alphas: tuple[PositiveFloat, ...] = (0.1, 1.0, 10.0)
    clients: tuple[Annotated[int, Field(ge=2)], ...] = (10, 30, 50)
    methods: tuple[FederatedNMFMethod, ...] = ("fedavg", "fedavg_mi", "fedadam", "fedadam_mi")
    topics: TopicCount = 100


def _default_nmf_train() -> TrainConfig:
    return TrainConfig(
        model=NMFConfig(),
        optimizer=OptimizerConfig(name="adagrad", lr=0.1),
        aggregation=AggregationConfig(client_fraction=0.2, local_epochs=5),
        batch_size=64,
        max_steps=30,
    )


class FedNMFRunConfig(ConfigModel):
    """The ``fednmf`` block: seed 004's comparison of ``methods`` at each of ``topics`` on the
    current corpus's organisations (docs/fednmf.md).

    ``train`` is the federated runs' block (family nmf; its ``aggregation`` gives C, E and the
    server's settings, each method its rule); ``mi_weight`` is lambda of the ``*_mi`` methods
    (the others: 0). The centralized NMF by SGD trains ``centralized_rounds`` rounds of
    ``local_epochs`` epochs over the pooled documents (null: round(rounds x C), as many passes
    over the data as a federated run makes). ``sklearn_max_iter`` and ``sklearn_tol``: scikit-learn
    ``NMF``'s coordinate descent (``max_iter``, ``tol``), and FedNMF exact's (``fedexact``: the same
    solver from summed statistics, with ``train``'s seed, validation and checkpoints); ``lda``:
    gensim's LDA for the LDA and FedLDA rows. ``repeats``: each method at each number of topics is
    trained that many times, repeat r with seeds ``seed + r`` and ``train.seed + r`` (the same
    documents scored the same way); tables average over topics and repeats, and the claims judge
    the repeats' paired differences (within noise when under two standard errors).
    """

    block: ClassVar[str] = "fednmf"

    topics: Annotated[tuple[TopicCount, ...], Field(min_length=1)] = (50, 100, 200)
    methods: Annotated[tuple[FedNMFMethod, ...], Field(min_length=1)] = FEDNMF_METHODS
    mi_weight: PositiveFloat = 0.1
    train: TrainConfig = Field(default_factory=_default_nmf_train)
    centralized_rounds: PositiveInt | None = None
    sklearn_max_iter: PositiveInt = 200
    sklearn_tol: PositiveFloat = 1e-4
    lda: LDAConfig = Field(default_factory=LDAConfig)
    evaluate: FedNMFEvaluateConfig = Field(default_factory=FedNMFEvaluateConfig)
    heterogeneity: HeterogeneityConfig = Field(default_factory=HeterogeneityConfig)
    seed: Seed = 42
    repeats: PositiveInt = 1

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        check_trained_by("fednmf", self.train.model)
        check_distinct(self.topics, "fednmf.topics")
        check_distinct(self.methods, "fednmf.methods")
        curve = self.evaluate.curve_topics
        if curve is not None and curve not in self.topics:
            raise ValueError(
                f"'fednmf.evaluate.curve_topics' is {curve}, not one of 'fednmf.topics' {list(self.topics)}"
            )
        return self

    def federation_sizes(self, organisations: int) -> tuple[int, ...]:
        """How many organisations each federated run of the sweep trains over: the corpus's
        ``organisations`` for its federated methods, and Fig. 4's K = ``heterogeneity.clients``
        (and the corpus's K at each alpha; ``experiments/fednmf.py: run_heterogeneity``), so that
        a rule these numbers cannot satisfy is refused before the first run, not the tenth."""
        sizes = {organisations} if any(m in ENGINE_FEDERATED_NMF_METHODS for m in self.methods) else set()
        sweep = self.heterogeneity
        if sweep.alphas and sweep.clients and sweep.methods:
            sizes |= {organisations, *sweep.clients}
        return tuple(sorted(sizes))

    def repeat(self, r: int) -> FedNMFRunConfig:
        """The settings of repeat ``r``: the training seeds moved by ``r``, nothing else."""
        if r == 0:
            return self
        return self.replace(seed=self.seed + r, train=self.train.replace(seed=self.train.seed + r))


# gFedNTM's synthetic experiment (sec. 4.1, Fig. 3) -----------------------------------------
class SweepConfig(ConfigModel):
    """One sweep of Fig. 3: a generator parameter, its values and the repetitions per value."""

    block: ClassVar[str] = "synthetic.sweeps"

    name: Name = "A"
    parameter: Literal["n_shared", "eta"] = "n_shared"
    values: Annotated[tuple[int | float, ...], Field(min_length=1)] = (5, 10, 15, 30, 40)  # ints stay ints
    repetitions: PositiveInt = 10
    scenarios: Annotated[tuple[Scenario, ...], Field(min_length=1)] | None = None  # null: train.scenarios

    @model_validator(mode="after")
    def _distinct(self) -> Self:
        check_distinct(self.values, f"synthetic.sweeps.{self.name}.values")
        return self


class SyntheticExperimentConfig(ConfigModel):
    """The ``synthetic`` parameter block: generator, consensus, training, scoring, sweep."""

    generator: SyntheticGeneratorConfig = Field(default_factory=SyntheticGeneratorConfig)
    consensus: ConsensusConfig = Field(default_factory=lambda: ConsensusConfig(top_n=5000, min_count=0))
    train: TrainConfig = Field(default_factory=TrainConfig)
    sweep: SweepConfig = Field(default_factory=SweepConfig)
    inference_samples: NonNegativeInt = 20
    baseline_draws: PositiveInt = 10
    seed: Seed = 42

    @classmethod
    def from_params(cls, raw: Mapping[str, Any]) -> SyntheticExperimentConfig:
        """Parse the ``synthetic`` block; every sweep value is checked against the generator."""
        raw = dict(raw)
        sweep = parse_sweep(raw.pop("sweep", "A"), raw.pop("sweeps", None), raw.pop("repetitions", 10))
        config = from_mapping(cls, {**raw, "sweep": sweep}, "synthetic")
        for point in config.points():  # fail before any training, naming the sweep value
            point.generator_config(config)
        return config

    def points(self) -> list[SweepPoint]:
        """Every (value, repetition) of the sweep, in run order."""
        return [
            SweepPoint(self.sweep.parameter, value, rep)
            for value in self.sweep.values
            for rep in range(self.sweep.repetitions)
        ]


def parse_sweep(name: Any, sweeps: Mapping[str, Any] | None, repetitions: Any) -> SweepConfig:
    """``synthetic.sweep`` names one entry of ``synthetic.sweeps``; build it as a SweepConfig."""
    sweeps = dict(sweeps or {})
    if not sweeps:
        raise ConfigError("parameter 'synthetic.sweeps' is empty: define at least one sweep")
    if name not in sweeps:
        raise ConfigError(f"parameter 'synthetic.sweep' is {name!r}; expected one of {sorted(sweeps)}")
    if isinstance(repetitions, bool) or not isinstance(repetitions, int) or repetitions < 1:
        raise ConfigError(f"parameter 'synthetic.repetitions' must be an integer >= 1, got {repetitions!r}")
    block = sweeps[name]
    if block is not None and not isinstance(block, Mapping):
        raise ConfigError(f"parameter block 'synthetic.sweeps.{name}' must be a mapping, got {block!r}")
    block = dict(block or {})
    if "name" in block or "repetitions" in block:
        raise ConfigError(f"parameter 'synthetic.sweeps.{name}' takes only 'parameter', 'values' and 'scenarios'")
    block.update(name=str(name), repetitions=repetitions)
    return from_mapping(SweepConfig, block, f"synthetic.sweeps.{name}")


@dataclass(frozen=True)
class SweepPoint:
    """One run: a value of the swept parameter and a repetition number."""

    parameter: str
    value: float
    repetition: int

    def seed(self, config: SyntheticExperimentConfig) -> int:
        """Repetition r uses the same seed at every value, so points differ only by the value."""
        return config.seed + self.repetition

    def generator_config(self, config: SyntheticExperimentConfig) -> SyntheticGeneratorConfig:
        value: float | int = int(self.value) if self.parameter == "n_shared" else float(self.value)
        if self.parameter == "n_shared" and value != self.value:
            raise ConfigError(f"parameter 'synthetic.sweeps.*.values' has a non-integer K' = {self.value}")
        changes = {**dict(config.generator), self.parameter: value, "seed": self.seed(config)}
        try:
            return from_mapping(SyntheticGeneratorConfig, changes, "synthetic.generator")
        except ConfigError as exc:
            raise ConfigError(f"sweep value {self.parameter} = {self.value} is invalid: {exc}") from exc


# PC-TD's experiments (seed 002 Figs. 2-4) -------------------------------------------------
class PCTDRunConfig(ConfigModel):
    """The ``pctd`` block: the main training (a ``train`` block of ``family: pctd``; its
    scenarios: federated with its noise, centralized and each party alone without noise,
    the party's own data needing none), ``sigmas`` (Fig. 2: federated runs at each noise,
    scored ``curve_points`` times during training), ``topics`` (Fig. 4: federated,
    centralized and pooled LDA at each number of topics), gensim LDA (``lda``), and the
    evaluation's ``top_words`` (coherence; diversity over ``diversity_words``)."""

    block: ClassVar[str] = "pctd"

    train: TrainConfig = Field(default_factory=lambda: TrainConfig(model=PCTDConfig(), max_steps=50))
    sigmas: tuple[NonNegativeFloat, ...] = (0.0, 0.25, 1.0, 4.0, 16.0)
    topics: tuple[TopicCount, ...] = (5, 10, 20, 30)
    curve_points: PositiveInt = 10
    lda: LDAConfig = Field(default_factory=LDAConfig)
    top_words: TopicCount = 10
    diversity_words: TopicCount = 25
    seed: Seed = 42

    @model_validator(mode="after")
    def _pctd_family(self) -> Self:
        check_trained_by("pctd", self.train.model)
        if self.train.max_steps is None:
            raise ValueError("'pctd.train.max_steps' must be set: T, the iterations the accountant composes")
        return self
