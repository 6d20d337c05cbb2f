"""Stream MediaWiki ``pages-articles`` / ``pages-meta-current`` dumps into per-organisation Parquet shards.

How a dump is cut into work units:

* **multistream** dumps are many bz2 streams of 100 pages each. Stream starts are
  byte-aligned ``BZh<level>1AY&SY`` headers, found by scanning the compressed file (no
  index file needed); consecutive streams are grouped into units of ``unit_mib``
  compressed MiB (less in files under ``32 * unit_mib``, so that every file makes at
  least ``MIN_UNITS_PER_FILE`` units to share among the workers), and each worker
  decompresses and parses its own units. The first stream holds only the ``<siteinfo>``
  header.
* **plain** dumps are one bz2 stream, so the main process decompresses it (16 KiB of
  compressed data at a time, so that damage loses no block before it) and cuts the text
  after a ``</page>`` every ``4 * unit_mib`` MiB; workers parse the pieces. Uncompressed
  ``.xml`` dumps are cut the same way.

Each page is parsed on its own (``xml.etree``), so one page of invalid XML is a counted,
reported skip with its line number, not the end of the run. Namespace-0 pages that are
not redirects keep their categories (``[[Category:...]]``) and are matched against the
organisations' rules; the text of a matched article is stripped of wiki markup by
``wikitext.filter_wiki`` (gensim's algorithm and output, faster). Unmatched articles are
dropped and counted before stripping, which is most of the cost.
"""

from __future__ import annotations

import bz2
import fnmatch
import logging
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from fedtopic_pipelines.core.config import IngestWikipediaConfig
from fedtopic_pipelines.core.ingest.common import (
    SHARD_COLUMNS,
    IngestReport,
    Rules,
    WorkDirectory,
    check_organisations,
    split_of,
)
from fedtopic_pipelines.core.ingest.wikitext import filter_wiki
from fedtopic_pipelines.core.shards import ShardedTable, ordered_map, resolve_processes, write_parquet_atomic
from fedtopic_pipelines.core.text.demo import CorpusError

logger = logging.getLogger(__name__)

GENSIM_FRAGMENT = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
STREAM_HEADER = re.compile(rb"BZh[1-9]1AY&SY")
PAGE_OPEN = re.compile(rb"<page(?=[\s>/])")  # <page>, <page >, <page attr="...">; not <pages> or <page_x>
CATEGORY = re.compile(r"\[\[\s*Category\s*:\s*([^\]|\n]+)", re.IGNORECASE)
REDIRECT_TEXT = re.compile(r"\s*#redirect", re.IGNORECASE)
BOLD_ITALIC = re.compile(r"'{2,}")
SPACES = re.compile(r"\s+")
READ_BLOCK = 1 << 20  # compressed bytes read at a time from a plain dump
# Compressed bytes fed to the decompressor at a time: an error discards what the failing call
# decoded, so small pieces keep every bz2 block before the damage (a block is ~100-900 kB).
FEED_BYTES = 1 << 14
DUMP_NAME = re.compile(r"pages-(articles|meta-current).*\.(bz2|xml)$", re.IGNORECASE)
DUMP_NAMES_HELP = (
    "expected a name containing 'pages-articles' or 'pages-meta-current' and ending in .bz2 or .xml, any case"
)
XML_START = (b"<", b"\xef\xbb\xbf<")  # an uncompressed dump (optionally with a UTF-8 byte-order mark)
MIN_UNITS_PER_FILE = 32  # work units per dump file at least (see unit_size), for load balance


def gensim_fragment() -> Path:
    """The real Wikipedia dump fragment in gensim's wheel (206 pages: 106 articles, 100 redirects)."""
    from gensim.test.utils import datapath  # deferred: gensim is a heavy import

    return Path(datapath(GENSIM_FRAGMENT))


def is_dump_name(name: str, pattern: str) -> bool:
    """A dump we read: ``pattern`` or a MediaWiki dump name (``DUMP_NAME``), in any letter case."""
    return fnmatch.fnmatch(name.lower(), pattern.lower()) or DUMP_NAME.search(name) is not None


