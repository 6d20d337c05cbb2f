"""Turn a raw document table into one table per organisation.

Works for the demo corpus (organisations from a label -> organisation mapping) and
for a user's own table (organisations from a column).
"""

from __future__ import annotations

import csv
import fnmatch
import gzip
import json
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np
import pandas as pd

from fedtopic_pipelines.core.text.demo import CorpusError, RawCorpus, SkippedRecord

logger = logging.getLogger(__name__)

RAW_COLUMNS = ["doc_id", "organisation", "text", "label", "split"]
MAX_LISTED_LINES = 20  # lines of documents of unconfigured organisations listed in the report
# Characters one CSV cell may hold. The csv module's default (131,072) skipped a document that
# JSONL keeps; documents are cut at 'preprocess.max_document_chars' later, whatever the format.
CSV_FIELD_LIMIT = 2**31 - 1


def assign_by_label(labels: pd.Series, mapping: Mapping[str, Sequence[str]]) -> pd.Series:
    """Map each label to the organisation whose glob patterns match it (None if none).

    A label matched by two organisations is a configuration error, reported by name.
    """
    result: dict[str, str | None] = {}
    for label in labels.unique():
        owners = [org for org, patterns in mapping.items() if any(fnmatch.fnmatchcase(label, p) for p in patterns)]
        if len(owners) > 1:
            raise CorpusError(f"label {label!r} matches several organisations {owners} in 'ingest_demo.organisations'")
        result[label] = owners[0] if owners else None
    return labels.map(result)


def _unconfigured_report(lost: pd.DataFrame, source: str) -> dict:
    """Count and warn about the documents whose organisation is missing or not configured (first lines listed)."""
    names = lost["organisation"].fillna("<none>").astype(str)
    unconfigured = {
        "organisations": {str(k): int(v) for k, v in names.value_counts().sort_index().items()},
        "first_lines": [int(x) for x in lost["source_line"].head(MAX_LISTED_LINES)],
    }
    logger.warning(
        "%s: %d documents of organisations not configured (%s), first lines %s",
        source,
        len(lost),
        ", ".join(list(unconfigured["organisations"])[:MAX_LISTED_LINES]),
        unconfigured["first_lines"],
    )
    return unconfigured


def _cap_splits(
    rows: pd.DataFrame, max_documents: Mapping[str, int | None] | None, seed: int
) -> tuple[pd.DataFrame, int]:
    """One organisation's train then test documents, each split sampled down to its cap; and how many were cut."""
    parts = []
    capped = 0
    for split in ("train", "test"):
        part = rows.loc[rows["split"] == split]
        cap = (max_documents or {}).get(split)
        if cap is not None and len(part) > cap:
            capped += len(part) - cap
            part = part.sample(n=cap, random_state=seed).sort_index()
        parts.append(part)
    return pd.concat(parts), capped


