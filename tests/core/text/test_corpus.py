import json
from pathlib import Path

import pandas as pd
import pytest

from fedtopic_pipelines.core.config import PreprocessConfig
from fedtopic_pipelines.core.text.corpus import (
    SourceTable,
    assign_by_label,
    load_table,
    partition_corpus,
    table_to_raw,
)
from fedtopic_pipelines.core.text.demo import CorpusError, RawCorpus


def _raw(labels: list[str]) -> RawCorpus:
    frame = pd.DataFrame(
        {
            "label": labels,
            "text": ["t"] * len(labels),
            "split": ["train"] * len(labels),
            "source_line": range(4, 4 + len(labels)),
        }
    )
    return RawCorpus(frame)


def test_labels_map_to_organisations_by_glob() -> None:
    owner = assign_by_label(pd.Series(["comp.graphics", "sci.space", "x.y"]), {"c": ["comp.*"], "s": ["sci.*"]})
    assert owner.tolist()[:2] == ["c", "s"] and pd.isna(owner.iloc[2])


def test_a_label_in_two_organisations_is_an_error() -> None:
    with pytest.raises(CorpusError, match="'comp.graphics' matches several"):
        assign_by_label(pd.Series(["comp.graphics"]), {"a": ["comp.*"], "b": ["*.graphics"]})


def test_partition_counts_unassigned_and_caps() -> None:
    raw = _raw(["a", "a", "a", "b", "z"])
    tables, report = partition_corpus(
        raw, raw.documents["label"].where(raw.documents["label"] != "z"), ["a", "b"], "src", {"train": 2, "test": None}
    )
    assert len(tables["a"]) == 2 and len(tables["b"]) == 1
    assert report["dropped"] == {"no_configured_organisation": 1, "over_max_documents": 1}
    assert tables["a"]["doc_id"].str.startswith("a:train:").all()


def test_an_empty_organisation_is_named() -> None:
    raw = _raw(["a"])
    with pytest.raises(CorpusError, match="organisation 'b' has no documents in src"):
        partition_corpus(raw, raw.documents["label"], ["a", "b"], "src")


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".jsonl"])
def test_user_tables_in_three_formats(tmp_path: Path, suffix: str) -> None:
    frame = pd.DataFrame({"body": ["rocket launch", "", "hockey goal"], "org": ["s", "s", None]})
    path = tmp_path / f"docs{suffix}"
    {
        ".csv": lambda: frame.to_csv(path, index=False),
        ".parquet": lambda: frame.to_parquet(path),
        ".jsonl": lambda: frame.to_json(path, orient="records", lines=True),
    }[suffix]()
    raw = table_to_raw(load_table(path), "body", "org")
    assert raw.documents["text"].tolist() == ["rocket launch"]
    # lines in the file: a CSV's header is line 1, a Parquet table has row numbers
    expected = [3, 4] if suffix == ".csv" else [2, 3]
    assert [r.line for r in raw.skipped] == expected
    assert [r.reason for r in raw.skipped] == ["empty or non-text 'body'", "empty 'org'"]


def test_missing_text_column_names_file_and_parameter(tmp_path: Path) -> None:
    path = tmp_path / "docs.csv"
    pd.DataFrame({"content": ["x"], "org": ["a"]}).to_csv(path, index=False)
    with pytest.raises(CorpusError, match=r"docs.csv' has no column 'text' \(parameter 'ingest_table.text_column'\)"):
        table_to_raw(load_table(path), "text", "org")


def test_unknown_format_and_malformed_file(tmp_path: Path) -> None:
    (tmp_path / "docs.txt").write_text("x")
    with pytest.raises(CorpusError, match="unsupported format"):
        load_table(tmp_path / "docs.txt")
    (tmp_path / "bad.jsonl").write_text('{not json\n["a list"]\n')
    with pytest.raises(
        CorpusError, match=r"bad.jsonl' has no usable record; 2 malformed \(first: line 1, invalid JSON"
    ):
        load_table(tmp_path / "bad.jsonl")
    (tmp_path / "bad.csv").write_bytes(b"text,org\n\xff\xfe,a\n")
    with pytest.raises(
        CorpusError, match=r"bad.csv' has no usable record; 1 malformed \(first: line 2, not valid UTF-8"
    ):
        load_table(tmp_path / "bad.csv")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(CorpusError, match=r"empty.jsonl' has no usable record$"):
        load_table(tmp_path / "empty.jsonl")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(CorpusError, match=r"empty.csv' is empty: no header line"):
        load_table(tmp_path / "empty.csv")


