"""What every streaming ingestion shares: the report, rules, splits and the resumable work folder.

Large corpora are read as a sequence of *work units* (a run of bz2 streams, a JSONL
shard). Each unit is parsed by a worker process and its documents come back to the
main process in input order, which applies per-organisation caps and writes one Parquet
shard per organisation and unit. A unit's marker is written after its shards, so an
interrupted run resumes after the last finished unit. Shards and the bounded ordered pool
are :mod:`fedtopic_pipelines.core.shards`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedtopic_pipelines.core.config import ConfigError
from fedtopic_pipelines.core.shards import ShardedTable
from fedtopic_pipelines.core.text.demo import CorpusError

logger = logging.getLogger(__name__)


SHARD_COLUMNS = ["doc_id", "organisation", "text", "label", "split", "source_id", "title"]
# Malformed records are all counted; the report lists this many with file and line.
MAX_LISTED_MALFORMED = 1000


# Report ---------------------------------------------------------------------------------


@dataclass
class IngestReport:
    """Counts of one ingestion run: read, kept per organisation and split, dropped by reason.

    ``malformed`` lists (up to ``MAX_LISTED_MALFORMED``) records that could not be read,
    each with its file and line; ``dropped['malformed']`` counts all of them.
    """

    corpus: str
    sources: list[str] = field(default_factory=list)
    documents_read: int = 0
    kept: dict[str, Counter[str]] = field(default_factory=dict)
    dropped: Counter[str] = field(default_factory=Counter)
    notes: Counter[str] = field(default_factory=Counter)
    malformed: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    resumed_units: int = 0
    units: int = 0

    def add_malformed(self, file: str, line: int | None, reason: str, **where: Any) -> None:
        self.dropped["malformed"] += 1
        if len(self.malformed) < MAX_LISTED_MALFORMED:
            self.malformed.append({"file": file, "line": line, "reason": reason, **where})

    def add_error(self, file: str, reason: str, **where: Any) -> None:
        """A file-level problem (truncated or corrupt compressed data): what was read before it is kept."""
        self.errors.append({"file": file, "reason": reason, **where})

    def keep(self, org: str, split: str, n: int = 1) -> None:
        self.kept.setdefault(org, Counter())[split] += n

    def merge_counts(self, counts: Mapping[str, Any]) -> None:
        """Add a unit's counts (as stored in its resume marker)."""
        self.documents_read += counts["documents_read"]
        self.dropped.update(counts["dropped"])
        self.notes.update(counts.get("notes", {}))
        for org, splits in counts["kept"].items():
            self.kept.setdefault(org, Counter()).update(splits)
        for record in counts["malformed"]:
            if len(self.malformed) < MAX_LISTED_MALFORMED:
                self.malformed.append(record)
        self.errors.extend(counts.get("errors", []))

    def counts(self) -> dict[str, Any]:
        """This report as a unit's marker content (the inverse of ``merge_counts``)."""
        return {
            "documents_read": self.documents_read,
            "dropped": dict(self.dropped),
            "notes": dict(self.notes),
            "kept": {org: dict(splits) for org, splits in self.kept.items()},
            "malformed": self.malformed,
            "errors": self.errors,
        }

    def to_dict(self, organisations: Sequence[str]) -> dict[str, Any]:
        kept = {org: {s: int(self.kept.get(org, Counter())[s]) for s in ("train", "test")} for org in organisations}
        return {
            "corpus": self.corpus,
            "sources": self.sources,
            "documents_read": self.documents_read,
            "kept": kept,
            "kept_total": sum(sum(v.values()) for v in kept.values()),
            "dropped": dict(sorted(self.dropped.items())),
            "notes": dict(sorted(self.notes.items())),
            "malformed_records": int(self.dropped["malformed"]),
            "malformed": self.malformed,
            "errors": self.errors,
            "units": self.units,
            "resumed_units": self.resumed_units,
        }


def check_organisations(report: IngestReport, organisations: Sequence[str], where: str) -> None:
    """An organisation that received no document stops the run, naming it and the rule parameter.

    Where an input file was damaged (``report.errors``), the damage is the first suspect, so
    the message names it before the rules.
    """
    empty = [org for org in organisations if sum(report.kept.get(org, Counter()).values()) == 0]
    if empty and report.errors:
        damage = "; ".join(f"'{e['file']}': {e['reason']}" for e in report.errors)
        raise CorpusError(
            f"organisation(s) {empty} received no document, and reading stopped early because of damaged "
            f"input: {damage}. Only the {report.documents_read} records before the damage were read; "
            f"replace the damaged file (if the rules in '{where}.organisations' are also too narrow, "
            f"dropped so far: {dict(report.dropped)})"
        )
    if empty:
        raise CorpusError(
            f"organisation(s) {empty} received no document from {report.sources}; check the rules in "
            f"'{where}.organisations' (dropped so far: {dict(report.dropped)})"
        )