def find_dumps(directory: Path, pattern: str, fallback: bool) -> list[Path]:
    """Dump files under ``directory`` (multistream index files excluded), or gensim's fragment.

    gensim's fragment replaces the input only when the folder holds no file at all: a
    file that is not recognised as a dump stops the run, naming it, rather than being
    silently replaced by demo data. Recognised files beside others are read, and the
    others are named in a warning.
    """
    present = (
        sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))
        if directory.is_dir()
        else []
    )
    files = [p for p in present if "-index" not in p.name.lower() and is_dump_name(p.name, pattern)]
    others = [p.name for p in present if "-index" not in p.name.lower() and p not in files]
    if files:
        if others:
            logger.warning("%s: ignoring %s (not Wikipedia dump names; %s)", directory, others, DUMP_NAMES_HELP)
        return files
    if others:
        raise CorpusError(
            f"'{directory}' holds {others} but no file recognised as a Wikipedia dump ({DUMP_NAMES_HELP}); "
            "rename the dump, or empty the folder to use gensim's bundled fragment"
        )
    if fallback:
        logger.info("no dump in %s: using gensim's Wikipedia fragment", directory)
        return [gensim_fragment()]
    raise CorpusError(f"no Wikipedia dump matching {pattern!r} in '{directory}' ({DUMP_NAMES_HELP})")


def stream_starts(path: Path) -> list[int]:
    """Byte offsets of the bz2 streams in a file (one for a plain dump, many for multistream)."""
    starts: list[int] = []
    overlap = 9
    with path.open("rb") as handle:
        offset, tail = 0, b""
        while chunk := handle.read(1 << 26):
            data = tail + chunk
            base = offset - len(tail)
            starts.extend(base + m.start() for m in STREAM_HEADER.finditer(data))
            tail = data[-overlap:]  # shorter than a header: a header is never found twice
            offset += len(chunk)
    if not starts or starts[0] != 0:
        raise CorpusError(f"'{path}' is not a bz2 file (no bz2 stream header at byte 0)")
    return starts


# Parsing one unit (in a worker) ---------------------------------------------------------


WIKIPEDIA_COLUMNS = [*SHARD_COLUMNS, "categories"]


@dataclass
class Article:
    source_id: str
    title: str
    text: str
    organisations: list[str]
    categories: list[str]


@dataclass
class UnitResult:
    """What a worker sends back: matched articles, counts, and line numbers relative to the unit."""

    unit: str
    articles: list[Article] = field(default_factory=list)
    report: IngestReport = field(default_factory=lambda: IngestReport("wikipedia"))
    lines: int = 0


@dataclass(frozen=True)
class UnitTask:
    unit: str
    file: str
    rules: Rules
    start: int = 0  # byte range of a multistream unit
    end: int = 0
    text: bytes | None = None  # decompressed piece of a plain dump


def decompress_range(path: str, start: int, end: int) -> tuple[bytes, str | None, int]:
    """Decompress the bz2 streams in ``[start, end)``; on corrupt or truncated data, what came before.

    Also returns the byte offset of the stream where reading stopped (``end`` if none did).
    """
    with open(path, "rb") as handle:
        handle.seek(start)
        data = handle.read(end - start)
    out: list[bytes] = []
    position = start
    while data:
        decompressor = bz2.BZ2Decompressor()
        try:
            out.append(decompressor.decompress(data))
        except OSError as exc:
            return b"".join(out), f"corrupt bz2 data ({exc}) in the bz2 stream at compressed byte {position}", position
        if not decompressor.eof:
            reason = f"truncated bz2 stream at compressed byte {position}: the file ends before its end marker"
            return b"".join(out), reason, position
        position = end - len(decompressor.unused_data)
        data = decompressor.unused_data
    return b"".join(out), None, end


