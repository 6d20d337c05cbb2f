"""Typed configuration for every parameter block.

Kedro parameters (``conf/*/parameters_*.yml``) and, later, Flower's run_config are
parsed into these dataclasses once, at the edge, so that core functions never see
raw dictionaries and a misspelt key fails loudly with the parameter's name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A parameter is unknown or has an invalid value; the message names it."""


def choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``allowed``, else raise naming the parameter."""
    if value not in allowed:
        raise ConfigError(f"parameter '{name}' is {value!r}; expected one of {list(allowed)}")
    return value


def from_mapping(cls: type[T], raw: Mapping[str, Any] | None, where: str) -> T:
    """Build dataclass ``cls`` from a mapping, rejecting unknown keys.

    ``where`` is the dotted parameter path used in error messages
    (for example ``train.model``).
    """
    raw = dict(raw or {})
    known = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ConfigError(f"unknown parameter(s) {[f'{where}.{k}' for k in unknown]}; known: {sorted(known)}")
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid parameter block '{where}': {exc}") from exc


def _check_max_documents(where: str, value: Mapping[str, int | None] | None) -> None:
    if value is None:
        return
    unknown = sorted(set(value) - {"train", "test"})
    if unknown:
        raise ConfigError(f"parameter '{where}.max_documents' has unknown split(s) {unknown}; use train / test")
    for split, cap in value.items():
        if cap is not None and (not isinstance(cap, int) or cap < 1):
            raise ConfigError(f"parameter '{where}.max_documents.{split}' must be a positive integer or null")


@dataclass(frozen=True)
class IngestDemoConfig:
    """20 Newsgroups: label glob patterns per organisation, optional caps per split."""

    organisations: Mapping[str, Any] = field(default_factory=dict)
    max_documents: Mapping[str, int | None] | None = None
    seed: int = 42

    def __post_init__(self) -> None:
        for org, patterns in self.organisations.items():
            if not patterns or not all(isinstance(p, str) for p in patterns):
                raise ConfigError(f"parameter 'ingest_demo.organisations.{org}' must be a list of label patterns")
        _check_max_documents("ingest_demo", self.max_documents)


@dataclass(frozen=True)
class IngestTableConfig:
    """A user's table: which columns hold the text, organisation, label and split."""

    text_column: str = "text"
    organisation_column: str = "organisation"
    label_column: str | None = None
    split_column: str | None = None
    test_fraction: float = 0.2
    max_documents: Mapping[str, int | None] | None = None
    seed: int = 42

    def __post_init__(self) -> None:
        if not 0.0 <= self.test_fraction < 1.0:
            raise ConfigError("parameter 'ingest_table.test_fraction' must be in [0, 1)")
        _check_max_documents("ingest_table", self.max_documents)


MULTI_MATCH_POLICIES = ("first", "all", "drop")


def _check_streaming(where: str, test_fraction: float, processes: int | None, cap: int | None, cap_name: str) -> None:
    if not 0.0 <= test_fraction < 1.0:
        raise ConfigError(f"parameter '{where}.test_fraction' must be in [0, 1)")
    if processes is not None and (not isinstance(processes, int) or processes < 1):
        raise ConfigError(f"parameter '{where}.processes' must be a positive integer or null (all cores)")
    if cap is not None and (not isinstance(cap, int) or cap < 1):
        raise ConfigError(f"parameter '{where}.{cap_name}' must be a positive integer or null")


def _check_rules(where: str, rules: Mapping[str, Any]) -> None:
    if not rules:
        raise ConfigError(f"parameter '{where}.organisations' is empty: give each organisation its rules")
    for org, patterns in rules.items():
        if not patterns or isinstance(patterns, str) or not all(isinstance(p, str) and p for p in patterns):
            raise ConfigError(f"parameter '{where}.organisations.{org}' must be a non-empty list of strings")


@dataclass(frozen=True)
class IngestWikipediaConfig:
    """Wikipedia dumps: category rules per organisation and how the stream is cut into work units.

    A rule is a keyword (case-insensitive, matched as a whole word inside a category
    name) or ``re:<regex>`` (case-insensitive ``re.search`` on the category name).
    """

    organisations: Mapping[str, Any] = field(default_factory=dict)
    multi_match: str = "all"
    max_articles: int | None = None
    test_fraction: float = 0.2
    seed: int = 42
    processes: int | None = None
    unit_mib: float = 8.0

    def __post_init__(self) -> None:
        _check_rules("ingest_wikipedia", self.organisations)
        choice("ingest_wikipedia.multi_match", self.multi_match, MULTI_MATCH_POLICIES)
        _check_streaming("ingest_wikipedia", self.test_fraction, self.processes, self.max_articles, "max_articles")
        if not isinstance(self.unit_mib, (int, float)) or not self.unit_mib > 0:
            raise ConfigError("parameter 'ingest_wikipedia.unit_mib' must be a number > 0")


