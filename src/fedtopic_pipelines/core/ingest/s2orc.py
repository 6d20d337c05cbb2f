"""Stream S2ORC / Semantic Scholar JSONL shards into per-organisation Parquet shards.

Input files are JSON Lines, plain or gzip-compressed (detected by the gzip magic bytes,
not the name). Each non-blank line is one record; its schema is detected per record:

* **S2ORC 2020 release** -- a record with a ``paper_id`` key. Metadata records give
  ``title``, ``abstract`` (string or null) and ``mag_field_of_study`` (list or null).
  Full text comes from the release's separate ``pdf_parses`` records
  (``{"paper_id", "abstract": [{"text"}...], "body_text": [{"text", "section"}...]}``),
  joined by ``paper_id``: a parse's abstract paragraphs replace the metadata abstract,
  its body paragraphs (joined by newlines) are the body text. A paper without a parse
  keeps its metadata title and abstract.
* **Semantic Scholar datasets / Graph API** -- otherwise, a record with ``corpusid``
  (``corpusId``) or ``paperId``. Fields of study are the union, in order and without
  repeats, of ``fieldsOfStudy`` (list of strings or null) and the ``category`` of each
  ``s2fieldsofstudy`` (``s2FieldsOfStudy``) entry. There is no body text; an ``abstract``
  published as a separate dataset is not joined.

Anything else (no identifier, a value that is not an object, a field of the wrong type,
invalid JSON or UTF-8) is a malformed record, counted and listed with its file and line.

**The pdf_parses join** keeps memory flat. The 2020 release ships ``metadata_<i>`` and
``pdf_parses_<i>`` as batches of the same papers, so a metadata file is paired with the
pdf_parses file of the same batch number (a single metadata and a single pdf_parses file
are paired whatever their names). For each pair, a worker reads the metadata once to
collect the ids of the papers that the rules keep, copies only those papers' parses into
a temporary SQLite file under ``work_root/_tmp`` (one batch at a time, deleted after it),
and reads the metadata again, looking each kept paper up. Neither file needs to be sorted,
and no more than one batch's wanted parses is ever held, on disk.

**Work units** are input files (with their paired pdf_parses file). A worker process
parses a unit and writes each organisation's documents as shards of at most
``shard_documents`` rows (``<org>/<unit>-<k>.parquet``), so a worker holds at most that
many documents per organisation. The main process takes the units' results in input
order and applies the per-organisation cap, truncating or deleting the shards past it,
so which documents are kept does not depend on the number of processes. A unit's marker
(counts and kept shards) is written after that, and an interrupted run resumes after the
last finished unit.

A record is dropped for the first reason that applies, in this order: ``malformed``,
``no_field_of_study``, ``no_matching_field``, ``several_organisations`` (policy drop),
``no_text`` (checked after the rules, because a 2020 paper's text is known only once its
parse is joined, which is done only for the papers the rules keep), ``duplicate_id`` (once
per organisation that already holds a paper with the same id) and ``over_max_documents``
(once per organisation a document goes over the cap of).

**Duplicate ids**: within an organisation the first copy of a paper id is kept, in input
order (files in the order given, lines in file order) and every later copy is dropped,
whatever its text: one paper, one document, so a re-posted paper is neither weighted
twice nor split across train and test. The main process checks each unit's shards against
the ids already kept (a SQLite table under ``work_root``, so memory stays flat), before the
cap, so duplicates do not use up an organisation's cap. A paper kept by two organisations
(``multi_match: all``) is no duplicate.

**Empty files** (zero bytes, or no record at all, such as an empty gzip member) are read
as nothing, listed in the report's ``empty_files`` and named in a warning: a download that
failed or never finished must not go unnoticed. If no file held a record, the run stops.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import sqlite3
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm.auto import tqdm

from fedtopic_pipelines.core.config import IngestS2orcConfig
from fedtopic_pipelines.core.ingest.common import (
    MAX_LISTED_MALFORMED,
    SHARD_COLUMNS,
    IngestReport,
    Rules,
    WorkDirectory,
    check_organisations,
    split_of,
)
from fedtopic_pipelines.core.shards import ShardedTable, ordered_map, resolve_processes, write_parquet_atomic
from fedtopic_pipelines.core.text.demo import CorpusError

logger = logging.getLogger(__name__)

CORPUS = "s2orc"
WHERE = "ingest_s2orc"
GZIP_MAGIC = b"\x1f\x8b"
CURRENT_ID_KEYS = ("corpusid", "corpusId", "paperId")
S2_FIELDS_KEYS = ("s2fieldsofstudy", "s2FieldsOfStudy")
# A pdf_parses line's id read without parsing the JSON, to skip unwanted (large) parses cheaply.
PARSE_ID_PREFIX = re.compile(rb'\s*\{\s*"paper_id"\s*:\s*"?([^",\s}]+)')
BATCH_NUMBER = re.compile(r"(\d+)(?!.*\d)")
INSERT_BATCH = 500
SQL_CHUNK = 500  # ids per "IN (...)" lookup, below SQLite's limit of bound parameters


# Finding and pairing files --------------------------------------------------------------


def natural_key(path: Path) -> tuple[list[Any], str]:
    """metadata_2 before metadata_10: the release's batch order (and so which copy of a duplicate is first).

    Ties (``x_1`` and ``x_01``, one name in two folders) fall back to the full path, so the
    order never depends on the order the file system lists the files in.
    """
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)], str(path)


def find_shards(directory: Path, pattern: str = "*.jsonl*") -> list[Path]:
    """The JSONL (or JSONL.gz) files matching ``pattern`` in ``directory``, in natural name order."""
    if not directory.is_dir():
        raise CorpusError(f"S2ORC directory '{directory}' does not exist")
    files = sorted((p for p in directory.glob(pattern) if p.is_file()), key=natural_key)
    if not files:
        raise CorpusError(f"no S2ORC shard matching {pattern!r} in '{directory}'")
    return files


def _batch_number(path: Path) -> int | None:
    stem = path.name
    for suffix in (".gz", ".jsonl", ".json"):
        stem = stem.removesuffix(suffix)
    found = BATCH_NUMBER.search(stem)
    return int(found.group(1)) if found else None


def pair_pdf_parses(files: Sequence[Path], pdf_parses: Sequence[Path]) -> list[Path | None]:
    """The pdf_parses file of each metadata file's batch (``metadata_<i>`` <-> ``pdf_parses_<i>``), or None.

    A pdf_parses file that pairs with no metadata file is an error: its full texts would
    be silently lost.
    """
    if not pdf_parses:
        return [None] * len(files)
    if len(files) == 1 and len(pdf_parses) == 1:
        return [pdf_parses[0]]
    by_batch: dict[int, Path] = {}
    for path in pdf_parses:
        number = _batch_number(path)
        if number is None or number in by_batch:
            raise CorpusError(
                f"pdf_parses file '{path}' has no batch number of its own in its name, so it cannot be paired "
                "with a metadata file (expected names like pdf_parses_<i>.jsonl.gz for metadata_<i>.jsonl.gz)"
            )
        by_batch[number] = path
    pairs = [by_batch.get(n) if (n := _batch_number(path)) is not None else None for path in files]
    unpaired = sorted(str(p) for p in set(pdf_parses) - {p for p in pairs if p is not None})
    if unpaired:
        raise CorpusError(f"pdf_parses file(s) {unpaired} have no metadata file with the same batch number")
    for path, pair in zip(files, pairs, strict=True):
        if pair is None:
            logger.info("%s: no pdf_parses file of the same batch; using its metadata title and abstract", path)
    return pairs


# Reading records ------------------------------------------------------------------------


def _open(path: Path):
    with path.open("rb") as handle:
        compressed = handle.read(2) == GZIP_MAGIC
    return gzip.open(path, "rb") if compressed else path.open("rb")


def _decode(raw: bytes, line: int) -> dict[str, Any] | str:
    """A JSON object, or why the line is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 ({exc.reason}: byte 0x{raw[exc.start]:02x} at offset {exc.start})"
    if line == 1:
        text = text.removeprefix("\ufeff")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"invalid JSON ({exc.msg} at column {exc.colno})"
    if not isinstance(value, dict):
        return f"a JSON {_json_type(value)}, not an object"
    return value