# Rules ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rules:
    """Organisation -> compiled patterns; ``match`` returns the organisations a label list hits."""

    patterns: tuple[tuple[str, tuple[re.Pattern[str], ...]], ...]
    policy: str

    @classmethod
    def compile(cls, mapping: Mapping[str, Sequence[str]], organisations: Sequence[str], where: str, policy: str):
        missing = [org for org in organisations if org not in mapping]
        extra = [org for org in mapping if org not in organisations]
        if missing or extra:
            raise ConfigError(
                f"parameter '{where}.organisations' must give rules for exactly the organisations "
                f"{list(organisations)}; missing {missing}, not in 'organisations' {extra}"
            )
        compiled = []
        for org in organisations:
            regexes = []
            for rule in mapping[org]:
                try:
                    if rule.startswith("re:"):
                        regexes.append(re.compile(rule[3:], re.IGNORECASE))
                    else:
                        regexes.append(re.compile(rf"(?<!\w){re.escape(rule)}(?!\w)", re.IGNORECASE))
                except re.error as exc:
                    raise ConfigError(f"parameter '{where}.organisations.{org}': bad regex {rule!r} ({exc})") from exc
            compiled.append((org, tuple(regexes)))
        return cls(tuple(compiled), policy)

    def match(self, labels: Iterable[str]) -> tuple[list[str], bool]:
        """Organisations for these labels under the policy, and whether several matched."""
        labels = list(labels)
        hits = [org for org, regexes in self.patterns if any(r.search(lab) for r in regexes for lab in labels)]
        several = len(hits) > 1
        if several and self.policy == "first":
            hits = hits[:1]
        elif several and self.policy == "drop":
            hits = []
        return hits, several


def split_of(source_id: str, test_fraction: float, seed: int) -> str:
    """A seeded hash split: the same document lands in the same split whatever the order or worker."""
    digest = hashlib.blake2b(f"{seed}:{source_id}".encode(), digest_size=8).digest()
    return "test" if int.from_bytes(digest, "big") / 2**64 < test_fraction else "train"


# Resumable work directory ---------------------------------------------------------------


class WorkDirectory:
    """Shards and per-unit markers of one ingestion, keyed by a fingerprint of its inputs and rules.

    A marker ``_done/<unit>.json`` holds the unit's counts and shard paths and is written
    after the shards, so a unit with a marker is complete. If the fingerprint changes
    (other files or parameters), earlier work is cleared rather than mixed in.
    """

    def __init__(self, root: Path, fingerprint: Mapping[str, Any]) -> None:
        self.root = root
        self.done = root / "_done"
        key = json.dumps(fingerprint, sort_keys=True, default=str)
        stamp = root / "_fingerprint.json"
        if stamp.is_file() and stamp.read_text() != key:
            logger.warning("%s: inputs or parameters changed since the last run; starting afresh", root)
            shutil.rmtree(root)
        self.done.mkdir(parents=True, exist_ok=True)
        stamp.write_text(key)
        self._markers: dict[str, dict[str, Any]] = {}

    def finished(self, unit: str) -> dict[str, Any] | None:
        """The unit's marker if it is complete (read from disk once, then kept)."""
        if unit not in self._markers:
            marker = self.done / f"{unit}.json"
            if not marker.is_file():
                return None
            self._markers[unit] = json.loads(marker.read_text())
        return self._markers[unit]

    def resumed(self, unit: str) -> dict[str, Any]:
        """The marker of a unit that planning found finished."""
        marker = self.finished(unit)
        if marker is None:
            raise CorpusError(f"{self.root}: the marker of unit {unit} disappeared during the run")
        return marker

    def shard_path(self, org: str, unit: str) -> Path:
        return self.root / org / f"{unit}.parquet"

    def finish(self, unit: str, counts: Mapping[str, Any]) -> None:
        marker = self.done / f"{unit}.json"
        tmp = marker.with_name(f".{marker.name}.tmp")
        tmp.write_text(json.dumps(counts))
        os.replace(tmp, marker)
        self._markers[unit] = dict(counts)

    def shards(self, org: str, units: Sequence[str]) -> ShardedTable:
        """The organisation's shards in unit order (units that kept nothing for it have none)."""
        return ShardedTable([p for u in units if (p := self.shard_path(org, u)).is_file()])