def partition_corpus(
    raw: RawCorpus,
    organisation: pd.Series,
    organisations: Sequence[str],
    source: str,
    max_documents: Mapping[str, int | None] | None = None,
    seed: int = 42,
) -> tuple[dict[str, pd.DataFrame], dict]:
    """One raw table (doc_id, organisation, text, label, split) per organisation, plus an ingestion report.

    Documents whose organisation is missing or not configured are dropped and counted (per
    organisation, with the first ``MAX_LISTED_LINES`` source lines in ``not_configured``);
    ``max_documents`` optionally caps each organisation's ``train`` / ``test`` documents
    (a seeded sample, also counted). An organisation left with no document is an error
    naming it and the source.
    """
    docs = raw.documents.assign(organisation=organisation.to_numpy())
    unassigned = docs["organisation"].isna() | ~docs["organisation"].isin(list(organisations))
    dropped: dict[str, int] = {}
    unconfigured: dict = {}
    if unassigned.any():
        dropped["no_configured_organisation"] = int(unassigned.sum())
        unconfigured = _unconfigured_report(docs.loc[unassigned], source)
    docs = docs.loc[~unassigned]
    tables: dict[str, pd.DataFrame] = {}
    kept: dict[str, dict[str, int]] = {}
    capped = 0
    for i, org in enumerate(organisations):
        rows, cut = _cap_splits(docs.loc[docs["organisation"] == org], max_documents, seed + i)
        capped += cut
        if rows.empty:
            raise CorpusError(f"organisation '{org}' has no documents in {source}")
        rows = with_doc_ids(rows, org)
        tables[org] = rows[RAW_COLUMNS].reset_index(drop=True)
        kept[org] = {s: int((rows["split"] == s).sum()) for s in ("train", "test")}
    if capped:
        dropped["over_max_documents"] = capped
    report = {
        "source": source,
        "documents_read": len(raw.documents) + len(raw.skipped),
        "kept": kept,
        "dropped": dropped,
        "skipped_records": len(raw.skipped),
        **({"not_configured": unconfigured} if unconfigured else {}),
        "skipped": [{"source": r.source, "line": r.line, "reason": r.reason} for r in raw.skipped],
    }
    return tables, report


@dataclass(frozen=True)
class SourceTable:
    """A user's table as read from disk, with its path (for error messages).

    ``lines`` holds each row's line in the file (CSV: the line its record starts on,
    the header being line 1; JSONL: its line; Parquet: its row number), default
    1, 2, ...; ``skipped`` the malformed records left out while reading.
    """

    frame: pd.DataFrame
    path: str
    lines: np.ndarray | None = None
    skipped: list[SkippedRecord] = field(default_factory=list)

    def line_numbers(self) -> np.ndarray:
        """Each row's line in the file (1-based positions when the reader gave none)."""
        return np.arange(1, len(self.frame) + 1) if self.lines is None else np.asarray(self.lines)


def _has_bad_bytes(text: str) -> bool:
    """True when decoding with ``surrogateescape`` left a byte that is not UTF-8."""
    return any("\udc80" <= ch <= "\udcff" for ch in text)


def _open_text(path: Path) -> IO[str]:
    """Open a plain or gzip text file; undecodable bytes survive as surrogates, to be counted per record."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors="surrogateescape", newline="")
    return path.open(encoding="utf-8", errors="surrogateescape", newline="")


def allow_long_csv_fields() -> None:
    """Raise the csv module's cell limit (process-wide) so a CSV keeps every document a JSONL keeps."""
    if csv.field_size_limit() < CSV_FIELD_LIMIT:
        csv.field_size_limit(CSV_FIELD_LIMIT)


class CsvRecord(NamedTuple):
    """One CSV record: the line it starts on, the line it ends on, its fields."""

    line: int
    end: int
    fields: list[str]


class _NumberedLines:
    """The lines a csv reader takes, numbered; the current record's are kept, to count them if a quote runs away."""

    def __init__(self, lines: Iterable[str]) -> None:
        self._lines = iter(lines)
        self.number = 0
        self.record: list[tuple[int, str]] = []

    def __iter__(self) -> _NumberedLines:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.number += 1
        self.record.append((self.number, line))
        return line


def _refused(
    record: list[tuple[int, str]], source: str, exc: csv.Error, dialect: Mapping[str, Any]
) -> Iterator[CsvRecord | SkippedRecord]:
    """What a record the strict reader refused becomes: one line is read again leniently (as pandas
    would: ``"a"b`` gives ``ab``); a quote left open over several lines skips each line it covers."""
    first, last = record[0][0], record[-1][0]
    if len(record) == 1:
        try:
            row = next(csv.reader([record[0][1]], **dialect), [])
        except csv.Error as lax:
            yield SkippedRecord(source, first, f"malformed CSV: {lax}")
            return
        if row:
            yield CsvRecord(first, first, row)
        return
    ends = "the file ends inside it" if "unexpected end of data" in str(exc) else f"line {last}: {exc}"
    reason = f"inside a quoted field opened on line {first} that is not closed properly ({ends})"
    covered = [number for number, line in record if line.strip()]
    logger.warning(
        "%s: a quote opened on line %d is not closed properly (%s); its %d lines %d-%d are skipped: fix the quote",
        source,
        first,
        ends,
        len(covered),
        first,
        last,
    )
    for number in covered:
        yield SkippedRecord(source, number, reason)