def _raw_lines(path: Path, report: IngestReport | None) -> Iterator[tuple[int, bytes]]:
    """(1-based line, bytes) of each non-blank line; damaged gzip data ends the file, reported, lines before kept."""
    line = 0
    try:
        with _open(path) as handle:
            for line, raw in enumerate(handle, start=1):
                if raw.strip():
                    yield line, raw
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        if report is not None:
            report.add_error(
                str(path), f"truncated or corrupt gzip data ({exc}); the records before it are kept", line=line + 1
            )


def _records(path: Path, report: IngestReport | None) -> Iterator[tuple[int, dict[str, Any] | str]]:
    for line, raw in _raw_lines(path, report):
        yield line, _decode(raw, line)


# Record schemas -------------------------------------------------------------------------


class Malformed(ValueError):
    """A record of the wrong shape; the message names the field."""


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _identifier(record: dict[str, Any], key: str) -> str:
    value = record[key]
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise Malformed(f"field '{key}' must be a non-empty string or an integer, got {_json_type(value)}")


def _text(record: dict[str, Any], key: str) -> str:
    value = record.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Malformed(f"field '{key}' must be a string or null, got {_json_type(value)}")
    return value.strip()


def _strings(record: dict[str, Any], key: str) -> list[str]:
    value = record.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Malformed(f"field '{key}' must be a list of strings or null, got {_json_type(value)}")
    return value


