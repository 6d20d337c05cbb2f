from pathlib import Path

import pandas as pd
import pytest

from fedtopic_pipelines.core.text.corpus import assign_by_label, load_table, partition_corpus, table_to_raw
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
    assert [r.line for r in raw.skipped] == [2, 3]


def test_missing_text_column_names_file_and_parameter(tmp_path: Path) -> None:
    path = tmp_path / "docs.csv"
    pd.DataFrame({"content": ["x"], "org": ["a"]}).to_csv(path, index=False)
    with pytest.raises(CorpusError, match=r"docs.csv' has no column 'text' \(parameter 'ingest_table.text_column'\)"):
        table_to_raw(load_table(path), "text", "org")


def test_unknown_format_and_malformed_file(tmp_path: Path) -> None:
    (tmp_path / "docs.txt").write_text("x")
    with pytest.raises(CorpusError, match="unsupported format"):
        load_table(tmp_path / "docs.txt")
    (tmp_path / "bad.jsonl").write_text('{"text": "a", "org": "x"}\n{not json\n')
    with pytest.raises(CorpusError, match="bad.jsonl' could not be parsed"):
        load_table(tmp_path / "bad.jsonl")


def test_missing_labels_become_empty_not_nan(tmp_path: Path) -> None:
    path = tmp_path / "docs.csv"
    pd.DataFrame({"text": ["a b", "c d"], "org": ["x", "x"], "label": ["sport", None]}).to_csv(path, index=False)
    raw = table_to_raw(load_table(path), "text", "org", label_column="label")
    assert raw.documents["label"].tolist() == ["sport", ""]
