"""Wikipedia ingestion on the real fragment in gensim's wheel and on dumps the tests write."""

from __future__ import annotations

import bz2
import re
from pathlib import Path

import pandas as pd
import pytest

from bench.dumpgen import fragment_parts, repeated_pages, write_dump
from fedtopic_pipelines.core.config import ConfigError, IngestWikipediaConfig, from_mapping
from fedtopic_pipelines.core.ingest.wikipedia import (
    MIN_UNITS_PER_FILE,
    find_dumps,
    gensim_fragment,
    ingest_wikipedia,
    stream_starts,
    unit_size,
)
from fedtopic_pipelines.core.text.demo import CorpusError

ORGS = ["countries", "people", "science"]
RULES = {
    "countries": ["countries", "states"],
    "people": ["re:(births|deaths|people|philosophers|writers)$"],
    "science": ["science", "physics", "chemistry", "biology", "mathematics", "astronomy"],
}


def config(**changes) -> IngestWikipediaConfig:
    return IngestWikipediaConfig(**{"organisations": RULES, "processes": 1, "unit_mib": 0.05, **changes})


def frames(shards) -> dict[str, pd.DataFrame]:
    return {org: table.to_frame() for org, table in shards.items()}


def page(page_id: int, title: str, text: str, ns: int = 0) -> bytes:
    return (
        f"  <page>\n    <title>{title}</title>\n    <ns>{ns}</ns>\n    <id>{page_id}</id>\n"
        f'    <revision>\n      <id>1</id>\n      <text xml:space="preserve">{text}</text>\n    </revision>\n'
        "  </page>\n"
    ).encode()


def article(page_id: int, category: str) -> bytes:
    return page(page_id, f"Article {page_id}", f"Body of article {page_id} about atoms.\n[[Category:{category}]]")


@pytest.fixture(scope="module")
def fragment_all(tmp_path_factory) -> tuple[dict, dict]:
    """Every namespace-0 article of the fragment, kept by a catch-all rule."""
    cfg = IngestWikipediaConfig(organisations={"everything": ["re:."], "none": ["re:^$"]}, processes=1)
    work = tmp_path_factory.mktemp("work")
    try:
        ingest_wikipedia([gensim_fragment()], ["everything", "none"], cfg, work)
    except CorpusError as exc:  # 'none' stays empty by design: the error names it
        assert "['none']" in str(exc)
    cfg = IngestWikipediaConfig(organisations={"everything": ["re:."]}, processes=1)
    shards, report = ingest_wikipedia([gensim_fragment()], ["everything"], cfg, tmp_path_factory.mktemp("work2"))
    return frames(shards), report


def test_gensim_fragment_counts_titles_and_categories(fragment_all) -> None:
    tables, report = fragment_all
    assert report["documents_read"] == 206
    assert report["dropped"] == {"redirect": 100, "no_matching_category": 0} or report["dropped"]["redirect"] == 100
    # 106 pages are not redirects; all are namespace 0 here, and every one has a category
    assert len(tables["everything"]) + report["dropped"].get("no_matching_category", 0) == 106
    table = tables["everything"].set_index("title")
    for title in ("Anarchism", "Autism", "Albedo", "Alabama"):
        assert title in table.index
    assert "Member states of the United Nations" in table.loc["Afghanistan", "categories"]
    assert "Political culture" in table.loc["Anarchism", "categories"]
    assert "[[" not in table.loc["Anarchism", "text"] and "anarchism" in table.loc["Anarchism", "text"].lower()
    assert set(tables["everything"]["split"]) == {"train", "test"}
    assert tables["everything"]["doc_id"].is_unique


def test_default_rules_run_on_the_fragment(tmp_path) -> None:
    import yaml

    params = yaml.safe_load(Path("conf/base/parameters_ingest_wikipedia.yml").read_text())["ingest_wikipedia"]
    cfg = IngestWikipediaConfig(**{**params, "processes": 1})
    shards, report = ingest_wikipedia([gensim_fragment()], list(params["organisations"]), cfg, tmp_path)
    assert report["documents_read"] == 206 and report["dropped"]["redirect"] == 100
    assert all(sum(report["kept"][org].values()) > 0 for org in params["organisations"])
    assert all(len(t) == sum(report["kept"][org].values()) for org, t in shards.items())