def _categories(record: dict[str, Any], key: str) -> list[str]:
    value = record.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(
        isinstance(v, dict) and isinstance(v.get("category"), str) for v in value
    ):
        raise Malformed(f"field '{key}' must be a list of {{\"category\": string, ...}} objects or null")
    return [v["category"] for v in value]


def _paragraphs(record: dict[str, Any], key: str) -> str:
    value = record.get(key)
    if value is None:
        return ""
    if not isinstance(value, list) or not all(isinstance(v, dict) and isinstance(v.get("text"), str) for v in value):
        raise Malformed(f"field '{key}' must be a list of {{\"text\": string, ...}} objects or null")
    return "\n".join(text for v in value if (text := v["text"].strip()))


@dataclass
class Paper:
    source_id: str
    title: str
    abstract: str
    fields: list[str]
    release_2020: bool
    body_text: str = ""


def parse_paper(record: dict[str, Any]) -> Paper:
    """A metadata record of either schema (see the module docstring) -> a paper, or ``Malformed``."""
    if "paper_id" in record:
        source_id = _identifier(record, "paper_id")
        labels = _strings(record, "mag_field_of_study")
        release_2020 = True
    else:
        key = next((k for k in CURRENT_ID_KEYS if record.get(k) is not None), None)
        if key is None:
            raise Malformed(
                "no 'paper_id' (S2ORC 2020) or 'corpusid' / 'corpusId' / 'paperId' (Semantic Scholar) field"
            )
        source_id = _identifier(record, key)
        labels = _strings(record, "fieldsOfStudy")
        for s2_key in S2_FIELDS_KEYS:
            labels = labels + _categories(record, s2_key)
        release_2020 = False
    fields = list(dict.fromkeys(label.strip() for label in labels if label.strip()))
    return Paper(source_id, _text(record, "title"), _text(record, "abstract"), fields, release_2020)


def parse_pdf_parse(record: dict[str, Any]) -> tuple[str, str, str]:
    """A 2020 pdf_parses record -> (paper_id, abstract paragraphs, body paragraphs)."""
    if "paper_id" not in record:
        raise Malformed("no 'paper_id' field")
    return _identifier(record, "paper_id"), _paragraphs(record, "abstract"), _paragraphs(record, "body_text")


# Parsing one unit (in a worker) ---------------------------------------------------------


@dataclass(frozen=True)
class UnitTask:
    """Everything a spawned worker needs for one input file (picklable)."""

    unit: str
    file: str
    pdf_parses: str | None
    root: str
    rules: Rules
    text_fields: tuple[str, ...]
    test_fraction: float
    seed: int
    shard_documents: int


@dataclass
class UnitResult:
    """A worker's counts and the shards it wrote: org -> [(path relative to the root, rows, rows per split)]."""

    unit: str
    report: IngestReport
    shards: dict[str, list[tuple[str, int, dict[str, int]]]] = field(default_factory=dict)