@dataclass(frozen=True)
class IngestS2orcConfig:
    """S2ORC shards: fields of study per organisation and the textual fields joined into a document."""

    organisations: Mapping[str, Any] = field(default_factory=dict)
    text_fields: tuple[str, ...] = ("title", "abstract", "body_text")
    multi_match: str = "all"
    max_documents: int | None = None
    test_fraction: float = 0.2
    seed: int = 42
    processes: int | None = None
    shard_documents: int = 20000

    def __post_init__(self) -> None:
        _check_rules("ingest_s2orc", self.organisations)
        choice("ingest_s2orc.multi_match", self.multi_match, MULTI_MATCH_POLICIES)
        _check_streaming("ingest_s2orc", self.test_fraction, self.processes, self.max_documents, "max_documents")
        unknown = sorted(set(self.text_fields) - {"title", "abstract", "body_text"})
        if not self.text_fields or unknown:
            raise ConfigError(
                f"parameter 'ingest_s2orc.text_fields' must list some of title, abstract, body_text; got {unknown}"
            )
        if not isinstance(self.shard_documents, int) or self.shard_documents < 1:
            raise ConfigError("parameter 'ingest_s2orc.shard_documents' must be a positive integer")


@dataclass(frozen=True)
class PreprocessConfig:
    """Per-organisation text cleaning (runs inside each organisation)."""

    tokenizer: str = "regexp"
    min_token_length: int = 3
    stopwords: str = "sklearn"
    min_df: int = 2
    max_df: float = 0.5
    alphabetic_only: bool = True
    processes: int | None = None
    chunk_documents: int = 2000

    def __post_init__(self) -> None:
        choice("preprocess.tokenizer", self.tokenizer, ("regexp", "wordpunct", "toktok", "whitespace"))
        if self.processes is not None and (not isinstance(self.processes, int) or self.processes < 1):
            raise ConfigError("parameter 'preprocess.processes' must be a positive integer or null (all cores)")
        if not isinstance(self.chunk_documents, int) or self.chunk_documents < 1:
            raise ConfigError("parameter 'preprocess.chunk_documents' must be a positive integer")
        choice("preprocess.stopwords", self.stopwords, ("sklearn", "gensim", "both", "none"))
        if self.min_token_length < 1:
            raise ConfigError("parameter 'preprocess.min_token_length' must be >= 1")
        if self.min_df < 1:
            raise ConfigError("parameter 'preprocess.min_df' must be >= 1")
        if not 0.0 < self.max_df <= 1.0:
            raise ConfigError("parameter 'preprocess.max_df' must be in (0, 1]")


MERGE_RULES = ("union", "intersection")


@dataclass(frozen=True)
class ConsensusConfig:
    """Vocabulary consensus (seed 003 sec. 3.1.4; seed 001 sec. 3.1)."""

    top_n: int = 2000
    min_count: int = 5
    merge: str = "union"

    def __post_init__(self) -> None:
        choice("vocab_consensus.merge", self.merge, MERGE_RULES)
        if self.top_n < 1:
            raise ConfigError("parameter 'vocab_consensus.top_n' must be >= 1")
        if self.min_count < 0:
            raise ConfigError("parameter 'vocab_consensus.min_count' must be >= 0")


@dataclass(frozen=True)
class ProdLDAConfig:
    """ProdLDA hyper-parameters; defaults follow the CTM reference implementation."""

    n_topics: int = 20
    hidden_sizes: tuple[int, ...] = (100, 100)
    activation: str = "softplus"
    dropout: float = 0.2
    learn_priors: bool = True

    def __post_init__(self) -> None:
        choice("train.model.activation", self.activation, ("softplus", "relu"))
        if self.n_topics < 2:
            raise ConfigError("parameter 'train.model.n_topics' must be >= 2")
        if not self.hidden_sizes or any(h < 1 for h in self.hidden_sizes):
            raise ConfigError("parameter 'train.model.hidden_sizes' must be a non-empty list of positive sizes")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError("parameter 'train.model.dropout' must be in [0, 1)")


@dataclass(frozen=True)
class OptimizerConfig:
    """Server-side optimizer applied to the aggregated gradient (eq. 3, with Adam)."""

    name: str = "adam"
    lr: float = 2e-3
    betas: tuple[float, float] = (0.99, 0.999)

    def __post_init__(self) -> None:
        choice("train.optimizer.name", self.name, ("adam", "sgd"))
        if self.lr <= 0:
            raise ConfigError("parameter 'train.optimizer.lr' must be > 0")


