"""S2ORC ingestion on small JSONL / JSONL.gz files written by the tests (both schemas, every bad input)."""

from __future__ import annotations

import gzip
import json
import logging
import random
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fedtopic_pipelines.core.config import IngestS2orcConfig
from fedtopic_pipelines.core.ingest.common import SHARD_COLUMNS, split_of
from fedtopic_pipelines.core.ingest.s2orc import find_shards, ingest_s2orc, pair_pdf_parses
from fedtopic_pipelines.core.text.demo import CorpusError

ORGS = ("computer_science", "economics")
RULES = {"computer_science": ["Computer Science"], "economics": ["Economics"]}
CS, ECON = ["Computer Science"], ["Economics"]


def write_jsonl(path: Path, lines: list[dict[str, Any] | bytes]) -> Path:
    """Dicts as JSON lines, bytes as they are; gzip-compressed when the name ends in .gz."""
    data = b"".join((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines)
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def paper(source_id: int | str, fields: list[str] | None, title: str = "", abstract: str | None = None) -> dict:
    """A current-schema (Semantic Scholar datasets) record."""
    return {
        "corpusid": source_id,
        "title": title or f"Paper {source_id}",
        "abstract": abstract,
        "fieldsOfStudy": fields,
    }


def run(
    files: list[Path], root: Path, orgs: tuple[str, ...] = ORGS, pdf_parses: tuple[Path, ...] = (), **params: Any
) -> tuple[dict[str, pd.DataFrame], dict]:
    params = {"organisations": RULES, "processes": 1, "test_fraction": 0.5, **params}
    tables, report = ingest_s2orc(files, orgs, IngestS2orcConfig(**params), root, pdf_parses)
    return {org: table.to_frame() for org, table in tables.items()}, report


def texts(frame: pd.DataFrame) -> dict[str, str]:
    return dict(zip(frame["source_id"], frame["text"], strict=True))


def test_find_shards_natural_order_and_missing(tmp_path: Path) -> None:
    for name in ("metadata_10.jsonl.gz", "metadata_2.jsonl", "README.txt"):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in find_shards(tmp_path)] == ["metadata_2.jsonl", "metadata_10.jsonl.gz"]
    with pytest.raises(CorpusError, match="nowhere"):
        find_shards(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match="empty"):
        find_shards(tmp_path / "empty")


def test_pairing_by_batch_number() -> None:
    meta = [Path("m/metadata_0.jsonl.gz"), Path("m/metadata_1.jsonl.gz"), Path("m/metadata_12.jsonl.gz")]
    parses = [Path("p/pdf_parses_12.jsonl.gz"), Path("p/pdf_parses_0.jsonl.gz")]
    assert pair_pdf_parses(meta, parses) == [parses[1], None, parses[0]]
    assert pair_pdf_parses(meta[:1], [Path("p/other.jsonl")]) == [Path("p/other.jsonl")]
    with pytest.raises(CorpusError, match="pdf_parses_7"):
        pair_pdf_parses(meta, [*parses, Path("p/pdf_parses_7.jsonl.gz")])