def test_small_dumps_are_still_cut_into_several_units(tmp_path) -> None:
    """``unit_mib`` (8 by default) caps a unit; a dump smaller than 32 units of it is cut finer, for balance."""
    mib = 1 << 20
    assert unit_size(10_000 * mib, 8) == 8 * mib
    assert unit_size(64 * mib, 8) == 64 * mib // MIN_UNITS_PER_FILE
    assert unit_size(10, 8) == 1
    _, pages, _ = fragment_parts()
    multi = write_dump(tmp_path / "multi-pages-articles.xml.bz2", repeated_pages(pages, 2))
    plain = write_dump(tmp_path / "plain-pages-articles.xml.bz2", repeated_pages(pages, 2), multistream=False)
    default = IngestWikipediaConfig(organisations=RULES, processes=1)
    assert default.unit_mib == 8 and multi.stat().st_size < 8 * mib
    _, multi_report = ingest_wikipedia([multi], ORGS, default, tmp_path / "w1")
    _, plain_report = ingest_wikipedia([plain], ORGS, default, tmp_path / "w2")
    # every page stream is over size / 32: one unit each (the tiny <siteinfo> stream joins the first)
    assert multi_report["units"] == len(stream_starts(multi)) - 1
    assert plain_report["units"] > 4
    assert plain_report["kept"] == multi_report["kept"]


def test_multistream_plain_and_two_processes_agree(tmp_path) -> None:
    _, pages, _ = fragment_parts()
    multi = write_dump(tmp_path / "multi-pages-articles.xml.bz2", repeated_pages(pages, 2))
    plain = write_dump(tmp_path / "plain-pages-articles.xml.bz2", repeated_pages(pages, 2), multistream=False)
    assert len(stream_starts(multi)) == 2 + 5  # header, 412 pages in streams of 100, footer
    assert stream_starts(plain) == [0]
    runs = [
        ingest_wikipedia([multi], ORGS, config(), tmp_path / "w1"),
        ingest_wikipedia([plain], ORGS, config(unit_mib=0.5), tmp_path / "w2"),
        ingest_wikipedia([multi], ORGS, config(processes=2), tmp_path / "w3"),
    ]
    reference = frames(runs[0][0])
    assert runs[0][1]["documents_read"] == 412 and runs[0][1]["units"] > 1
    for shards, report in runs[1:]:
        for key in ("documents_read", "kept", "dropped", "notes"):
            assert report[key] == runs[0][1][key]
        for org, table in frames(shards).items():
            pd.testing.assert_frame_equal(table, reference[org])


def test_policies_and_cap(tmp_path) -> None:
    pages = [article(1, "Physics of countries"), article(2, "Physics"), article(3, "Countries in Europe")]
    pages += [article(i, "Physics") for i in range(4, 10)]
    dump = write_dump(tmp_path / "x-pages-articles.xml.bz2", pages)
    orgs, rules = ["countries", "science"], {"countries": ["countries"], "science": ["physics"]}
    runs = {}
    for policy in ("first", "all", "drop"):
        cfg = config(organisations=rules, multi_match=policy)
        runs[policy] = ingest_wikipedia([dump], orgs, cfg, tmp_path / policy)
    kept = {p: {o: sum(v.values()) for o, v in r[1]["kept"].items()} for p, r in runs.items()}
    assert kept["first"] == {"countries": 2, "science": 7}
    assert kept["all"] == {"countries": 2, "science": 8}
    assert kept["drop"] == {"countries": 1, "science": 7}
    assert runs["drop"][1]["dropped"]["several_organisations"] == 1
    capped = ingest_wikipedia([dump], orgs, config(organisations=rules, max_articles=3), tmp_path / "cap")
    assert {o: sum(v.values()) for o, v in capped[1]["kept"].items()} == {"countries": 2, "science": 3}
    assert capped[1]["dropped"]["over_max_articles"] == 5
    assert capped[0]["science"].to_frame()["source_id"].tolist() == ["1", "2", "4"]  # the first three, in dump order