class _ShardWriter:
    """Buffers at most ``shard_documents`` rows per organisation, then writes them as the next shard."""

    def __init__(self, task: UnitTask) -> None:
        self.task = task
        self.rows: dict[str, list[tuple[str, ...]]] = {}
        self.shards: dict[str, list[tuple[str, int, dict[str, int]]]] = {}

    def add(self, org: str, row: tuple[str, ...]) -> None:
        rows = self.rows.setdefault(org, [])
        rows.append(row)
        if len(rows) >= self.task.shard_documents:
            self.flush(org)

    def flush(self, org: str) -> None:
        rows = self.rows.pop(org, [])
        if not rows:
            return
        written = self.shards.setdefault(org, [])
        relative = f"{org}/{self.task.unit}-{len(written):04d}.parquet"
        write_parquet_atomic(pd.DataFrame(rows, columns=SHARD_COLUMNS), Path(self.task.root) / relative)
        written.append((relative, len(rows), dict(Counter(row[4] for row in rows))))

    def close(self) -> dict[str, list[tuple[str, int, dict[str, int]]]]:
        for org in list(self.rows):
            self.flush(org)
        return self.shards


class _ParseStore:
    """The wanted pdf_parses of one batch, in a temporary SQLite file: flat memory, any record order."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)  # left by an interrupted run
        self.path = path
        self.db = sqlite3.connect(path)
        self.db.execute("PRAGMA journal_mode=OFF")
        self.db.execute("PRAGMA synchronous=OFF")
        self.db.execute("CREATE TABLE parse (paper_id TEXT PRIMARY KEY, abstract TEXT, body TEXT)")

    def fill(self, file: Path, wanted: set[str], report: IngestReport) -> None:
        """Copy the parses of ``wanted`` papers; a malformed parse is noted and its paper keeps its metadata."""
        batch: list[tuple[str, str, str]] = []
        for line, raw in _raw_lines(file, report):
            prefix = PARSE_ID_PREFIX.match(raw)
            if prefix is not None and prefix.group(1).decode("utf-8", "replace") not in wanted:
                continue
            record = _decode(raw, line)
            try:
                if isinstance(record, str):
                    raise Malformed(record)
                parse = parse_pdf_parse(record)
            except Malformed as exc:
                # Listed with the malformed records but not counted as dropped: no document is lost.
                report.notes["malformed_pdf_parses"] += 1
                if len(report.malformed) < MAX_LISTED_MALFORMED:
                    report.malformed.append({"file": str(file), "line": line, "reason": f"pdf parse: {exc}"})
                continue
            if parse[0] in wanted:
                batch.append(parse)
            if len(batch) >= INSERT_BATCH:
                self._insert(batch)
        self._insert(batch)

    def _insert(self, batch: list[tuple[str, str, str]]) -> None:
        # The first parse of a paper wins, as a dict built in file order would.
        self.db.executemany("INSERT OR IGNORE INTO parse VALUES (?, ?, ?)", batch)
        self.db.commit()
        batch.clear()

    def get(self, paper_id: str) -> tuple[str, str] | None:
        return self.db.execute("SELECT abstract, body FROM parse WHERE paper_id = ?", (paper_id,)).fetchone()

    def close(self) -> None:
        self.db.close()
        self.path.unlink(missing_ok=True)


def _wanted_ids(file: Path, rules: Rules) -> set[str]:
    """Ids of the papers the rules keep (first pass over a metadata file, nothing counted)."""
    wanted: set[str] = set()
    for _, record in _records(file, None):
        if isinstance(record, str):
            continue
        try:
            paper = parse_paper(record)
        except Malformed:
            continue
        if paper.release_2020 and paper.fields and rules.match(paper.fields)[0]:
            wanted.add(paper.source_id)
    return wanted


def process_unit(task: UnitTask | None) -> UnitResult | None:
    """Worker entry point: parse one input file, join its batch's parses, write its shards (no cap)."""
    if task is None:
        return None
    report = IngestReport(CORPUS)
    file = Path(task.file)
    store = None
    if task.pdf_parses is not None and {"abstract", "body_text"} & set(task.text_fields):
        store = _ParseStore(Path(task.root) / "_tmp" / f"{task.unit}.sqlite")
    try:
        if store is not None:
            store.fill(Path(task.pdf_parses or ""), _wanted_ids(file, task.rules), report)
        shards = _parse_file(task, file, store, report)
    finally:
        if store is not None:
            store.close()
    return UnitResult(task.unit, report, shards)