def test_a_bad_jsonl_line_is_skipped_with_its_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_bytes(
        b'{"text": "rocket launch", "org": "s"}\n{not json\n\n["a list"]\n'
        b'{"text": "caf\xe9", "org": "s"}\n{"text": "hockey goal", "org": "s"}\n'
    )
    with caplog.at_level("WARNING"):
        raw = table_to_raw(load_table(path), "text", "org")
    assert raw.documents["text"].tolist() == ["rocket launch", "hockey goal"]
    assert raw.documents["source_line"].tolist() == [1, 6]
    assert [(r.line, r.reason.split(":")[0]) for r in raw.skipped] == [
        (2, "invalid JSON"),
        (4, "not a JSON object (list)"),
        (5, "not valid UTF-8"),
    ]
    assert all(r.source == str(path) for r in raw.skipped)
    assert "skipped 3 malformed records (first: line 2" in caplog.text


def test_a_bad_csv_row_is_skipped_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "docs.csv"
    path.write_bytes(b'text,org\nrocket launch,s\none,too,many\n"multi\nline text",s\ncaf\xe9 menu,s\nhockey goal,s\n')
    raw = table_to_raw(load_table(path), "text", "org")
    assert raw.documents["text"].tolist() == ["rocket launch", "multi\nline text", "hockey goal"]
    assert raw.documents["source_line"].tolist() == [2, 4, 7]
    assert [(r.line, r.reason) for r in raw.skipped] == [(3, "3 fields, expected 2"), (6, "not valid UTF-8")]


def _runaway_csv(path: Path, opened_at: int, close_later: bool) -> None:
    """302 records ``i,text,o`` (header on line 1, record i on line i + 2); the record on line
    ``opened_at`` opens a quote it never closes; with ``close_later`` record 108 (line 110) is quoted."""
    lines = ["id,text,org"]
    for i in range(302):
        text = f"doc {i} words here"
        if i + 2 == opened_at:
            text = '"doc quote never closed'
        elif close_later and i == 108:
            text = f'"doc {i}, quoted"'
        lines.append(f"{i},{text},o")
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("opened_at", "close_later", "covered", "ends"),
    [(11, True, range(11, 111), "line 110: ',' expected after '\"'"), (290, False, range(290, 304), "the file ends")],
)
def test_an_unterminated_quote_skips_each_line_it_covers_naming_where_it_opened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, opened_at: int, close_later: bool, covered: range, ends: str
) -> None:
    path = tmp_path / "docs.csv"
    _runaway_csv(path, opened_at, close_later)
    with caplog.at_level("WARNING"):
        raw = table_to_raw(load_table(path), "text", "org")
    _, report = partition_corpus(raw, raw.documents["organisation"], ["o"], str(path))
    assert [r.line for r in raw.skipped] == list(covered)
    assert {r.reason for r in raw.skipped} == {
        f"inside a quoted field opened on line {opened_at} that is not closed properly ({ends}"
        + ("" if close_later else " inside it")
        + ")"
    }
    # every record read is kept or skipped: none vanishes inside the quote, none is merged into another
    kept = sum(report["kept"]["o"].values())
    assert report["documents_read"] == 302 == kept + report["skipped_records"]
    assert kept == 302 - len(covered) and raw.documents["text"].str.len().max() < 30
    assert f"a quote opened on line {opened_at} is not closed properly" in caplog.text
    assert f"302 records read, {kept} kept, skipped {len(covered)} malformed records" in caplog.text


def test_quotes_that_close_are_read_as_before(tmp_path: Path) -> None:
    """A quoted field may span lines; a stray quote inside one line stays lenient (as pandas reads it).
    A record over several lines with the wrong field count is one skipped record, its span named."""
    path = tmp_path / "docs.csv"
    path.write_text('text,org\n"para one\n\npara, two",s\n"5" screen,s\nplain,s\n"a\nb",s,extra\n"open at the end,s\n')
    table = load_table(path)
    assert table.frame["text"].tolist() == ["para one\n\npara, two", "5 screen", "plain"]
    assert table.line_numbers().tolist() == [2, 5, 6]
    assert [(r.line, r.reason) for r in table.skipped] == [
        (7, "3 fields, expected 2 (one record over lines 7-8)"),
        (9, "1 fields, expected 2"),
    ]


def test_a_runaway_quote_in_the_header_stops_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "docs.csv"
    path.write_text('text,"org\nrocket,s\nhockey,"s\n')
    with pytest.raises(CorpusError, match=r"docs.csv': its header \(line 1\) is unreadable: inside a quoted field"):
        load_table(path)


