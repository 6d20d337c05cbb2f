"""Turn a raw document table into one table per organisation.

Works for the demo corpus (organisations from a label -> organisation mapping) and
for a user's own table (organisations from a column).
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from fedtopic_pipelines.core.text.demo import CorpusError, RawCorpus, SkippedRecord

logger = logging.getLogger(__name__)

RAW_COLUMNS = ["doc_id", "organisation", "text", "label", "split"]


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


def partition_corpus(
    raw: RawCorpus,
    organisation: pd.Series,
    organisations: Sequence[str],
    source: str,
    max_documents: Mapping[str, int | None] | None = None,
    seed: int = 42,
) -> tuple[dict[str, pd.DataFrame], dict]:
    """One raw table (doc_id, organisation, text, label, split) per organisation, plus an ingestion report.

    Documents whose organisation is missing or not configured are dropped and counted;
    ``max_documents`` optionally caps each organisation's ``train`` / ``test`` documents
    (a seeded sample, also counted). An organisation left with no document is an error
    naming it and the source.
    """
    docs = raw.documents.assign(organisation=organisation.to_numpy())
    unassigned = docs["organisation"].isna() | ~docs["organisation"].isin(list(organisations))
    dropped: dict[str, int] = {}
    if unassigned.any():
        dropped["no_configured_organisation"] = int(unassigned.sum())
    docs = docs.loc[~unassigned]
    tables: dict[str, pd.DataFrame] = {}
    kept: dict[str, dict[str, int]] = {}
    capped = 0
    for i, org in enumerate(organisations):
        rows = docs.loc[docs["organisation"] == org]
        parts = []
        for split in ("train", "test"):
            part = rows.loc[rows["split"] == split]
            cap = (max_documents or {}).get(split)
            if cap is not None and len(part) > cap:
                capped += len(part) - cap
                part = part.sample(n=cap, random_state=seed + i).sort_index()
            parts.append(part)
        rows = pd.concat(parts)
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
        "skipped": [{"source": r.source, "line": r.line, "reason": r.reason} for r in raw.skipped],
    }
    return tables, report


@dataclass(frozen=True)
class SourceTable:
    """A user's table as read from disk, with its path (for error messages)."""

    frame: pd.DataFrame
    path: str


def load_table(path: Path) -> SourceTable:
    """Read a CSV, Parquet or JSONL table (optionally gzip-compressed CSV/JSONL)."""
    suffix = "".join(path.suffixes[-2:]) if path.suffix == ".gz" else path.suffix
    if not path.is_file():
        raise CorpusError(f"table '{path}' does not exist")
    try:
        if suffix in (".csv", ".csv.gz"):
            frame = pd.read_csv(path)
        elif suffix == ".parquet":
            frame = pd.read_parquet(path)
        elif suffix in (".jsonl", ".jsonl.gz"):
            frame = pd.read_json(path, lines=True)
        else:
            raise CorpusError(f"table '{path}': unsupported format {suffix!r}; use .csv, .parquet or .jsonl")
    except CorpusError:
        raise
    except Exception as exc:  # pandas raises many types for malformed files
        raise CorpusError(f"table '{path}' could not be parsed: {exc}") from exc
    return SourceTable(frame, str(path))


def _is_blank(value: object) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value)) or str(value).strip() == ""


def table_to_raw(
    table: SourceTable,
    text_column: str,
    organisation_column: str,
    label_column: str | None = None,
    split_column: str | None = None,
    test_fraction: float = 0.2,
    seed: int = 42,
) -> RawCorpus:
    """Bring a user's table into the raw-corpus shape.

    Rows with an empty text or organisation are skipped and reported with their row
    number; a missing column stops with the file and parameter named. Without a split
    column, a seeded random ``test_fraction`` of the rows becomes ``test``.
    """
    frame, path = table.frame, table.path
    for param, column in (
        ("text_column", text_column),
        ("organisation_column", organisation_column),
        ("label_column", label_column),
        ("split_column", split_column),
    ):
        if column is not None and column not in frame.columns:
            raise CorpusError(
                f"table '{path}' has no column {column!r} (parameter 'ingest_table.{param}'); "
                f"columns are {list(frame.columns)}"
            )
    skipped: list[SkippedRecord] = []
    keep = np.ones(len(frame), dtype=bool)
    for position, (text, org) in enumerate(zip(frame[text_column], frame[organisation_column], strict=True)):
        if not isinstance(text, str) or not text.strip():
            skipped.append(SkippedRecord(path, position + 1, f"empty or non-text {text_column!r}"))
            keep[position] = False
        elif _is_blank(org):
            skipped.append(SkippedRecord(path, position + 1, f"empty {organisation_column!r}"))
            keep[position] = False
    frame = frame.loc[keep].reset_index(drop=True)
    out = pd.DataFrame(
        {
            "text": frame[text_column].astype(str),
            # a missing label is "" (left out of classification), not the class "nan"
            "label": frame[label_column].fillna("").astype(str) if label_column else "",
            "organisation": frame[organisation_column].astype(str),
            "source_line": np.flatnonzero(keep) + 1,
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
    if skipped:
        first = skipped[0]
        logger.warning("%s: skipped %d rows (first: row %d, %s)", path, len(skipped), first.line, first.reason)
    return RawCorpus(out, skipped)


def with_doc_ids(documents: pd.DataFrame, prefix: str) -> pd.DataFrame:
    """Stable document ids: the prefix plus the split and the source line."""
    ids = prefix + ":" + documents["split"].astype(str) + ":" + documents["source_line"].astype(str)
    return documents.assign(doc_id=ids.to_numpy())