def _parse_file(
    task: UnitTask, file: Path, store: _ParseStore | None, report: IngestReport
) -> dict[str, list[tuple[str, int, dict[str, int]]]]:
    writer = _ShardWriter(task)
    for line, record in _records(file, report):
        report.documents_read += 1
        try:
            if isinstance(record, str):
                raise Malformed(record)
            paper = parse_paper(record)
        except Malformed as exc:
            report.add_malformed(str(file), line, str(exc))
            continue
        if not paper.fields:
            report.dropped["no_field_of_study"] += 1
            continue
        orgs, several = task.rules.match(paper.fields)
        if not orgs:
            report.dropped["several_organisations" if several else "no_matching_field"] += 1
            continue
        if store is not None and paper.release_2020 and (parse := store.get(paper.source_id)) is not None:
            paper.abstract = parse[0] or paper.abstract
            paper.body_text = parse[1]
        parts = {"title": paper.title, "abstract": paper.abstract, "body_text": paper.body_text}
        text = "\n\n".join(part for name in task.text_fields if (part := parts[name]))
        if not text:
            report.dropped["no_text"] += 1
            continue
        if several:
            report.notes["several_organisations_matched"] += 1
        split = split_of(paper.source_id, task.test_fraction, task.seed)
        for org in orgs:
            writer.add(org, (f"{org}:{split}:{paper.source_id}", org, text, "", split, paper.source_id, paper.title))
    return writer.close()


# Driver (main process) ------------------------------------------------------------------


def fingerprint(
    files: Sequence[Path], pairs: Sequence[Path | None], organisations: Sequence[str], config: IngestS2orcConfig
) -> dict[str, Any]:
    """What makes earlier work reusable: the same files (path, size), pairing and parameters (not processes)."""

    def describe(path: Path | None) -> tuple[str, int] | None:
        return None if path is None else (str(path.resolve()), path.stat().st_size)

    params = {k: v for k, v in config.to_params().items() if k != "processes"}
    return {
        "corpus": CORPUS,
        # 2: later copies of a paper id are dropped per organisation; work of earlier versions is redone.
        "format": 2,
        "files": [(describe(f), describe(p)) for f, p in zip(files, pairs, strict=True)],
        "organisations": list(organisations),
        "params": params,
    }


def _unit_name(index: int, path: Path) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", path.name)
    return f"{index:05d}-{stem}"


class _SeenIds:
    """Paper ids each organisation already holds, with the unit that kept them (SQLite under the work root).

    On disk rather than in a set, so a corpus of tens of millions of papers keeps memory
    flat; rows of a unit without a marker (an interrupted run) are deleted at start, so a
    unit that is redone does not find its own ids. A missing file is rebuilt from the
    finished units' shards.
    """

    def __init__(self, path: Path, finished: dict[str, dict[str, Any]]) -> None:
        fresh = not path.is_file()
        self.db = sqlite3.connect(path)
        # WAL: a commit is one sequential append; a crash loses at most the last unit, which is redone.
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS seen (org TEXT, source_id TEXT, unit TEXT, PRIMARY KEY (org, source_id))"
            " WITHOUT ROWID"
        )
        if fresh:
            for unit, marker in finished.items():
                for org, shards in marker["shards"].items():
                    for relative in shards:
                        ids = pd.read_parquet(path.parent / relative, columns=["source_id"])["source_id"]
                        self.first(org, ids, unit)
        else:
            units = [row[0] for row in self.db.execute("SELECT DISTINCT unit FROM seen")]
            self.db.executemany("DELETE FROM seen WHERE unit = ?", [(u,) for u in units if u not in finished])
        self.db.commit()

    def first(self, org: str, ids: Sequence[str], unit: str) -> list[bool]:
        """For each id in order, whether it is the organisation's first copy (and record it).

        One lookup per ``SQL_CHUNK`` ids and one insert per call, not a statement per id.
        """
        unique = list(dict.fromkeys(ids))
        known: set[str] = set()
        for start in range(0, len(unique), SQL_CHUNK):
            chunk = unique[start : start + SQL_CHUNK]
            marks = ",".join("?" * len(chunk))
            query = f"SELECT source_id FROM seen WHERE org = ? AND source_id IN ({marks})"
            known.update(row[0] for row in self.db.execute(query, (org, *chunk)))
        new: set[str] = set()
        keep = []
        for source_id in ids:
            is_first = source_id not in known and source_id not in new
            if is_first:
                new.add(source_id)
            keep.append(is_first)
        self.db.executemany("INSERT INTO seen VALUES (?, ?, ?)", [(org, i, unit) for i in unique if i in new])
        return keep

    def commit(self) -> None:
        self.db.commit()

    def close(self) -> None:
        self.db.close()