@pytest.mark.usefixtures("default_csv_field_limit")
def test_a_long_document_is_kept_from_csv_as_from_jsonl(tmp_path: Path) -> None:
    """Cells over 128 KiB, up to and beyond 'preprocess.max_document_chars', are kept (cut later, by preprocess)."""
    limit = PreprocessConfig().max_document_chars
    assert limit is not None
    texts = ["word " * (200 * 1024 // 5), "x" * limit, "y " * (limit // 2 + 10), "short"]
    frame = pd.DataFrame({"text": texts, "org": "s"})
    frame.to_csv(tmp_path / "docs.csv", index=False)
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in frame.to_dict("records")))
    from_csv, from_jsonl = load_table(tmp_path / "docs.csv"), load_table(tmp_path / "docs.jsonl")
    assert from_csv.skipped == [] and from_jsonl.skipped == []
    assert from_csv.frame.to_dict("list") == from_jsonl.frame.to_dict("list") == frame.to_dict("list")


def test_gzip_tables_are_read_record_by_record(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "docs.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"text": "a b", "org": "s"}\n{bad\n'))
    table = load_table(path)
    assert table.frame["text"].tolist() == ["a b"] and [r.line for r in table.skipped] == [2]


def test_duplicate_texts_keep_the_first_copy_only(tmp_path: Path) -> None:
    path = tmp_path / "docs.csv"
    pd.DataFrame(
        {
            "text": ["same text", "other", " same text ", "same text"],
            "org": ["a", "a", "b", "a"],
            "split": ["train", "train", "test", "test"],
        }
    ).to_csv(path, index=False)
    raw = table_to_raw(load_table(path), "text", "org", split_column="split")
    assert raw.documents["text"].tolist() == ["same text", "other"]
    assert set(raw.documents["split"]) == {"train"}
    assert [(r.line, r.reason) for r in raw.skipped] == [
        (4, "duplicate text of line 2 (kept)"),
        (5, "duplicate text of line 2 (kept)"),
    ]


def test_duplicates_never_straddle_the_random_split(tmp_path: Path) -> None:
    texts = [f"document {i % 7}" for i in range(60)]
    raw = table_to_raw(SourceTable(pd.DataFrame({"text": texts, "org": "a"}), "mem.csv"), "text", "org", seed=3)
    splits = raw.documents.groupby("text")["split"].nunique()
    assert len(splits) == 7 and (splits == 1).all()
    assert len(raw.skipped) == 53


def test_unconfigured_organisations_are_listed_with_their_lines() -> None:
    frame = pd.DataFrame({"text": [f"t{i}" for i in range(30)], "org": ["a", "zz"] * 14 + [None, "yy"]})
    raw = table_to_raw(SourceTable(frame, "mem.csv"), "text", "org")
    _, report = partition_corpus(raw, raw.documents["organisation"], ["a"], "mem.csv")
    assert report["dropped"] == {"no_configured_organisation": 15}
    assert report["not_configured"]["organisations"] == {"yy": 1, "zz": 14}
    assert report["not_configured"]["first_lines"] == [2 * i + 2 for i in range(14)] + [30]
    assert report["skipped"][0]["line"] == 29  # the empty organisation, skipped earlier


def test_missing_labels_become_empty_not_nan(tmp_path: Path) -> None:
    path = tmp_path / "docs.csv"
    pd.DataFrame({"text": ["a b", "c d"], "org": ["x", "x"], "label": ["sport", None]}).to_csv(path, index=False)
    raw = table_to_raw(load_table(path), "text", "org", label_column="label")
    assert raw.documents["label"].tolist() == ["sport", ""]


def test_an_ordered_corpus_is_cut_in_file_order_and_bad_parts_are_named(tmp_path: Path) -> None:
    from fedtopic_pipelines.core.text.corpus import read_ordered_corpus

    lee = read_ordered_corpus("gensim:lee_background.cor", {"early": 51, "middle": 99, "late": 150})
    assert lee.frame["organisation"].value_counts().to_dict() == {"early": 51, "middle": 99, "late": 150}
    assert lee.frame["organisation"].iloc[50] == "early" and lee.frame["organisation"].iloc[51] == "middle"
    path = tmp_path / "news.txt"
    path.write_text("first article\nsecond article\nthird\n")
    table = read_ordered_corpus(str(path), {"a": 1, "b": 2})
    assert table.frame["text"].tolist() == ["first article", "second article", "third"]
    assert table.line_numbers().tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match=r"has 3 documents but 'parts' .* sum to 4"):
        read_ordered_corpus(str(path), {"a": 2, "b": 2})
    with pytest.raises(ValueError, match="parts"):
        read_ordered_corpus(str(path), {"a": 3, "b": 0})
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        read_ordered_corpus(str(tmp_path / "missing.txt"), {"a": 3})
