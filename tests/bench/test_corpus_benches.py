"""Corpus, ingestion and scale benchmarks in their smoke mode: each script run in its own
process as `__main__` (tests/bench/runner.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.bench.runner import run_bench
from tests.conftest import DEMO_WHEEL, PROJECT


def test_bench_long_document_smoke() -> None:
    src = str(PROJECT / "src")
    out = run_bench("bench_long_document.py", "--before", src, "--after", src, "--sizes-mb", "0.3")
    rows = [line for line in out.splitlines() if line.startswith("| 0.3 MB |")]
    assert len(rows) == 4 and all(row.endswith("|  |") for row in rows), out  # logged, then tabled; no error


@pytest.mark.slow  # over 30 s on two cores
def test_bench_ingest_smoke(tmp_path: Path) -> None:
    run_bench("bench_ingest.py", "--smoke", "--workdir", str(tmp_path), "--skip", "profile")
    assert (tmp_path / "ingest.json").is_file()


@pytest.mark.slow  # over 30 s on two cores
def test_bench_scale_smoke(tmp_path: Path) -> None:
    """In process only: N = 3 organisations cut from the smoke demo, a few rounds, every output written.
    (Its Flower part starts a LocalFederation, as bench_flower's smoke does: not run again here.)"""
    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    out = run_bench("bench_scale.py", "--smoke", "--no-flower", "--out", str(tmp_path))
    assert "| 3 | in-process | 6 |" in out, out
    result = json.loads((tmp_path / "scale.json").read_text())["results"][0]
    assert result["rounds"] == 6 and result["reached"]["-1"]["round"] == 3  # the smoke target (-1) is met at once
    up, down = result["uplink_bytes_per_round"], result["downlink_bytes_per_round_computed"]
    assert abs(up - down) < 0.01 * down  # FedSGD: a gradient the model's size up, the model down
    assert 0 < result["rss_before_training_mb"] <= result["peak_rss_mb"]
    rows = list(csv.DictReader((tmp_path / "scale_curve.csv").open()))
    assert [int(r["round"]) for r in rows] == [3, 6] and all(-1 <= float(r["npmi"]) <= 1 for r in rows)
    assert (tmp_path / "scale.png").stat().st_size > 0 and (tmp_path / "scale.csv").is_file()


def test_bench_embeddings_smoke() -> None:
    out = run_bench("bench_embeddings.py", "--smoke")
    rows = [line for line in out.splitlines() if line.startswith("| ")][2:]
    assert len(rows) == 5 and rows[0].startswith("| reference: CTM 2.6.1"), out
    assert "| 1.000 / 1.000 |" in rows[1]  # ours at 128 pieces equals the reference's embeddings


def test_bench_vocab_floors_smoke() -> None:
    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    out = run_bench("bench_vocab_floors.py", "--smoke")
    rows = [line for line in out.splitlines() if line.startswith("| 1 | 0 |") or line.startswith("| 2 | 5 |")]
    assert len(rows) == 2, out
    no_floor, floors = (int(row.split("|")[3]) for row in rows)
    assert floors < no_floor  # the floors removed terms


def test_make_small_corpora_writes_three_user_sized_corpora(tmp_path: Path) -> None:
    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    run_bench("make_small_corpora.py", "--root", str(tmp_path))
    news = (tmp_path / "data/01_raw/small/news500.csv").read_text().splitlines()
    assert news[0] == "text,organisation,label" and len({line.rsplit(",", 2)[1] for line in news[1:]}) == 5
    assert "corpus: table" in (tmp_path / "conf/reuters3k/parameters.yml").read_text()
    records = (tmp_path / "data/01_raw/s2orc/sample.jsonl").read_text().splitlines()
    assert len(records) == 1000 and '"fieldsOfStudy"' in records[0]


@pytest.mark.slow  # two kedro bootstraps and two trainings: over 30 s on two busy cores
def test_bench_small_corpora_smoke(tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    run_bench("bench_small_corpora.py", "vocab", "--settings", "", "min_terms=0", "--out", str(out))
    run_bench("bench_small_corpora.py", "curve", "--passes", "0.5", "--every", "0.25", "--out", str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["setting"] for r in rows[:2]] == ["default", "min_terms=0"] and all(r["terms"] > 0 for r in rows[:2])
    curves = rows[2:]
    assert {r["scenario"] for r in curves} == {"federated", "centralized"}
    assert all({"npmi", "duplicate_pairs", "inverted_rbo"} <= set(r) for r in curves)