def _apply_dedup_and_caps(
    result: UnitResult, root: Path, cap: int | None, taken: dict[str, int], seen: _SeenIds
) -> tuple[IngestReport, dict[str, list[str]]]:
    """Drop later copies of ids an organisation holds, then keep its documents up to the cap, in input order.

    Shards that lose rows are rewritten (or deleted when none is left).
    """
    report = result.report
    kept: dict[str, list[str]] = {}
    for org, shards in result.shards.items():
        for relative, rows, splits in shards:
            path = root / relative
            first = seen.first(org, list(pd.read_parquet(path, columns=["source_id"])["source_id"]), result.unit)
            unique = sum(first)
            report.dropped["duplicate_id"] += rows - unique
            room = unique if cap is None else max(0, min(unique, cap - taken[org]))
            report.dropped["over_max_documents"] += unique - room
            if room < rows:
                if room == 0:
                    path.unlink(missing_ok=True)
                    continue
                frame = pd.read_parquet(path)[first].head(room)
                write_parquet_atomic(frame.reset_index(drop=True), path)
                splits = dict(Counter(frame["split"]))
            for split, n in splits.items():
                report.keep(org, split, n)
            taken[org] += room
            kept.setdefault(org, []).append(relative)
    for reason in ("duplicate_id", "over_max_documents"):
        if not report.dropped[reason]:
            del report.dropped[reason]
    seen.commit()
    return report, kept


def _empty_files(
    names: Sequence[str], files: Sequence[Path], markers: dict[str, dict[str, Any]], pdf_parses: Sequence[Path]
) -> list[str]:
    """Input files that held no record: zero bytes, or no non-blank line and no damage (an empty gzip)."""
    empty = [
        str(path)
        for name, path in zip(names, files, strict=True)
        if markers[name]["documents_read"] == 0 and not markers[name].get("errors")
    ]
    return empty + [str(path) for path in pdf_parses if path.stat().st_size == 0]


def _unit_tasks(
    names: Sequence[str],
    files: Sequence[Path],
    pairs: Sequence[Path | None],
    work: WorkDirectory,
    work_root: Path,
    rules: Rules,
    config: IngestS2orcConfig,
) -> list[UnitTask | None]:
    """One task per input file, None for a unit an earlier run already finished (resumed, not redone)."""
    return [
        None
        if work.finished(name)
        else UnitTask(
            name,
            str(path),
            None if pair is None else str(pair),
            str(work_root),
            rules,
            tuple(config.text_fields),
            config.test_fraction,
            config.seed,
            config.shard_documents,
        )
        for name, path, pair in zip(names, files, pairs, strict=True)
    ]


def _run_units(
    names: Sequence[str],
    tasks: Sequence[UnitTask | None],
    organisations: Sequence[str],
    config: IngestS2orcConfig,
    work: WorkDirectory,
    work_root: Path,
    report: IngestReport,
) -> dict[str, dict[str, Any]]:
    """Process the units in input order (dedup and caps depend on it) and return each unit's marker."""
    to_do = sum(task is not None for task in tasks)
    processes = min(resolve_processes(config.processes), max(1, to_do))
    taken = dict.fromkeys(organisations, 0)
    markers: dict[str, dict[str, Any]] = {}
    seen = _SeenIds(work_root / "_seen_ids.sqlite", {n: m for n in names if (m := work.finished(n)) is not None})
    results = ordered_map(process_unit, tasks, processes)
    try:
        for name, result in tqdm(
            zip(names, results, strict=True), total=len(names), desc="s2orc files", unit="file", disable=len(names) < 2
        ):
            if result is None:
                marker = work.resumed(name)
                report.resumed_units += 1
                for org, splits in marker["kept"].items():
                    taken[org] = taken.get(org, 0) + sum(splits.values())
            else:
                unit_report, kept = _apply_dedup_and_caps(result, work_root, config.max_documents, taken, seen)
                marker = {**unit_report.counts(), "shards": kept}
                work.finish(name, marker)
            markers[name] = marker
            report.merge_counts(marker)
            report.units += 1
            logger.debug("%s: %d records read", name, marker["documents_read"])
    finally:
        seen.close()
    return markers


