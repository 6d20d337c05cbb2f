"""Training-speed and normalisation benchmarks in their smoke mode: each script run in its own
process as `__main__` (tests/bench/runner.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from tests.bench.runner import run_bench
from tests.conftest import DEMO_WHEEL


def test_bench_reconstruction_smoke() -> None:
    out = run_bench("bench_reconstruction.py", "--smoke")
    row = next(line for line in out.splitlines() if line.startswith("| 300 | 8 |"))
    assert len(row.split("|")) == 7 and "x [" in row, out


def test_bench_training_smoke() -> None:
    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    out = run_bench("bench_training.py", "--smoke")
    assert "| centralized |" in out and "| federated (in-process) |" in out and "ratio federated / centralized" in out


@pytest.mark.slow  # over 30 s on two cores
def test_bench_training_layouts_and_threads_policy_smoke() -> None:
    out = run_bench("bench_training.py", "--layouts", "--smoke")
    assert "| dense (before) |" in out and "| sparse CSR (now) |" in out and "speed-up sparse / dense" in out
    # no competing process: in `make test` it would take a core from the other xdist worker
    out = run_bench("bench_training.py", "--threads-policy", "--smoke", "--competitors", "0")
    assert "| 1 thread | 1 |" in out and "OMP_WAIT_POLICY=PASSIVE" in out


def test_bench_learning_curve_smoke(tmp_path) -> None:
    out, topics_out = tmp_path / "curve.csv", tmp_path / "topics.json"
    local = "aggregation.rule=fedavg,aggregation.local_steps=3"  # a train option by its path
    args = ("--smoke", "--no-progress", "--out", str(out), "--topics-out", str(topics_out), "--variants", "", local)
    run_bench("bench_learning_curve.py", *args, "--penalty", "top_words:10")
    lines = out.read_text().splitlines()
    assert lines[0].startswith("variant,scenario,batch_size,lr,seed,round,passes,npmi,topic_diversity")
    assert len(lines) >= 5  # a row per evaluated pass and variant, header first
    assert {row["variant"] for row in csv.DictReader(lines)} == {"configured", local}
    points = json.loads(topics_out.read_text())
    assert len(points) == len(lines) - 1
    for point in points:  # the redundancy columns agree with the top words they were computed from
        topics = [set(t) for t in point["topics"]]
        assert len(topics) == 5 and all(len(t) == 10 for t in topics)  # smoke: 5 topics, evaluate.top_words 10
        shared = [len(a & b) for i, a in enumerate(topics) for b in topics[i + 1 :]]
        assert point["largest_topic_overlap"] == max(shared)
        assert point["duplicate_topic_pairs"] == sum(n >= 5 for n in shared)
        assert len(point["duplicate_pairs_detail"].split()) == point["duplicate_topic_pairs"]
        assert 0.0 < point["inverted_rbo"] <= 1.0 and -1.0 <= point["npmi"] <= 1.0
        assert 0.0 <= point["macro_f1"] <= 1.0  # defined: the smoke organisations hold several classes


def test_bench_synthetic_smoke() -> None:
    out = run_bench("bench_synthetic.py", "--smoke")
    assert "| vectorised" in out and "| total point |" in out and "| federated |" in out


def test_diagnose_batchnorm_grouping_smoke() -> None:
    out = run_bench("diagnose_batchnorm_grouping.py", "--smoke")
    assert "| 0 | mixed (as trained) |" in out and "| 0 | sorted by organisation |" in out


def test_screen_normalisation_smoke() -> None:
    out = run_bench("screen_normalisation.py", "--smoke", "federated:layer", "sync:batch")
    assert "| 0 | ground truth |" in out and "| 0 | federated:layer |" in out and "| 0 | sync:batch |" in out


@pytest.mark.slow  # two kedro bootstraps and four short trainings: over 30 s on two busy cores
def test_bench_pooled_smoke(tmp_path: Path) -> None:
    """Pooled BatchNorm's cost against layer and batch, and its spread of honest values per exchange."""
    assert DEMO_WHEEL.is_file(), "run 'make install' first"
    run_bench("bench_pooled.py", "cost", "--smoke", "--json", str(tmp_path / "cost.json"))
    run_bench("bench_pooled.py", "spread", "--smoke", "--json", str(tmp_path / "spread.json"))
    cost = json.loads((tmp_path / "cost.json").read_text())["cost"]
    assert set(cost["cpu_s_per_step"]) == {"layer", "batch", "pooled_batch"}
    assert [cost["last_step"][k]["messages"] for k in ("layer", "batch", "pooled_batch")] == [1, 1, 5]
    spread = json.loads((tmp_path / "spread.json").read_text())["spread"]
    assert {"sums 1", "sums 2", "derivatives 2", "derivatives 1", "gradient"} <= set(spread), spread
    assert all(v["percentiles"]["50"] >= 1.0 for k, v in spread.items() if k != "steps")


def test_demo_pooled_coherence_on_a_tiny_data_folder(tmp_path: Path) -> None:
    """The script reads a Kedro data folder: vocabulary, token shards, trained models."""
    import pandas as pd
    import scipy.sparse as sp

    from fedtopic_pipelines.core.config import TrainConfig
    from fedtopic_pipelines.core.model_store import save_models
    from fedtopic_pipelines.core.training import train_scenarios

    terms = [f"w{j}" for j in range(12)]
    (tmp_path / "05_model_input").mkdir()
    pd.DataFrame({"term": terms}).to_parquet(tmp_path / "05_model_input/vocabulary.parquet")
    rng = np.random.default_rng(0)
    for org in ("a", "b"):
        folder = tmp_path / "02_intermediate/tokens" / org
        folder.mkdir(parents=True)
        texts = [" ".join(rng.choice(terms, size=8)) for _ in range(10)]
        pd.DataFrame({"split": ["train"] * 10, "tokens": texts}).to_parquet(folder / "part-00000.parquet")
    matrices = {org: sp.csr_matrix(rng.poisson(1.0, size=(10, 12)).astype(float)) for org in ("a", "b")}
    config = TrainConfig.from_params(
        {"model": {"n_topics": 2, "hidden_sizes": [4]}, "batch_size": 4, "max_steps": 2, "device": "cpu"}
    )
    models = train_scenarios(matrices, config.replace(scenarios=("federated", "centralized")), progress=False)
    save_models(tmp_path / "06_models/trained_models", models)
    out = run_bench("demo_pooled_coherence.py", "--data", str(tmp_path))
    assert "| federated | batch |" in out and "| centralized | batch |" in out