def test_2020_release_joins_pdf_parses_and_falls_back_to_metadata(tmp_path: Path) -> None:
    def meta(pid: Any, fields: list[str] | None, title: str, abstract: str | None) -> dict:
        return {"paper_id": pid, "title": title, "abstract": abstract, "mag_field_of_study": fields, "year": 2019}

    metadata = write_jsonl(
        tmp_path / "metadata_0.jsonl.gz",
        [
            meta("p1", CS, "Deep nets", "Metadata abstract one."),
            meta("p2", ECON, "Markets", "Metadata abstract two."),
            meta("p3", CS, "Compilers", None),
            meta("p4", ["Medicine"], "Drugs", "Unmatched."),
            meta(5, CS, "Integer id", "Five."),
            meta("p6", CS, "Bad parse", "Metadata abstract six."),
        ],
    )
    parses = write_jsonl(
        tmp_path / "pdf_parses_0.jsonl.gz",
        [
            {"paper_id": "p4", "abstract": [], "body_text": [{"text": "Medicine body.", "section": "1"}]},
            {"paper_id": "p3", "abstract": [], "body_text": [{"text": "Body three.", "section": "Intro"}]},
            {"paper_id": "p6", "abstract": None, "body_text": "not a list"},
            b'{"paper_id": "p9", "body_text": [not wanted, never parsed',
            {
                "paper_id": "p1",
                "abstract": [{"text": "Parsed abstract."}],
                "body_text": [{"text": "First paragraph.", "section": "1"}, {"text": "Second.", "section": "2"}],
            },
        ],
    )
    only_metadata = write_jsonl(tmp_path / "metadata_1.jsonl", [meta("p7", ECON, "Trade", "Gains from trade.")])

    frames, report = run([metadata, only_metadata], tmp_path / "work", pdf_parses=(parses,))

    cs, econ = texts(frames["computer_science"]), texts(frames["economics"])
    assert cs == {
        "p1": "Deep nets\n\nParsed abstract.\n\nFirst paragraph.\nSecond.",
        "p3": "Compilers\n\nBody three.",
        "5": "Integer id\n\nFive.",
        "p6": "Bad parse\n\nMetadata abstract six.",
    }
    assert econ == {"p2": "Markets\n\nMetadata abstract two.", "p7": "Trade\n\nGains from trade."}
    for org, frame in frames.items():
        assert list(frame.columns) == SHARD_COLUMNS
        assert all(frame[c].map(type).eq(str).all() for c in SHARD_COLUMNS)
        for row in frame.itertuples():
            assert row.split == split_of(row.source_id, 0.5, 42)
            assert row.doc_id == f"{org}:{row.split}:{row.source_id}"
            assert row.organisation == org and row.label == ""
    assert frames["computer_science"].set_index("source_id").loc["p1", "title"] == "Deep nets"
    assert report["documents_read"] == 7
    assert report["dropped"] == {"no_matching_field": 1}
    assert report["notes"] == {"malformed_pdf_parses": 1}
    [bad_parse] = report["malformed"]
    assert bad_parse["file"] == str(parses) and bad_parse["line"] == 3 and "body_text" in bad_parse["reason"]
    assert not list((tmp_path / "work" / "_tmp").glob("*"))  # the per-batch join files are removed


def test_current_schema_fields_of_study_and_s2fieldsofstudy(tmp_path: Path) -> None:
    records = [
        paper(10, CS, "Only fieldsOfStudy", "An abstract."),
        {
            "corpusid": 11,
            "title": "Only s2",
            "fieldsOfStudy": None,
            "s2fieldsofstudy": [{"category": "Economics", "source": "s2-fos-model"}],
        },
        {"paperId": "abc", "title": "Graph API", "s2FieldsOfStudy": [{"category": "Computer Science", "source": "x"}]},
        {
            "corpusid": 13,
            "title": "Both",
            "fieldsOfStudy": ["Economics"],
            "s2fieldsofstudy": [
                {"category": "Economics", "source": "external"},
                {"category": "Computer Science", "source": "s2-fos-model"},
            ],
        },
    ]
    frames, report = run([write_jsonl(tmp_path / "papers.jsonl.gz", records)], tmp_path / "work")

    assert texts(frames["computer_science"]) == {
        "10": "Only fieldsOfStudy\n\nAn abstract.",
        "abc": "Graph API",
        "13": "Both",
    }
    assert texts(frames["economics"]) == {"11": "Only s2", "13": "Both"}
    assert report["notes"] == {"several_organisations_matched": 1}
    assert report["kept"]["computer_science"]["train"] + report["kept"]["computer_science"]["test"] == 3


@pytest.mark.parametrize(
    ("policy", "cs", "econ", "dropped", "noted"),
    [
        ("first", {"1", "both"}, {"2"}, {}, 1),
        ("all", {"1", "both"}, {"2", "both"}, {}, 1),
        ("drop", {"1"}, {"2"}, {"several_organisations": 1}, 0),
    ],
)
def test_multi_match_policies(
    tmp_path: Path, policy: str, cs: set[str], econ: set[str], dropped: dict, noted: int
) -> None:
    records = [paper(1, CS), paper("both", ["Economics", "Computer Science"]), paper(2, ECON)]
    frames, report = run([write_jsonl(tmp_path / "p.jsonl", records)], tmp_path / "work", multi_match=policy)
    assert set(frames["computer_science"]["source_id"]) == cs
    assert set(frames["economics"]["source_id"]) == econ
    assert report["dropped"] == dropped
    assert report["notes"].get("several_organisations_matched", 0) == noted