def _warn_about_input(report: IngestReport, empty: list[str]) -> None:
    """Say what was empty, duplicated, malformed or damaged; fail only when every file was empty."""
    if empty:
        logger.warning(
            "%d empty S2ORC file(s) (0 bytes or no record; a failed or unfinished download?), nothing read from: %s",
            len(empty),
            ", ".join(empty),
        )
        if report.documents_read == 0 and not report.errors:
            raise CorpusError(f"no S2ORC record in any input file: every file is empty ({empty})")
    if report.dropped["duplicate_id"]:
        logger.warning(
            "dropped %d later copies of paper ids an organisation already held (the first copy in input order is kept)",
            report.dropped["duplicate_id"],
        )
    if report.dropped["malformed"]:
        first = next((m for m in report.malformed if not m["reason"].startswith("pdf parse:")), None)
        logger.warning(
            "skipped %d malformed S2ORC records%s",
            report.dropped["malformed"],
            "" if first is None else f" (first: {first['file']} line {first['line']}, {first['reason']})",
        )
    if report.errors:
        # Also logged by the worker that met them, but a spawned worker's log does not reach the run's handlers.
        logger.warning(
            "%d damaged file(s), read up to the damage: %s",
            len(report.errors),
            "; ".join(f"{e['file']} line {e.get('line')}" for e in report.errors),
        )
    if report.notes["malformed_pdf_parses"]:
        logger.warning("%d malformed pdf_parses records ignored", report.notes["malformed_pdf_parses"])


def ingest_s2orc(
    files: Sequence[Path],
    organisations: Sequence[str],
    config: IngestS2orcConfig,
    work_root: Path,
    pdf_parses: Sequence[Path] = (),
) -> tuple[dict[str, ShardedTable], dict]:
    """Stream ``files`` (and their batches' ``pdf_parses``) into Parquet shards per organisation under ``work_root``.

    Returns each organisation's shards and the ingestion report. Units finished by an
    earlier run with the same files and parameters are not redone (their counts and
    shards are read from their markers), so an interrupted run resumes.
    """
    files, pdf_parses = [Path(p) for p in files], [Path(p) for p in pdf_parses]
    for path in [*files, *pdf_parses]:
        if not path.is_file():
            raise CorpusError(f"S2ORC file '{path}' does not exist")
    if not files:
        raise CorpusError("no S2ORC file to ingest")
    rules = Rules.compile(config.organisations, organisations, WHERE, config.multi_match)
    pairs = pair_pdf_parses(files, pdf_parses)
    work = WorkDirectory(work_root, fingerprint(files, pairs, organisations, config))
    report = IngestReport(CORPUS, sources=[str(p) for p in [*files, *pdf_parses]])

    names = [_unit_name(i, path) for i, path in enumerate(files)]
    tasks = _unit_tasks(names, files, pairs, work, work_root, rules, config)
    markers = _run_units(names, tasks, organisations, config, work, work_root, report)

    empty = _empty_files(names, files, markers, pdf_parses)
    _warn_about_input(report, empty)
    check_organisations(report, organisations, WHERE)
    done = {**report.to_dict(organisations), "empty_files_count": len(empty), "empty_files": empty}
    logger.info("s2orc: read %d records, kept %s, dropped %s", done["documents_read"], done["kept"], done["dropped"])
    tables = {
        org: ShardedTable([work_root / p for name in names for p in markers[name]["shards"].get(org, [])])
        for org in organisations
    }
    return tables, done