def parse_page(block: bytes, rules: Rules, report: IngestReport, file: str, line: int) -> Article | None:
    """One ``<page>`` element -> an article for some organisations, or a counted drop."""
    try:
        page = ET.fromstring(block)
    except ET.ParseError as exc:
        report.add_malformed(file, line, f"invalid XML in <page> ({exc})")
        return None
    title = page.findtext("title") or ""
    text = page.findtext("revision/text") or ""
    if page.find("redirect") is not None or REDIRECT_TEXT.match(text):
        report.dropped["redirect"] += 1
        return None
    if page.findtext("ns", "0").strip() != "0":
        report.dropped["namespace"] += 1
        return None
    categories = [c.strip().replace("_", " ") for c in CATEGORY.findall(text)]
    orgs, several = rules.match(categories)
    if several and orgs:
        report.notes["several_organisations_matched"] += 1
    if not orgs:
        report.dropped["several_organisations" if several else "no_matching_category"] += 1
        return None
    clean = SPACES.sub(" ", BOLD_ITALIC.sub("", filter_wiki(text))).strip()
    if not clean:
        report.dropped["empty_after_cleaning"] += 1
        return None
    page_id = (page.findtext("id") or "").strip() or f"line{line}"
    return Article(page_id, title, clean, orgs, categories)


def split_pages(text: bytes, rules: Rules, file: str, result: UnitResult) -> None:
    """Parse every ``<page>...</page>`` in ``text``: each page-opening tag is read once.

    An opening tag with attributes or spaces (``<page >``) opens a page too. A page
    still open when the next page opens, or at the end of the data, is malformed (it
    never swallows the next page).
    """
    position, line = 0, 1
    opening = PAGE_OPEN.search(text, position)
    while opening is not None:
        begin = opening.start()
        line += text.count(b"\n", position, begin)
        result.report.documents_read += 1
        end = text.find(b"</page>", opening.end())
        following = PAGE_OPEN.search(text, opening.end())
        if following is not None and (end < 0 or following.start() < end):
            result.report.add_malformed(file, line, "<page> not closed before the next <page>")
            line += text.count(b"\n", begin, following.start())
            position, opening = following.start(), following
            continue
        if end < 0:
            result.report.add_malformed(file, line, "<page> not closed before the end of the data")
            position = len(text)
            break
        end += len(b"</page>")
        article = parse_page(text[begin:end], rules, result.report, file, line)
        if article is not None:
            result.articles.append(article)
        line += text.count(b"\n", begin, end)
        position = end
        opening = following
    result.lines = line - 1 + text.count(b"\n", position)


def process_unit(task: UnitTask | None) -> UnitResult | None:
    """Worker entry point: decompress (multistream) or take (plain) the unit's text, parse its pages."""
    if task is None:
        return None
    result = UnitResult(task.unit)
    if task.text is None:
        text, error, stopped = decompress_range(task.file, task.start, task.end)
        if error:
            result.report.add_error(task.file, error, unit=task.unit, byte_offset=stopped)
    else:
        text = task.text
    split_pages(text, task.rules, task.file, result)
    return result


# Planning units (main process) ----------------------------------------------------------


@dataclass(frozen=True)
class PlannedUnit:
    unit: str
    task: UnitTask | None  # None: already finished in an earlier run
    file: str


def plan_multistream(index: int, path: Path, starts: list[int], unit_bytes: int, rules: Rules, work: WorkDirectory):
    size = path.stat().st_size
    bounds = [*starts, size]
    groups: list[tuple[int, int]] = []
    begin = bounds[0]
    for here in bounds[1:]:
        if here - begin >= unit_bytes or here == size:
            groups.append((begin, here))
            begin = here
    for k, (start, end) in enumerate(groups):
        unit = f"{index:03d}-{k:06d}"
        task = None if work.finished(unit) else UnitTask(unit, str(path), rules, start, end)
        yield PlannedUnit(unit, task, str(path))


