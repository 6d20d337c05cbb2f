"""Write valid MediaWiki dumps from real pages, for tests and benchmarks (never committed).

Pages come from gensim's real fragment and are repeated under fresh page ids to reach a
target size, so the text, markup and categories stay those of real Wikipedia.
"""

from __future__ import annotations

import bz2
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from fedtopic_pipelines.core.ingest.wikipedia import gensim_fragment

PAGE = re.compile(rb"  <page>.*?</page>\n", re.DOTALL)
PAGE_ID = re.compile(rb"(<ns>[^<]*</ns>\s*<id>)(\d+)(</id>)")


def fragment_parts() -> tuple[bytes, list[bytes], bytes]:
    """Header (``<mediawiki>`` + ``<siteinfo>``), the page blocks, and the closing tag of gensim's fragment."""
    data = bz2.decompress(gensim_fragment().read_bytes())
    pages = PAGE.findall(data)
    first = data.find(b"  <page>")
    return data[:first], pages, b"</mediawiki>\n"


def repeated_pages(pages: list[bytes], copies: int) -> Iterator[bytes]:
    """``copies`` passes over ``pages``, each page given a new, unique page id."""
    for copy in range(copies):
        shift = copy * 10**8
        for page in pages:
            yield PAGE_ID.sub(lambda m, s=shift: m.group(1) + str(int(m.group(2)) + s).encode() + m.group(3), page)


def write_dump(path: Path, pages: Iterable[bytes], multistream: bool = True, pages_per_stream: int = 100) -> Path:
    """A plain (one bz2 stream) or multistream dump (header stream, then ``pages_per_stream`` pages per stream)."""
    header, _, footer = fragment_parts()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        if not multistream:
            compressor = bz2.BZ2Compressor(9)
            out.write(compressor.compress(header))
            for page in pages:
                out.write(compressor.compress(page))
            out.write(compressor.compress(footer) + compressor.flush())
            return path
        out.write(bz2.compress(header))
        batch: list[bytes] = []
        for page in pages:
            batch.append(page)
            if len(batch) == pages_per_stream:
                out.write(bz2.compress(b"".join(batch)))
                batch = []
        if batch:
            out.write(bz2.compress(b"".join(batch)))
        out.write(bz2.compress(footer))
    return path
