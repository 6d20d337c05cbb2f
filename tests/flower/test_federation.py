"""The Flower app on an in-process grid: same vocabulary and same model as the in-process engine."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from fedtopic_pipelines.core.config import ConsensusConfig, PreprocessConfig, TrainConfig, from_mapping
from fedtopic_pipelines.core.ingest.common import ShardedTable
from fedtopic_pipelines.core.text.preprocess import preprocess_shards
from fedtopic_pipelines.core.training import train_scenarios
from fedtopic_pipelines.core.vocab.consensus import build_vocabulary, vectorize_frames
from fedtopic_pipelines.flower.client_app import app as client_app
from fedtopic_pipelines.flower.federation import Job, run_federation
from tests.flower.local_grid import LocalGrid

PREPROCESS = {"min_df": 1, "max_df": 1.0, "min_token_length": 2, "processes": 1}
CONSENSUS = {"top_n": 50, "min_count": 0, "merge": "union"}
TRAIN = {
    "scenarios": ["federated"],
    "model": {"n_topics": 3, "hidden_sizes": [8, 8]},
    "batch_size": 8,
    "max_steps": 12,
    "seed": 7,
    "device": "cpu",
}


def write_sites(tables: dict[str, pd.DataFrame], root: Path) -> dict[str, Path]:
    paths = {}
    for org, table in tables.items():
        folder = root / "raw" / org
        folder.mkdir(parents=True)
        table.to_parquet(folder / "part-00000.parquet")
        paths[org] = folder
    return paths


def in_process(paths: dict[str, Path], train: dict) -> tuple[list[str], dict[str, torch.Tensor]]:
    preprocess = from_mapping(PreprocessConfig, PREPROCESS, "preprocess")
    results = {org: preprocess_shards(ShardedTable.from_directory(p), preprocess) for org, p in paths.items()}
    vocab = build_vocabulary(
        {o: r.term_counts for o, r in results.items()}, from_mapping(ConsensusConfig, CONSENSUS, "c")
    )
    terms = vocab["term"].tolist()
    bows = {o: vectorize_frames(r.tokens.frames(), terms)[0] for o, r in results.items()}
    models = train_scenarios({o: b.subset("train").matrix for o, b in bows.items()}, TrainConfig.from_params(train))
    return terms, models["federated"].state


def node_configs(paths: dict[str, Path], root: Path) -> dict[int, dict]:
    return {
        100 + i: {"organisation": org, "data-path": str(path), "cache-dir": str(root / "cache" / org)}
        for i, (org, path) in enumerate(reversed(list(paths.items())))  # node order differs from the job's
    }


def job(orgs: list[str], train: dict) -> Job:
    return Job.from_dict(
        {"organisations": orgs, "preprocess": PREPROCESS, "vocab_consensus": CONSENSUS, "train": train}
    )


@pytest.mark.parametrize("validation", [0.0, 0.25])
def test_same_vocabulary_and_parameters_as_the_in_process_engine(tiny_raw_tables, tmp_path, validation) -> None:
    train = {**TRAIN, "validation_fraction": validation, "validation_every": 4}
    paths = write_sites(tiny_raw_tables, tmp_path)
    terms, expected = in_process(paths, train)
    grid = LocalGrid(client_app, node_configs(paths, tmp_path))
    result = run_federation(grid, job(list(paths), train))
    assert result.vocabulary["term"].tolist() == terms
    assert len(result.model.history) == 12
    assert result.model.state.keys() == expected.keys()
    worst = max(float((result.model.state[k] - expected[k]).abs().max()) for k in expected)
    assert worst <= 1e-5, f"max abs parameter difference {worst}"
    assert any(float((result.model.state[k] - expected[k]).abs().max()) == 0 for k in expected)