def decompressed_blocks(path: Path, report: IngestReport) -> Iterator[bytes]:
    """Decompressed data of a single-stream file, block by block; damage is reported, data before it kept.

    The compressed bytes are fed ``FEED_BYTES`` at a time: a decompressor error discards
    what the failing call decoded, so feeding a whole ``READ_BLOCK`` would lose every bz2
    block in it. The error records the compressed byte range where the damage was found.
    (``BZ2File.read`` would drop the data decoded inside the call that hits the damage.)
    """
    decompressor = bz2.BZ2Decompressor()
    offset = 0
    with path.open("rb") as handle:
        while chunk := handle.read(READ_BLOCK):
            view = memoryview(chunk)
            for at in range(0, len(chunk), FEED_BYTES):
                piece = view[at : at + FEED_BYTES]
                try:
                    out = decompressor.decompress(piece)
                except OSError as exc:
                    start = offset + at
                    report.add_error(
                        str(path),
                        f"corrupt bz2 data ({exc}) found in compressed bytes {start}-{start + len(piece)}",
                        byte_offset=start,
                    )
                    return
                if out:
                    yield out
                if decompressor.eof:
                    return
            offset += len(chunk)
    report.add_error(
        str(path), "truncated bz2 stream: the file ends before the end-of-stream marker", byte_offset=offset
    )


def plain_blocks(path: Path) -> Iterator[bytes]:
    """An uncompressed XML dump, ``READ_BLOCK`` bytes at a time."""
    with path.open("rb") as handle:
        while chunk := handle.read(READ_BLOCK):
            yield chunk


def plan_plain(index: int, path: Path, piece_bytes: int, rules: Rules, work: WorkDirectory, source: Iterator[bytes]):
    """Cut a single-stream dump's text (``source``) after a ``</page>`` every ``piece_bytes`` bytes."""
    k, blocks, size = 0, [], 0
    for block in _with_end(source):
        at_end = not block
        blocks.append(block)
        size += len(block)
        if not at_end and size < piece_bytes:
            continue
        buffer = b"".join(blocks)
        cut = len(buffer) if at_end else buffer.rfind(b"</page>") + len(b"</page>")
        if not at_end and cut < len(b"</page>"):  # no page ends in this buffer yet
            blocks, size = [buffer], len(buffer)
            continue
        piece, rest = buffer[:cut], buffer[cut:]
        blocks, size = [rest], len(rest)
        if piece.strip():
            unit = f"{index:03d}-{k:06d}"
            task = None if work.finished(unit) else UnitTask(unit, str(path), rules, text=piece)
            yield PlannedUnit(unit, task, str(path))
            k += 1


def _with_end(blocks: Iterator[bytes]) -> Iterator[bytes]:
    yield from blocks
    yield b""