def test_invalid_xml_and_non_utf8_pages_are_counted_with_their_line(tmp_path) -> None:
    good = [article(i, "Physics") for i in range(1, 5)]
    broken = page(50, "Broken", "text with <unclosed tag")
    latin1 = page(51, "Caf\xe9", "caf\xe9 [[Category:Physics]]").replace(
        "Caf\xe9".encode(), "Caf\xe9".encode("latin-1")
    )
    pages = [good[0], broken, good[1], latin1, *good[2:]]
    for multistream in (True, False):
        dump = write_dump(tmp_path / f"m{multistream}-pages-articles.xml.bz2", pages, multistream=multistream)
        _, report = ingest_wikipedia(
            [dump], ["science"], config(organisations={"science": ["physics"]}), tmp_path / f"w{multistream}"
        )
        assert report["documents_read"] == 6
        assert report["malformed_records"] == 2
        assert sum(report["kept"]["science"].values()) == 4
        text = bz2.decompress(dump.read_bytes()).decode("utf-8", errors="replace").splitlines()
        for record in report["malformed"]:
            assert record["file"] == str(dump)
            assert text[record["line"] - 1].strip() == "<page>"
            assert "invalid XML" in record["reason"]
        lines = [r["line"] for r in report["malformed"]]
        assert text[lines[0]].strip() == "<title>Broken</title>"