def csv_records(lines: Iterable[str], source: str, **dialect: Any) -> Iterator[CsvRecord | SkippedRecord]:
    """Every record of a CSV, in order: its fields, or a skipped record naming ``source`` and the line.

    Quotes are read strictly, so a quote left open, which would swallow every line up to the
    next quote character into one field, is found: each non-blank line it covers is skipped
    (a line is counted as a record), naming the line the quote opened on. No record is
    silently lost or merged into another. Blank lines are no records.
    """
    allow_long_csv_fields()
    feed = _NumberedLines(lines)
    reader = csv.reader(feed, strict=True, **dialect)
    while True:
        feed.record.clear()
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield from _refused(list(feed.record), source, exc, dialect)
            continue
        if row:
            yield CsvRecord(feed.record[0][0], feed.record[-1][0], row)


def _read_csv(path: Path) -> SourceTable:
    """Read a CSV record by record: a row with the wrong number of fields, a byte that is not
    UTF-8 or a quoting error is skipped and counted with its line, not fatal."""
    skipped: list[SkippedRecord] = []
    rows: list[list[str]] = []
    lines: list[int] = []
    header: list[str] | None = None
    with _open_text(path) as handle:
        for record in csv_records(handle, str(path)):
            if header is None:
                if isinstance(record, SkippedRecord):
                    raise CorpusError(f"table '{path}': its header (line {record.line}) is unreadable: {record.reason}")
                if _has_bad_bytes(",".join(record.fields)):
                    raise CorpusError(f"table '{path}': its header (line {record.line}) is not valid UTF-8")
                header = record.fields
            elif isinstance(record, SkippedRecord):
                skipped.append(record)
            elif _has_bad_bytes("".join(record.fields)):
                skipped.append(SkippedRecord(str(path), record.line, "not valid UTF-8"))
            elif len(record.fields) != len(header):
                span = f" (one record over lines {record.line}-{record.end})" if record.end > record.line else ""
                reason = f"{len(record.fields)} fields, expected {len(header)}{span}"
                skipped.append(SkippedRecord(str(path), record.line, reason))
            else:
                rows.append(record.fields)
                lines.append(record.line)
    if header is None:
        raise CorpusError(f"table '{path}' is empty: no header line")
    frame = pd.DataFrame(rows, columns=header, dtype=object)
    # csv gives "" for an empty cell; pandas' reader gave NaN: keep that meaning
    frame = frame.where(frame != "", None)
    return SourceTable(frame, str(path), np.asarray(lines, dtype=np.int64), skipped)


def _read_jsonl(path: Path) -> SourceTable:
    """Read JSON Lines one line at a time: invalid JSON, a non-object or a byte that is not
    UTF-8 skips that line (counted with its number), like the S2ORC reader."""
    skipped: list[SkippedRecord] = []
    records: list[dict] = []
    lines: list[int] = []
    with _open_text(path) as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            if _has_bad_bytes(line):
                skipped.append(SkippedRecord(str(path), number, "not valid UTF-8"))
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                skipped.append(SkippedRecord(str(path), number, f"invalid JSON: {exc.msg} (column {exc.colno})"))
                continue
            if not isinstance(record, dict):
                skipped.append(SkippedRecord(str(path), number, f"not a JSON object ({type(record).__name__})"))
                continue
            records.append(record)
            lines.append(number)
    return SourceTable(pd.DataFrame.from_records(records), str(path), np.asarray(lines, dtype=np.int64), skipped)