def unit_size(compressed_bytes: int, unit_mib: float) -> int:
    """Compressed bytes per work unit: ``unit_mib``, or less so that a file makes ``MIN_UNITS_PER_FILE``.

    Derived from the file and the parameters only (not from ``processes``), so a resumed run
    cuts the same units; small dumps still spread over the cores.
    """
    return max(1, min(int(unit_mib * (1 << 20)), compressed_bytes // MIN_UNITS_PER_FILE))


def plan_units(files: Sequence[Path], rules: Rules, config: IngestWikipediaConfig, work: WorkDirectory, report):
    for index, path in enumerate(tqdm(files, desc="dump files", unit="file", disable=len(files) < 2)):
        unit_bytes = unit_size(path.stat().st_size, config.unit_mib)
        if path.suffix.lower() == ".xml":
            with path.open("rb") as handle:
                if not handle.read(64).lstrip().startswith(XML_START):
                    raise CorpusError(f"'{path}' is named .xml but does not start with an XML tag")
            logger.info("%s: uncompressed XML, read in the main process", path.name)
            yield from plan_plain(index, path, 4 * unit_bytes, rules, work, plain_blocks(path))
            continue
        starts = stream_starts(path)
        if len(starts) > 1:
            logger.info("%s: multistream, %d bz2 streams", path.name, len(starts))
            yield from plan_multistream(index, path, starts, unit_bytes, rules, work)
        else:
            logger.info("%s: single bz2 stream, decompressed in the main process", path.name)
            yield from plan_plain(index, path, 4 * unit_bytes, rules, work, decompressed_blocks(path, report))


# Driver ---------------------------------------------------------------------------------


def fingerprint(files: Sequence[Path], organisations: Sequence[str], config: IngestWikipediaConfig) -> dict:
    """What makes earlier work reusable: the same files (resolved path, size) and parameters (not processes)."""
    params = {k: v for k, v in config.to_params().items() if k != "processes"}
    return {
        "files": [(str(p.resolve()), p.stat().st_size) for p in files],
        "organisations": list(organisations),
        "params": params,
    }


def ingest_wikipedia(
    files: Sequence[Path], organisations: Sequence[str], config: IngestWikipediaConfig, work_root: Path
) -> tuple[dict[str, ShardedTable], dict]:
    """Stream ``files`` into one Parquet shard per organisation and work unit under ``work_root``.

    Returns each organisation's shards and the ingestion report. Units finished by an
    earlier run with the same files and parameters are not redone (their counts are
    read from their markers), so an interrupted run resumes.
    """
    for path in files:
        if not path.is_file():
            raise CorpusError(f"Wikipedia dump '{path}' does not exist")
    rules = Rules.compile(config.organisations, organisations, "ingest_wikipedia", config.multi_match)
    work = WorkDirectory(work_root, fingerprint(files, organisations, config))
    report = IngestReport("wikipedia", sources=[str(p) for p in files])
    kept_total = dict.fromkeys(organisations, 0)
    units: list[str] = []
    line_offset: dict[str, int] = {}
    planned = plan_units(files, rules, config, work, report)
    progress = tqdm(desc="wikipedia pages", unit="page")
    for unit, file, result in ordered_map(_run, planned, resolve_processes(config.processes)):
        if result is None:
            marker = work.resumed(unit)
            report.resumed_units += 1
        else:
            counts = _write_unit(result, organisations, config, work, kept_total, line_offset.get(file, 0))
            marker = {"counts": counts, "lines": result.lines}
            work.finish(unit, marker)
        counts = marker["counts"]
        for org, splits in counts["kept"].items():
            kept_total[org] += sum(splits.values())
        line_offset[file] = line_offset.get(file, 0) + marker["lines"]
        units.append(unit)
        report.merge_counts(counts)
        report.units += 1
        progress.update(counts["documents_read"])
        progress.set_postfix(kept=sum(kept_total.values()), refresh=False)
    progress.close()
    for error in report.errors:
        logger.error("%s: %s (pages read before it are kept)", error["file"], error["reason"])
    check_organisations(report, organisations, "ingest_wikipedia")
    if report.dropped["malformed"]:
        first = report.malformed[0]
        logger.warning(
            "skipped %d malformed pages (first: %s line %s, %s)",
            report.dropped["malformed"],
            first["file"],
            first["line"],
            first["reason"],
        )
    done = report.to_dict(organisations)
    logger.info("wikipedia: read %d pages, kept %s, dropped %s", done["documents_read"], done["kept"], done["dropped"])
    return {org: work.shards(org, units) for org in organisations}, done


def _run(item: PlannedUnit) -> tuple[str, str, UnitResult | None]:
    return item.unit, item.file, process_unit(item.task)


def _write_unit(
    result: UnitResult,
    organisations: Sequence[str],
    config: IngestWikipediaConfig,
    work: WorkDirectory,
    kept_total: dict[str, int],
    line_offset: int,
) -> dict:
    """Apply the caps in input order, write the unit's shards, return its counts (lines made absolute)."""
    report = result.report
    for record in report.malformed:
        if record.get("line") is not None:
            record["line"] += line_offset
    rows: dict[str, list[dict]] = {org: [] for org in organisations}
    for article in result.articles:
        split = split_of(article.source_id, config.test_fraction, config.seed)
        for org in article.organisations:
            if config.max_articles is not None and kept_total[org] + len(rows[org]) >= config.max_articles:
                report.dropped["over_max_articles"] += 1
                continue
            rows[org].append(
                {
                    "doc_id": f"{org}:{split}:{article.source_id}",
                    "organisation": org,
                    "text": article.text,
                    "label": "",
                    "split": split,
                    "source_id": article.source_id,
                    "title": article.title,
                    "categories": " | ".join(article.categories),
                }
            )
            report.keep(org, split)
    for org, org_rows in rows.items():
        if org_rows:
            write_parquet_atomic(pd.DataFrame(org_rows, columns=WIKIPEDIA_COLUMNS), work.shard_path(org, result.unit))
    return report.counts()