def test_truncated_and_corrupt_dumps_keep_what_was_read(tmp_path, caplog) -> None:
    # long pages: a plain dump decompresses in 900 kB bz2 blocks, so only several blocks leave a readable part
    pages = [page(i, f"A{i}", f"{i} atoms " * 800 + "[[Category:Physics]]") for i in range(1, 401)]
    for multistream in (True, False):
        dump = write_dump(tmp_path / f"t{multistream}-pages-articles.xml.bz2", pages, multistream=multistream)
        data = dump.read_bytes()
        truncated = tmp_path / f"trunc{multistream}-pages-articles.xml.bz2"
        truncated.write_bytes(data[: len(data) * 2 // 3])
        shards, report = ingest_wikipedia(
            [truncated, dump], ["science"], config(organisations={"science": ["physics"]}), tmp_path / f"w{multistream}"
        )
        assert len(report["errors"]) == 1
        assert report["errors"][0]["file"] == str(truncated) and "truncated" in report["errors"][0]["reason"]
        assert f"{truncated}: truncated bz2 stream" in caplog.text  # logged too, plain or multistream
        caplog.clear()
        assert 0 < report["documents_read"] - 400 < 400  # part of the truncated file, then all of the good one
        assert len(shards["science"].to_frame()) == sum(report["kept"]["science"].values())
    dump = write_dump(tmp_path / "c-pages-articles.xml.bz2", pages)
    data = bytearray(dump.read_bytes())
    starts = stream_starts(dump)
    middle = starts[2] + 200  # inside the second stream of pages
    data[middle : middle + 50] = b"\x00" * 50
    corrupt = tmp_path / "corrupt-pages-articles.xml.bz2"
    corrupt.write_bytes(bytes(data))
    _, report = ingest_wikipedia(
        [corrupt], ["science"], config(organisations={"science": ["physics"]}), tmp_path / "wc"
    )
    assert len(report["errors"]) == 1 and "corrupt" in report["errors"][0]["reason"]
    assert 100 <= report["documents_read"] < 400


def test_organisation_left_empty_is_named(tmp_path) -> None:
    dump = write_dump(tmp_path / "e-pages-articles.xml.bz2", [article(1, "Physics")])
    cfg = config(organisations={"science": ["physics"], "sports": ["football"]})
    with pytest.raises(CorpusError, match=r"\['sports'\].*ingest_wikipedia.organisations"):
        ingest_wikipedia([dump], ["science", "sports"], cfg, tmp_path / "w")


def test_rules_must_name_exactly_the_organisations(tmp_path) -> None:
    with pytest.raises(ConfigError, match="missing \\['sports'\\]"):
        ingest_wikipedia([gensim_fragment()], ["science", "sports"], config(organisations={"science": ["x"]}), tmp_path)
    with pytest.raises(ConfigError, match="bad regex"):
        ingest_wikipedia([gensim_fragment()], ["science"], config(organisations={"science": ["re:("]}), tmp_path)
    with pytest.raises(ConfigError, match="ingest_wikipedia.multi_match"):
        from_mapping(IngestWikipediaConfig, {"organisations": RULES, "multi_match": "some"}, "ingest_wikipedia")


def test_interrupted_run_resumes_without_redoing_finished_units(tmp_path) -> None:
    _, pages, _ = fragment_parts()
    dump = write_dump(tmp_path / "r-pages-articles.xml.bz2", repeated_pages(pages, 2))
    work = tmp_path / "work"
    full_shards, full = ingest_wikipedia([dump], ORGS, config(), tmp_path / "reference")
    ingest_wikipedia([dump], ORGS, config(), work)
    markers = sorted((work / "_done").glob("*.json"))
    assert len(markers) == full["units"] > 2
    # a run killed during the last two units: their markers (written last) are missing, shards may be partial
    for marker in markers[-2:]:
        marker.unlink()
    finished = {p: p.stat().st_mtime_ns for p in work.glob("*/*.parquet")}
    shards, report = ingest_wikipedia([dump], ORGS, config(), work)
    assert report["resumed_units"] == full["units"] - 2
    for key in ("documents_read", "kept", "dropped", "notes", "units"):
        assert report[key] == full[key]
    assert frames(shards).keys() == frames(full_shards).keys()
    for org, table in frames(shards).items():
        pd.testing.assert_frame_equal(table, frames(full_shards)[org])
    untouched = [p for p in finished if p.stem not in {m.stem for m in markers[-2:]}]
    assert untouched and all(p.stat().st_mtime_ns == finished[p] for p in untouched)
    # other parameters: earlier work is not mixed in
    _, again = ingest_wikipedia([dump], ORGS, config(seed=7), work)
    assert again["resumed_units"] == 0


def test_find_dumps_falls_back_to_gensim_only_when_asked(tmp_path) -> None:
    assert find_dumps(tmp_path, "*pages-articles*.bz2", fallback=True) == [gensim_fragment()]
    with pytest.raises(CorpusError, match="no Wikipedia dump"):
        find_dumps(tmp_path, "*pages-articles*.bz2", fallback=False)
    (tmp_path / "enwiki-pages-articles-multistream-index.txt.bz2").write_bytes(b"x")
    mine = write_dump(tmp_path / "enwiki-pages-articles-multistream.xml.bz2", [article(1, "Physics")])
    assert find_dumps(tmp_path, "*pages-articles*.bz2", fallback=True) == [mine]
    not_bz2 = tmp_path / "x-pages-articles.xml.bz2"
    not_bz2.write_bytes(b"<mediawiki>")
    with pytest.raises(CorpusError, match="not a bz2 file"):
        ingest_wikipedia([not_bz2], ["science"], config(organisations={"science": ["x"]}), tmp_path / "w")


def wordy_pages(n: int, words: int = 450) -> list[bytes]:
    """Pages of seeded random words: they compress like prose, so a plain dump holds several bz2 blocks."""
    import random

    rng = random.Random(0)
    vocab = [f"w{k}" for k in range(3000)]
    return [page(i, f"A{i}", " ".join(rng.choices(vocab, k=words)) + " [[Category:Physics]]") for i in range(1, n + 1)]


def test_corrupt_bytes_in_a_plain_dump_keep_every_page_before_them(tmp_path) -> None:
    """Probe: damage inside the first 1 MiB of compressed data used to lose every page decoded with it."""
    pages = wordy_pages(750)
    dump = write_dump(tmp_path / "p-pages-articles.xml.bz2", pages, multistream=False)
    data = bytearray(dump.read_bytes())
    assert len(data) < 1 << 20 and len(bz2.decompress(bytes(data))) > 2 * 900_000  # one read, three bz2 blocks
    damage = len(data) * 9 // 10  # in the last bz2 block
    data[damage : damage + 64] = b"\x00" * 64
    corrupt = tmp_path / "corrupt-pages-articles.xml.bz2"
    corrupt.write_bytes(bytes(data))
    shards, report = ingest_wikipedia(
        [corrupt], ["science"], config(organisations={"science": ["physics"]}), tmp_path / "w"
    )
    kept = shards["science"].to_frame()["source_id"].astype(int).tolist()
    assert len(kept) > 300 and sorted(kept) == list(range(1, len(kept) + 1))  # every page of the good blocks
    # the page cut by the damage is the only one not kept: malformed, "not closed before the end of the data"
    assert report["documents_read"] == len(kept) + report["malformed_records"] and report["malformed_records"] <= 1
    [error] = report["errors"]
    assert error["file"] == str(corrupt) and error["reason"].startswith("corrupt bz2 data")
    assert error["byte_offset"] <= len(data) and error["byte_offset"] + (1 << 14) > damage  # found at or after it
    assert f"compressed bytes {error['byte_offset']}-" in error["reason"]


def test_organisations_emptied_by_a_corrupt_dump_blame_the_file(tmp_path) -> None:
    dump = write_dump(tmp_path / "p-pages-articles.xml.bz2", wordy_pages(200), multistream=False)
    data = bytearray(dump.read_bytes())
    data[200:264] = b"\x00" * 64  # in the first bz2 block: nothing can be read
    corrupt = tmp_path / "corrupt-pages-articles.xml.bz2"
    corrupt.write_bytes(bytes(data))
    with pytest.raises(CorpusError, match=r"\['science'\] received no document.*because of damaged input") as info:
        ingest_wikipedia([corrupt], ["science"], config(organisations={"science": ["physics"]}), tmp_path / "w")
    assert f"'{corrupt}': corrupt bz2 data" in str(info.value)


def test_every_page_opening_tag_is_counted(tmp_path) -> None:
    """Probe: ``<page >`` was not counted and an unclosed ``<page>`` swallowed the next page, uncounted."""
    pages = [article(i, "Physics") for i in range(1, 11)]
    pages[2] = pages[2].replace(b"<page>", b"<page >")
    pages[4] = pages[4].replace(b"<page>", b'<page xml:lang="en">')
    pages[6] = pages[6].replace(b"  </page>\n", b"")  # never closed: page 8 follows
    for multistream in (True, False):
        dump = write_dump(tmp_path / f"m{multistream}-pages-articles.xml.bz2", pages, multistream=multistream)
        shards, report = ingest_wikipedia(
            [dump], ["science"], config(organisations={"science": ["physics"]}), tmp_path / f"w{multistream}"
        )
        text = bz2.decompress(dump.read_bytes())
        assert report["documents_read"] == len(re.findall(rb"<page[\s>]", text)) == 10
        kept = sum(report["kept"]["science"].values())
        assert report["documents_read"] == kept + sum(report["dropped"].values())
        assert report["malformed_records"] == 1 and kept == 9
        assert sorted(shards["science"].to_frame()["source_id"].astype(int)) == [1, 2, 3, 4, 5, 6, 8, 9, 10]
        [record] = report["malformed"]
        lines = text.decode().splitlines()
        assert "not closed before the next <page>" in record["reason"]
        assert lines[record["line"]].strip() == "<title>Article 7</title>"


def test_dump_names_other_than_the_pattern_are_read_not_replaced(tmp_path, caplog) -> None:
    """Probe: ``pages-meta-current`` or ``.BZ2`` dumps were ignored and gensim's fragment ingested instead."""
    folder = tmp_path / "in"
    meta = write_dump(folder / "enwiki-20240101-pages-meta-current1.xml.bz2", [article(1, "Physics")])
    upper = write_dump(folder / "ENWIKI-PAGES-ARTICLES.XML.BZ2", [article(2, "Physics")], multistream=False)
    header, _, footer = fragment_parts()
    xml = folder / "small-pages-articles.xml"
    xml.write_bytes(header + article(3, "Physics") + article(4, "Chemistry") + footer)
    (folder / "enwiki-pages-articles-multistream-index.txt.bz2").write_bytes(b"x")
    (folder / "notes.txt").write_text("mine")
    (folder / ".DS_Store").write_bytes(b"x")  # hidden: ignored without a word
    with caplog.at_level("WARNING"):
        files = find_dumps(folder, "*pages-articles*.bz2", fallback=True)
    assert files == sorted([meta, upper, xml]) and gensim_fragment() not in files
    assert "notes.txt" in caplog.text and ".DS_Store" not in caplog.text
    shards, report = ingest_wikipedia(
        files, ["science"], config(organisations={"science": ["physics"]}), tmp_path / "w"
    )
    assert report["documents_read"] == 4 and report["errors"] == []
    assert sorted(shards["science"].to_frame()["source_id"].astype(int)) == [1, 2, 3]
    for name in ("enwiki-latest.xml.gz", "enwiki-latest.xml.bz2.part"):
        lone = tmp_path / name
        lone.mkdir()
        (lone / name).write_bytes(b"x")
        with pytest.raises(CorpusError, match=rf"\['{re.escape(name)}'\] but no file recognised.*pages-meta-current"):
            find_dumps(lone, "*pages-articles*.bz2", fallback=True)
    not_xml = tmp_path / "x-pages-articles.xml"
    not_xml.write_bytes(b"BZh9 not xml")
    with pytest.raises(CorpusError, match="named .xml but does not start with an XML tag"):
        ingest_wikipedia([not_xml], ["science"], config(organisations={"science": ["x"]}), tmp_path / "w2")