def load_table(path: Path) -> SourceTable:
    """Read a CSV, Parquet or JSONL table (optionally gzip-compressed CSV/JSONL).

    CSV and JSONL are read record by record: a malformed record is skipped, counted with
    its line and logged; the run stops, naming the file, only when no record is usable.
    """
    suffix = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
    if not path.is_file():
        raise CorpusError(f"table '{path}' does not exist")
    try:
        if suffix in (".csv", ".csv.gz"):
            table = _read_csv(path)
        elif suffix == ".parquet":
            table = SourceTable(pd.read_parquet(path), str(path))
        elif suffix in (".jsonl", ".jsonl.gz"):
            table = _read_jsonl(path)
        else:
            raise CorpusError(f"table '{path}': unsupported format {suffix!r}; use .csv, .parquet or .jsonl")
    except CorpusError:
        raise
    except Exception as exc:  # pandas / pyarrow / gzip raise many types for malformed files
        raise CorpusError(f"table '{path}' could not be parsed: {exc}") from exc
    if table.skipped:
        first = table.skipped[0]
        logger.warning(
            "%s: %d records read, %d kept, skipped %d malformed records (first: line %d, %s)",
            path,
            len(table.frame) + len(table.skipped),
            len(table.frame),
            len(table.skipped),
            first.line,
            first.reason,
        )
    if table.frame.empty:
        detail = ""
        if table.skipped:
            first = table.skipped[0]
            detail = f"; {len(table.skipped)} malformed (first: line {first.line}, {first.reason})"
        raise CorpusError(f"table '{path}' has no usable record{detail}")
    return table


def _is_blank(value: object) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value)) or str(value).strip() == ""


def _require_columns(frame: pd.DataFrame, path: str, columns: Mapping[str, str | None]) -> None:
    """Stop on a configured column the table lacks, naming the file and the parameter that names it."""
    for param, column in columns.items():
        if column is not None and column not in frame.columns:
            raise CorpusError(
                f"table '{path}' has no column {column!r} (parameter 'ingest_table.{param}'); "
                f"columns are {list(frame.columns)}"
            )


def _usable_rows(
    table: SourceTable, lines: np.ndarray, text_column: str, organisation_column: str | None
) -> tuple[np.ndarray, list[SkippedRecord], int]:
    """Which rows to keep: not empty, with an organisation (when a column holds them), a text not
    seen before (the first copy kept).

    Returns the mask, the table's skipped records followed by the rows skipped here, and the duplicates.
    """
    frame, path = table.frame, table.path
    skipped: list[SkippedRecord] = list(table.skipped)
    keep = np.ones(len(frame), dtype=bool)
    first_line: dict[str, int] = {}
    duplicates = 0
    organisations = frame[organisation_column] if organisation_column else ["drawn"] * len(frame)
    for position, (text, org) in enumerate(zip(frame[text_column], organisations, strict=True)):
        line = int(lines[position])
        if not isinstance(text, str) or not text.strip():
            skipped.append(SkippedRecord(path, line, f"empty or non-text {text_column!r}"))
            keep[position] = False
        elif _is_blank(org):
            skipped.append(SkippedRecord(path, line, f"empty {organisation_column!r}"))
            keep[position] = False
        elif text.strip() in first_line:
            skipped.append(SkippedRecord(path, line, f"duplicate text of line {first_line[text.strip()]} (kept)"))
            keep[position] = False
            duplicates += 1
        else:
            first_line[text.strip()] = line
    return keep, skipped, duplicates