@pytest.mark.parametrize("shard_documents", [1, 2, 10])
def test_cap_keeps_the_first_documents_in_input_order(tmp_path: Path, shard_documents: int) -> None:
    first = write_jsonl(tmp_path / "a.jsonl", [paper("cs1", CS), paper("e1", ECON), paper("cs2", CS), paper("cs3", CS)])
    second = write_jsonl(tmp_path / "b.jsonl.gz", [paper("cs4", CS), paper("e2", ECON), paper("cs5", CS)])
    root = tmp_path / "work"
    frames, report = run([first, second], root, max_documents=2, shard_documents=shard_documents)

    assert list(frames["computer_science"]["source_id"]) == ["cs1", "cs2"]
    assert list(frames["economics"]["source_id"]) == ["e1", "e2"]
    assert report["dropped"] == {"over_max_documents": 3}
    assert report["kept_total"] == 4
    # Shards past the cap are deleted or truncated: the directory holds exactly the kept documents.
    on_disk = pd.concat([pd.read_parquet(p) for p in sorted((root / "computer_science").glob("*.parquet"))])
    assert sorted(on_disk["source_id"]) == ["cs1", "cs2"]


def test_every_bad_input_is_counted_with_file_and_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = write_jsonl(
        tmp_path / "bad.jsonl",
        [
            paper(1, CS, "Good one"),
            b'{"corpusid": 2, "title": ',
            b'{"corpusid": 3, "title": "caf\xe9", "fieldsOfStudy": ["Computer Science"]}',
            b"[1, 2, 3]",
            {"corpusid": 5, "title": 42, "fieldsOfStudy": CS},
            {"corpusid": 6, "title": "x", "fieldsOfStudy": "Computer Science"},
            b"   ",
            {"corpusid": 8, "title": "", "abstract": None, "fieldsOfStudy": CS},
            {"corpusid": 9, "title": "No field", "fieldsOfStudy": None},
            {"corpusid": 10, "title": "Medicine", "fieldsOfStudy": ["Medicine"]},
            {"title": "No identifier", "fieldsOfStudy": CS},
            paper(12, ECON, "Good two"),
        ],
    )
    rng = random.Random(0)
    words = ["model", "data", "network", "learning", "graph", "theory", "market", "price", "labour", "trade"]
    long_records = [paper(f"t{i}", CS, " ".join(rng.choice(words) for _ in range(40))) for i in range(300)]
    whole = gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in long_records))
    truncated = tmp_path / "truncated.jsonl.gz"
    truncated.write_bytes(whole[: len(whole) // 2])
    after = write_jsonl(tmp_path / "after.jsonl", [paper(13, ECON, "After the damage")])

    with caplog.at_level(logging.WARNING, logger="fedtopic_pipelines.core.ingest.s2orc"):
        frames, report = run([bad, truncated, after], tmp_path / "work")

    from_truncated = [s for s in frames["computer_science"]["source_id"] if s.startswith("t")]
    read_before_damage = len(from_truncated)
    assert 0 < read_before_damage < 300
    assert from_truncated == [f"t{i}" for i in range(read_before_damage)]
    assert report["errors"] == [
        {"file": str(truncated), "reason": report["errors"][0]["reason"], "line": read_before_damage + 1}
    ]
    assert "gzip" in report["errors"][0]["reason"]
    assert set(frames["economics"]["source_id"]) == {"12", "13"}
    assert report["documents_read"] == 11 + read_before_damage + 1
    assert report["dropped"] == {"malformed": 6, "no_text": 1, "no_field_of_study": 1, "no_matching_field": 1}
    assert report["malformed_records"] == 6
    where = {m["line"]: m["reason"] for m in report["malformed"] if m["file"] == str(bad)}
    assert sorted(where) == [2, 3, 4, 5, 6, 11]
    assert "invalid JSON" in where[2]
    assert "UTF-8" in where[3]
    assert "not an object" in where[4]
    assert "'title'" in where[5]
    assert "'fieldsOfStudy'" in where[6]
    assert "corpusid" in where[11]
    assert any("6 malformed" in r.message and "bad.jsonl line 2" in r.message for r in caplog.records)


def test_empty_and_damaged_shards_are_reported_by_name(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    good = write_jsonl(tmp_path / "metadata_0.jsonl", [paper(1, CS), paper(2, ECON)])
    zero_plain, zero_gz = tmp_path / "c.jsonl", tmp_path / "d.jsonl.gz"
    zero_plain.write_bytes(b"")
    zero_gz.write_bytes(b"")
    magic_only = tmp_path / "e.jsonl.gz"
    magic_only.write_bytes(b"\x1f\x8b")  # a download cut after the gzip magic bytes
    empty_member = tmp_path / "f.jsonl.gz"
    empty_member.write_bytes(gzip.compress(b""))
    blank_lines = write_jsonl(tmp_path / "g.jsonl", [b"", b"   "])
    zero_parses = tmp_path / "pdf_parses_0.jsonl.gz"
    zero_parses.write_bytes(b"")
    files = [good, zero_plain, zero_gz, magic_only, empty_member, blank_lines]

    with caplog.at_level(logging.WARNING, logger="fedtopic_pipelines.core.ingest.s2orc"):
        _, report = run(files, tmp_path / "work", pdf_parses=(zero_parses,))

    empty = [str(p) for p in (zero_plain, zero_gz, empty_member, blank_lines, zero_parses)]
    assert report["empty_files"] == empty
    assert report["empty_files_count"] == 5
    assert [e["file"] for e in report["errors"]] == [str(magic_only)]
    assert "gzip" in report["errors"][0]["reason"]
    assert report["documents_read"] == 2 and report["kept_total"] == 2
    [warning] = [r.message for r in caplog.records if "empty S2ORC file" in r.message]
    assert "5 empty" in warning and all(name in warning for name in empty)
    assert any(str(magic_only) in r.message for r in caplog.records)


def test_only_empty_shards_stop_the_run_naming_them(tmp_path: Path) -> None:
    files = [tmp_path / "c.jsonl", tmp_path / "d.jsonl.gz"]
    for path in files:
        path.write_bytes(b"")
    with pytest.raises(CorpusError, match="every file is empty") as error:
        run(files, tmp_path / "work")
    assert all(str(path) in str(error.value) for path in files)


@pytest.mark.parametrize("processes", [1, 2])
def test_duplicate_ids_keep_the_first_copy_per_organisation(tmp_path: Path, processes: int) -> None:
    first = write_jsonl(
        tmp_path / "a.jsonl",
        [
            paper(1, CS, "first copy"),
            paper("both", ["Computer Science", "Economics"], "in two organisations: no duplicate"),
            paper(1, CS, "second copy, same file"),
            paper(2, ECON, "econ"),
        ],
    )
    second = write_jsonl(
        tmp_path / "b.jsonl.gz", [paper(1, CS, "third copy, next file"), paper(3, CS, "cs3"), paper(2, ECON, "again")]
    )
    root = tmp_path / "work"
    frames, report = run([first, second], root, processes=processes, max_documents=3, shard_documents=1)

    cs, econ = frames["computer_science"], frames["economics"]
    assert list(cs["source_id"]) == ["1", "both", "3"]  # duplicates do not use up the cap of 3
    assert texts(cs)["1"] == "first copy"
    assert list(econ["source_id"]) == ["both", "2"] and texts(econ)["2"] == "econ"
    assert cs["doc_id"].is_unique and econ["doc_id"].is_unique
    assert report["dropped"] == {"duplicate_id": 3}
    assert report["kept_total"] == 5

    # Resuming without the ids file rebuilds it from the finished units' shards.
    (root / "_seen_ids.sqlite").unlink()
    for marker in (root / "_done").glob("00001-*.json"):
        marker.unlink()
    resumed, resumed_report = run([first, second], root, processes=processes, max_documents=3, shard_documents=1)
    assert {**resumed_report, "resumed_units": 0} == report
    for org in ORGS:
        pd.testing.assert_frame_equal(resumed[org], frames[org])


def test_an_empty_organisation_stops_the_run_naming_it(tmp_path: Path) -> None:
    rules = {**RULES, "philosophy": ["Philosophy"]}
    files = [write_jsonl(tmp_path / "p.jsonl", [paper(1, CS), paper(2, ECON), paper(3, ["Biology"])])]
    with pytest.raises(CorpusError, match="philosophy"):
        run(files, tmp_path / "work", orgs=(*ORGS, "philosophy"), organisations=rules)


def _corpus(tmp_path: Path) -> tuple[list[Path], tuple[Path, ...]]:
    """Three units: two 2020 batches with their pdf_parses and one current-schema file."""
    files, parses = [], []
    for batch in range(2):
        ids = [f"b{batch}-{i}" for i in range(6)]
        fields = [CS, ECON, ["Computer Science", "Economics"], CS, ["Medicine"], ECON]
        files.append(
            write_jsonl(
                tmp_path / f"metadata_{batch}.jsonl.gz",
                [
                    {"paper_id": p, "title": f"T {p}", "abstract": None, "mag_field_of_study": f}
                    for p, f in zip(ids, fields, strict=True)
                ],
            )
        )
        parses.append(
            write_jsonl(
                tmp_path / f"pdf_parses_{batch}.jsonl.gz",
                [
                    {"paper_id": p, "abstract": [{"text": f"A {p}"}], "body_text": [{"text": f"B {p}"}]}
                    for p in reversed(ids)
                ],
            )
        )
    # c1 twice: a duplicate id, dropped the same way by one or two processes and on resume.
    records = [paper(f"c{i}", CS if i % 2 else ECON) for i in range(5)] + [paper("c1", CS, "later copy")]
    files.append(write_jsonl(tmp_path / "papers.jsonl", records))
    return files, tuple(parses)


def test_two_processes_give_the_same_shards_and_report(tmp_path: Path) -> None:
    files, parses = _corpus(tmp_path)
    params = {"max_documents": 5, "shard_documents": 2}
    one, report_one = run(files, tmp_path / "one", pdf_parses=parses, processes=1, **params)
    two, report_two = run(files, tmp_path / "two", pdf_parses=parses, processes=2, **params)
    assert report_one == report_two
    for org in ORGS:
        pd.testing.assert_frame_equal(one[org], two[org])
    assert report_one["dropped"]["over_max_documents"] > 0
    assert "B b0-0" in texts(one["computer_science"])["b0-0"]
    shards = [
        sorted(p.relative_to(root) for p in root.rglob("*.parquet")) for root in (tmp_path / "one", tmp_path / "two")
    ]
    assert shards[0] == shards[1]


def test_resume_skips_finished_units_and_gives_the_same_output(tmp_path: Path) -> None:
    files, parses = _corpus(tmp_path)
    params = {"max_documents": 5, "shard_documents": 2, "pdf_parses": parses}
    root = tmp_path / "work"
    expected, report = run(files, tmp_path / "uninterrupted", **params)

    run(files, root, **params)
    # An interruption during the second unit: its marker and part of its shards are missing.
    [marker] = (root / "_done").glob("00001-*.json")
    lost = [shards[-1] for shards in json.loads(marker.read_text())["shards"].values()]
    assert lost
    for shard in lost:
        (root / shard).unlink()
    marker.unlink()
    resumed, resumed_report = run(files, root, **params)

    assert resumed_report["resumed_units"] == 2
    assert {**resumed_report, "resumed_units": 0} == report
    for org in ORGS:
        pd.testing.assert_frame_equal(resumed[org], expected[org])
    assert run(files, root, **params)[1]["resumed_units"] == 3
    assert run(files, root, **{**params, "seed": 7})[1]["resumed_units"] == 0  # other parameters: start afresh


def test_text_fields_title_only(tmp_path: Path) -> None:
    metadata = write_jsonl(
        tmp_path / "metadata_0.jsonl",
        [
            {"paper_id": "p1", "title": "Title one", "abstract": "Abstract one.", "mag_field_of_study": CS},
            {"paper_id": "p2", "title": None, "abstract": "No title.", "mag_field_of_study": CS},
            {"paper_id": "p3", "title": "Title three", "abstract": "Abstract three.", "mag_field_of_study": ECON},
        ],
    )
    parses = write_jsonl(tmp_path / "pdf_parses_0.jsonl", [{"paper_id": "p1", "body_text": [{"text": "Body."}]}])
    frames, report = run([metadata], tmp_path / "work", pdf_parses=(parses,), text_fields=("title",))
    assert texts(frames["computer_science"]) == {"p1": "Title one"}
    assert texts(frames["economics"]) == {"p3": "Title three"}
    assert report["dropped"] == {"no_text": 1}
