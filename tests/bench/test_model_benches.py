"""Benchmarks of each family against its centralized anchor, and of evaluation, in their smoke
mode: each script run in its own process as `__main__` (tests/bench/runner.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.runner import run_bench
from tests.conftest import DEMO_WHEEL, PROJECT


def test_bench_quality_smoke() -> None:
    """Our two scenarios always run; the reference only where its venv exists (the smoke mode
    never creates it), and its absence is then said, not hidden."""
    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    out = run_bench("bench_quality.py", "--smoke")
    assert "| ours, centralized |" in out and "| ours, federated (5 organisations) |" in out
    assert "| largest topic overlap | inverted RBO |" in out
    reference = next(line for line in out.splitlines() if line.startswith("| CTM 2.6.1 ProdLDA (reference) |"))
    assert "| skipped |" in reference or reference.endswith("| 1.00x |"), reference


def test_bench_quality_sync_scenario_smoke() -> None:
    """Synchronised BatchNorm (the federated streams, one normalised batch per step) is scored
    like the other systems; the scenarios not asked for say so."""
    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    out = run_bench("bench_quality.py", "--smoke", "--no-reference", "--scenarios", "sync")
    row = next(
        line for line in out.splitlines() if line.startswith("| ours, synchronised BatchNorm (5 organisations) |")
    )
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert all(float(c) == float(c) for c in cells[1:8]), row  # NPMI .. documents / CPU-s: numbers, none NaN
    assert "| ours, federated (5 organisations) | skipped" in out and "| ours, centralized | skipped" in out


@pytest.mark.slow  # a kedro bootstrap to write the corpus, then the bench: over 30 s on two busy cores
def test_bench_quality_reads_the_organisations_raw_tables(tmp_path: Path) -> None:
    """``--raw``: a user's corpus (each organisation's Parquet folder), not the demo, is the bag of
    words every system is compared on."""
    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    write = (
        "import sys; from pathlib import Path; sys.path.insert(0, 'bench'); "
        "from common import demo_tables, project_config; params, _ = project_config('smoke'); "
        f"root = Path({str(tmp_path)!r}); "
        "[((root / org).mkdir(), table.head(60).to_parquet(root / org / 'part-00000.parquet')) "
        "for org, table in demo_tables(params).items()]"
    )
    done = subprocess.run([sys.executable, "-c", write], cwd=PROJECT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = run_bench("bench_quality.py", "--smoke", "--no-reference", "--raw", str(tmp_path))
    assert "| ours, federated (5 organisations) |" in out
    corpus = next(line for line in out.splitlines() if line.startswith(f"raw tables under {tmp_path}"))
    assert int(corpus.split(" organisations, ")[1].split(" training")[0]) <= 300, corpus  # 60 per organisation


def test_bench_word2vec_smoke() -> None:
    out = run_bench("bench_word2vec.py", "--smoke")
    rows = [line for line in out.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == 4 and rows[0].startswith("| gensim"), out
    assert "bytes per client and round" in out
    out = run_bench("bench_word2vec.py", "--smoke", "--memory")
    rows = [line for line in out.splitlines() if line.startswith("| ")][1:]
    assert len(rows) == 2, out


def test_bench_nmf_smoke() -> None:
    out = run_bench("bench_nmf.py", "--smoke")
    assert "| scikit-learn max_iter |" in out and "seconds per client" in out


def test_bench_nmf_exact_smoke(tmp_path: Path) -> None:
    """FedNMF exact through the engine stops at scikit-learn's iteration with its H and error."""
    out = run_bench("bench_nmf_exact.py", "--smoke", "--json", str(tmp_path / "exact.json"))
    assert "time to the converged loss" in out
    figures = json.loads((tmp_path / "exact.json").read_text())
    federated, reference = figures["equality"]["iterations"]
    assert federated == reference and figures["equality"]["h_relative"] < 1e-9
    ours, theirs = figures["equality"]["reconstruction_error"]
    assert ours == pytest.approx(theirs)


def test_bench_lda_smoke(tmp_path: Path) -> None:
    """LDA through the engine beside gensim's batch LdaModel: topics, perplexity and seconds of each."""
    out = run_bench("bench_lda.py", "--smoke", "--json", str(tmp_path / "lda.json"))
    assert "held-out completion perplexity" in out and "ratio (median of pairs)" in out
    figures = json.loads((tmp_path / "lda.json").read_text())
    assert set(figures["perplexity"]) == {"federated", "one_organisation", "gensim"}
    assert all(1 < p < figures["shape"][1] for p in figures["perplexity"].values())  # better than uniform
    assert 0 < figures["distance"]["federated"] < 0.1 and figures["spread"] > 0


def test_bench_pctd_smoke() -> None:
    out = run_bench("bench_pctd.py", "--smoke")
    assert "| gensim LdaModel, 1 pass |" in out and "(projected) |" in out and "(per entry) |" in out
    assert "M_t at V = 2000, K = 100: 1.6 MB as sent" in out


def test_bench_evaluation_smoke(tmp_path: Path) -> None:
    """Sparse completion perplexity gives the dense number; batched logging logs the same values."""
    out = run_bench("bench_evaluation.py", "--smoke", "--json", str(tmp_path / "evaluation.json"))
    dense, sparse = (float(x) for x in re.search(r"dense ([\d.e+]+), sparse ([\d.e+]+)", out).groups())
    assert sparse == pytest.approx(dense, rel=1e-5)
    assert "logged values read back equal" in out
    rows = json.loads((tmp_path / "evaluation.json").read_text())
    assert {r["what"].split(",")[0] for r in rows} >= {"completion perplexity", "metric logging"}