def table_to_raw(
    table: SourceTable,
    text_column: str,
    organisation_column: str | None,
    label_column: str | None = None,
    split_column: str | None = None,
    test_fraction: float = 0.2,
    seed: int = 42,
) -> RawCorpus:
    """Bring a user's table into the raw-corpus shape (``organisation_column`` None: the
    organisations are drawn later, by label skew, and are empty here).

    Rows with an empty text or organisation are skipped and reported with their line; a
    text seen before (exactly, ignoring surrounding white space) is skipped as a duplicate
    naming the line of the copy kept (the first), so no text is both in train and test. A
    missing column stops with the file and parameter named. Without a split column, a
    seeded random ``test_fraction`` of the rows becomes ``test``.
    """
    frame, path = table.frame, table.path
    _require_columns(
        frame,
        path,
        {
            "text_column": text_column,
            "organisation_column": organisation_column,
            "label_column": label_column,
            "split_column": split_column,
        },
    )
    lines = table.line_numbers()
    keep, skipped, duplicates = _usable_rows(table, lines, text_column, organisation_column)
    frame = frame.loc[keep].reset_index(drop=True)
    out = pd.DataFrame(
        {
            "text": frame[text_column].astype(str),
            # a missing label is "" (left out of classification), not the class "nan"
            "label": frame[label_column].fillna("").astype(str) if label_column else "",
            "organisation": frame[organisation_column].astype(str) if organisation_column else "",
            "source_line": lines[keep],
        }
    )
    if split_column:
        out["split"] = frame[split_column].astype(str)
        bad = sorted(set(out["split"]) - {"train", "test"})
        if bad:
            raise CorpusError(f"table '{path}': column {split_column!r} must hold 'train' or 'test', found {bad[:5]}")
    else:
        rng = np.random.default_rng(seed)
        out["split"] = np.where(rng.random(len(out)) < test_fraction, "test", "train")
    own = skipped[len(table.skipped) :]
    if own:
        logger.warning(
            "%s: skipped %d rows, %d of them duplicate texts (first: line %d, %s)",
            path,
            len(own),
            duplicates,
            own[0].line,
            own[0].reason,
        )
    return RawCorpus(out, skipped)


def with_doc_ids(documents: pd.DataFrame, prefix: str) -> pd.DataFrame:
    """Stable document ids: the prefix plus the split and the source line."""
    ids = prefix + ":" + documents["split"].astype(str) + ":" + documents["source_line"].astype(str)
    return documents.assign(doc_id=ids.to_numpy())


GENSIM_DATA = "gensim:"  # a file path with this prefix names a file of gensim's shipped test data


def read_ordered_corpus(source: str, parts: Mapping[str, int]) -> SourceTable:
    """A one-document-per-line file cut in file order into consecutive parts, one per
    organisation (``parts``: organisation -> documents, in order): a corpus ordered by time
    split by time, as PC-TD's experiment splits its news (seed 002). ``gensim:<name>`` reads
    gensim's shipped test data (``lee_background.cor``: 300 news articles). Empty lines are
    documents too (counted by the ingestion as empty); the parts must cover the file exactly."""
    if source.startswith(GENSIM_DATA):
        from gensim.test.utils import datapath  # deferred: gensim is a heavy import

        path = Path(datapath(source.removeprefix(GENSIM_DATA)))
    else:
        path = Path(source)
    if not path.is_file():
        raise FileNotFoundError(f"ordered corpus '{source}': no such file ({path})")
    with _open_text(path) as handle:
        lines = [line.rstrip("\n") for line in handle]
    sizes = {str(org): int(n) for org, n in parts.items()}
    if not sizes or any(n < 1 for n in sizes.values()):
        raise ValueError(f"ordered corpus '{path}': parameter 'parts' must give each organisation >= 1 document")
    if sum(sizes.values()) != len(lines):
        raise ValueError(
            f"ordered corpus '{path}' has {len(lines)} documents but 'parts' {sizes} sum to {sum(sizes.values())}"
        )
    owners = np.repeat(list(sizes), list(sizes.values()))
    frame = pd.DataFrame({"text": lines, "organisation": owners})
    return SourceTable(frame, str(path), np.arange(1, len(lines) + 1))
