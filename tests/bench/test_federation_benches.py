"""Secure aggregation, Flower, privacy and attack benchmarks in their smoke mode: each script run in its own
process as `__main__` (tests/bench/runner.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.bench.runner import run_bench
from tests.conftest import DEMO_WHEEL


@pytest.mark.deployment
@pytest.mark.slow  # over 30 s on two cores
def test_bench_secagg_smoke() -> None:
    """One plain and one secure round on a loopback federation of 2 organisations (the fewest that mask)."""
    out = run_bench("bench_secagg.py", "--rounds", "1", "--organisations", "2", timeout=500)
    assert "secure" in out and "plain" in out


def test_bench_secagg_grid_smoke() -> None:
    """The same rounds on the in-process grid: 4 messages per organisation and secure round, 1 plain."""
    out = run_bench("bench_secagg.py", "--grid", "--rounds", "1", "--organisations", "3", timeout=300)
    rows = {line.split("|")[2].strip(): line.split("|") for line in out.splitlines() if line.startswith("| 3 |")}
    assert float(rows["plain"][3]) == 3 and float(rows["secure"][3]) == 12


@pytest.mark.deployment
@pytest.mark.slow  # over 30 s on two cores
def test_bench_flower_smoke() -> None:
    out = run_bench("bench_flower.py", "--smoke", timeout=400)
    assert "| Flower, warm |" in out and "| in-process |" in out


def test_bench_privacy_smoke(tmp_path: Path) -> None:
    """The attack table and the DP quality sweep on a tiny demo slice; the baseline leaks hold."""

    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    results, png = tmp_path / "privacy.json", tmp_path / "privacy.png"
    out = run_bench("bench_privacy.py", "--quick", "--json", str(results), "--png", str(png))
    assert "| prodlda | (a) first layer (exact zeros): P / R / AUC | 1.00 / 1.00 / 1.00 |" in out, out
    assert "| word2vec | (b) U rows = centre words: P / R / AUC | 1.00 / 1.00 / 1.00 |" in out, out
    assert "| client, sigma 1 | 1 |" in out and "| sample, sigma 1 | 1 |" in out and png.is_file()
    saved = json.loads(results.read_text())
    assert set(saved["attacks"]) == {"prodlda", "nmf", "word2vec"}
    assert "a" in saved["attacks"]["prodlda"]["columns"]["dp@sample"]  # DP-SGD ran for ProdLDA
    assert "refused" in out.split("| nmf |", 1)[1].split("\n", 1)[0]  # NMF's local epochs refuse it
    assert [r["level"] for r in saved["synthetic"]] == ["off", "client", "sample"]  # gFedNTM's DSS and TSS
    assert all(np.isfinite(r["dss"]) and r["tss"] > 0 for r in saved["synthetic"])


def test_bench_attacks_smoke(tmp_path: Path) -> None:
    """A hostile organisation's table under a privacy override: ProdLDA takes the median, Word2Vec
    refuses it; the silent organisation fails every round and the honest run loses none."""

    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    results = tmp_path / "attacks.json"
    out = run_bench(
        "bench_attacks.py",
        *("--smoke", "--families", "prodlda", "word2vec", "--attacks", "none", "silent", "scale1000"),
        *("--privacy", "robust_rule=median", "--out", str(results)),
    )
    saved = json.loads(results.read_text())
    assert saved["privacy"]["robust_rule"] == "median" and saved["privacy_overrides"] == {"robust_rule": "median"}
    attacker, cells = saved["attacker"], saved["families"]["prodlda"]
    assert cells["silent"]["failed"] == {attacker: 3} and cells["silent"]["rounds"] == 3
    assert cells["none"]["failed"] == cells["none"]["rejected"] == {} and cells["none"]["attacked"] == 0
    assert cells["scale1000"]["attacked"] == 3 and isinstance(cells["scale1000"]["honest_loss"], float)
    assert "robust" in saved["families"]["word2vec"]["refused"]
    assert "| prodlda | scale1000 |" in out and "| word2vec | all | refused" in out, out