SCENARIOS = ("federated", "centralized", "non_collaborative")
MODELS = ("prodlda",)


@dataclass(frozen=True)
class TrainConfig:
    """Scenarios, stopping rules and engine settings shared by all scenarios.

    A run stops after ``max_steps`` optimizer steps, or ``max_epochs`` epochs of the
    scenario's data (one epoch = the largest organisation's training documents / batch
    size steps), whichever one is set. With ``validation_fraction`` > 0 each organisation
    holds out that share of its training documents (gFedNTM: 0.25); the model is then
    validated every ``validation_every`` steps (null: once per epoch), training stops after
    ``patience`` validations without improvement, and the best weights are kept.
    """

    scenarios: tuple[str, ...] = SCENARIOS
    model_name: str = "prodlda"
    model: ProdLDAConfig = field(default_factory=ProdLDAConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    batch_size: int = 64
    max_steps: int | None = 1000
    max_epochs: int | None = None
    tolerance: float = 0.0
    validation_fraction: float = 0.0
    patience: int = 5
    validation_every: int | None = None
    seed: int = 42
    device: str = "auto"

    def __post_init__(self) -> None:
        if not self.scenarios:
            raise ConfigError(f"parameter 'train.scenarios' is empty; choose from {list(SCENARIOS)}")
        for scenario in self.scenarios:
            choice("train.scenarios", scenario, SCENARIOS)
        choice("train.model_name", self.model_name, MODELS)
        choice("train.device", self.device, ("auto", "cpu", "cuda"))
        if self.batch_size < 2:
            raise ConfigError("parameter 'train.batch_size' must be >= 2 (BatchNorm needs two documents)")
        if (self.max_steps is None) == (self.max_epochs is None):
            raise ConfigError(
                "set exactly one of 'train.max_steps' and 'train.max_epochs' (the other to null); "
                f"got max_steps={self.max_steps}, max_epochs={self.max_epochs}"
            )
        for name in ("max_steps", "max_epochs", "validation_every"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"parameter 'train.{name}' must be >= 1 (or null)")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ConfigError("parameter 'train.validation_fraction' must be in [0, 1) (0: no early stopping)")
        if self.patience < 1:
            raise ConfigError("parameter 'train.patience' must be >= 1")
        if self.tolerance < 0:
            raise ConfigError("parameter 'train.tolerance' must be >= 0")

    @classmethod
    def from_params(cls, raw: Mapping[str, Any]) -> TrainConfig:
        """Parse the ``train`` parameter block, including its nested blocks."""
        raw = dict(raw)
        model = from_mapping(ProdLDAConfig, raw.pop("model", None), "train.model")
        optimizer = from_mapping(OptimizerConfig, raw.pop("optimizer", None), "train.optimizer")
        base = from_mapping(cls, raw, "train")
        return dataclasses.replace(base, model=model, optimizer=optimizer)


@dataclass(frozen=True)
class FlowerConfig:
    """How the ServerApp talks to the organisations' nodes (``train.flower``).

    ``round_timeout_s`` ends a round without the nodes that have not answered (their
    weight is left out of eq. 2); ``stage_timeout_s`` bounds the vocabulary and
    preprocessing stages, which run each organisation's preprocessing; ``poll_s`` is how
    often replies are pulled; ``checkpoint_every`` rounds the server state is written to
    ``checkpoint_dir`` and a restarted run resumes from it (0: no checkpoints).
    """

    round_timeout_s: float = 120.0
    stage_timeout_s: float = 1800.0
    connect_timeout_s: float = 120.0
    poll_s: float = 0.01
    checkpoint_every: int = 0
    checkpoint_dir: str | None = None

    def __post_init__(self) -> None:
        for name in ("round_timeout_s", "stage_timeout_s", "connect_timeout_s", "poll_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"parameter 'train.flower.{name}' must be > 0")
        if self.checkpoint_every < 0:
            raise ConfigError("parameter 'train.flower.checkpoint_every' must be >= 0 (0: no checkpoints)")
        if self.checkpoint_every and not self.checkpoint_dir:
            raise ConfigError("parameter 'train.flower.checkpoint_every' needs 'train.flower.checkpoint_dir'")


@dataclass(frozen=True)
class EvaluateConfig:
    """Evaluation settings (coherence, diversity, classification)."""

    top_words: int = 10
    diversity_top_words: int = 25
    coherence_measures: tuple[str, ...] = ("c_npmi", "c_v")
    svm_test_size: float = 0.2
    svm_c: float = 1.0
    seed: int = 42

    def __post_init__(self) -> None:
        for measure in self.coherence_measures:
            choice("evaluate.coherence_measures", measure, ("c_npmi", "c_v", "u_mass", "c_uci"))
        if not 0.0 < self.svm_test_size < 1.0:
            raise ConfigError("parameter 'evaluate.svm_test_size' must be in (0, 1)")
        if self.top_words < 2:
            raise ConfigError("parameter 'evaluate.top_words' must be >= 2")


@dataclass(frozen=True)
class SyntheticGeneratorConfig:
    """LDA generator of gFedNTM sec. 4.1.1 (defaults: the paper's; see docs/synthetic.md).

    ``alpha`` null means the paper's 50 / K. ``inactive_ratio`` is the Dirichlet weight of
    the topics an organisation does not hold, relative to ``alpha``: 0 (paper) means
    they never occur in its documents; the authors' code used 1e-4 with alpha 0.1.
    """

    n_organisations: int = 5
    vocab_size: int = 5000
    n_topics: int = 50
    n_shared: int = 10
    eta: float = 0.01
    alpha: float | None = None
    inactive_ratio: float = 0.0
    doc_length: tuple[int, int] = (150, 250)
    n_train: int = 10000
    n_validation: int = 1000
    seed: int = 42

    def __post_init__(self) -> None:
        where = "synthetic.generator"
        for name in ("n_organisations", "vocab_size", "n_topics"):
            if getattr(self, name) < 1:
                raise ConfigError(f"parameter '{where}.{name}' must be >= 1")
        if not 0 <= self.n_shared <= self.n_topics:
            raise ConfigError(
                f"parameter '{where}.n_shared' (K' = {self.n_shared}) must be between 0 and "
                f"'{where}.n_topics' (K = {self.n_topics})"
            )
        if (self.n_topics - self.n_shared) % self.n_organisations:
            raise ConfigError(
                f"parameter '{where}.n_shared': K - K' = {self.n_topics - self.n_shared} private topics cannot be "
                f"split evenly over '{where}.n_organisations' = {self.n_organisations}"
            )
        if not self.eta > 0:
            raise ConfigError(f"parameter '{where}.eta' must be > 0, got {self.eta}")
        if self.alpha is None:
            object.__setattr__(self, "alpha", 50.0 / self.n_topics)
        elif not self.alpha > 0:
            raise ConfigError(f"parameter '{where}.alpha' must be > 0 (or null for 50 / K), got {self.alpha}")
        if not self.inactive_ratio >= 0:
            raise ConfigError(f"parameter '{where}.inactive_ratio' must be >= 0, got {self.inactive_ratio}")
        if len(self.doc_length) != 2 or not 1 <= self.doc_length[0] <= self.doc_length[1]:
            raise ConfigError(f"parameter '{where}.doc_length' must be [min, max] with 1 <= min <= max")
        if self.n_train < 8:
            raise ConfigError(f"parameter '{where}.n_train' must be >= 8 (a 75:25 split with 2+ documents each side)")
        if self.n_validation < 2:
            raise ConfigError(f"parameter '{where}.n_validation' must be >= 2")

    @property
    def n_private(self) -> int:
        """Private topics per organisation, (K - K') / L."""
        return (self.n_topics - self.n_shared) // self.n_organisations


SWEEP_PARAMETERS = ("n_shared", "eta")


@dataclass(frozen=True)
class SweepConfig:
    """One sweep of Fig. 3: a generator parameter, its values and the repetitions per value."""

    name: str = "A"
    parameter: str = "n_shared"
    values: tuple[float, ...] = (5, 10, 15, 30, 40)
    repetitions: int = 10
    scenarios: tuple[str, ...] | None = None  # null: train.scenarios

    def __post_init__(self) -> None:
        where = f"synthetic.sweeps.{self.name}"
        for scenario in self.scenarios or ():
            choice(f"{where}.scenarios", scenario, SCENARIOS)
        if self.scenarios is not None and not self.scenarios:
            raise ConfigError(f"parameter '{where}.scenarios' is empty; omit it to use 'synthetic.train.scenarios'")
        choice(f"{where}.parameter", self.parameter, SWEEP_PARAMETERS)
        if not self.values:
            raise ConfigError(f"parameter '{where}.values' is empty: give at least one value to sweep")
        if len(set(self.values)) != len(self.values):
            raise ConfigError(f"parameter '{where}.values' repeats a value: {list(self.values)}")
        if self.repetitions < 1:
            raise ConfigError("parameter 'synthetic.repetitions' must be >= 1")
