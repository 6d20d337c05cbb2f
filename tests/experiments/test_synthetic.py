import numpy as np
import pytest

from fedtopic_pipelines.core.config import ConfigError
from fedtopic_pipelines.core.metrics.similarity import align_topics
from fedtopic_pipelines.core.synthetic import generate
from fedtopic_pipelines.experiments.config import SyntheticExperimentConfig
from fedtopic_pipelines.experiments.synthetic import (
    consensus_matrices,
    run_point,
    summarise_scenarios,
)

TINY = {
    "sweep": "A",
    "sweeps": {"A": {"parameter": "n_shared", "values": [2]}, "B": {"parameter": "eta", "values": [0.05, 1.0]}},
    "repetitions": 1,
    "generator": {
        "n_organisations": 2,
        "vocab_size": 120,
        "n_topics": 4,
        "n_shared": 2,
        "n_train": 40,
        "n_validation": 10,
        "doc_length": [30, 40],
    },
    "consensus": {"top_n": 120, "min_count": 0},
    "inference_samples": 3,
    "baseline_draws": 2,
    "train": {
        "model": {"n_topics": 4, "hidden_sizes": [8]},
        "batch_size": 8,
        "max_steps": None,
        "max_epochs": 2,
        "patience": 2,
        "device": "cpu",
        "validation_fraction": 0.25,
    },
}


def test_a_point_scores_every_model_on_all_validation_documents_deterministically() -> None:
    config = SyntheticExperimentConfig.from_params(TINY)
    point = config.points()[0]
    first, second = run_point(config, point, progress=False), run_point(config, point, progress=False)
    assert [r["model"] for r in first.rows] == ["federated", "centralized", "local__org1", "local__org2"]
    for row in first.rows:
        assert row["n_validation_documents"] == 20
        assert row["dss"] >= 0.0 and 0.0 < row["tss"] <= 4.0
        assert 0.0 < row["tss_baseline"] < 4.0
        assert row["steps"] == 2 * 4  # 2 epochs of ceil(30 / 8) steps (no early stop within 2 validations)
    assert [(r["dss"], r["tss"]) for r in first.rows] == [(r["dss"], r["tss"]) for r in second.rows]
    summary = summarise_scenarios(first.rows)
    local = next(r for r in summary if r["scenario"] == "non_collaborative")
    assert local["n_models"] == 2
    assert local["dss"] == pytest.approx(np.mean([r["dss"] for r in first.rows[2:]]))


def test_consensus_reorders_terms_and_alignment_restores_the_generator_order() -> None:
    config = SyntheticExperimentConfig.from_params(TINY)
    corpus = generate(config.points()[0].generator_config(config))
    vocabulary, train, _ = consensus_matrices(corpus, config.consensus)
    assert vocabulary != corpus.vocabulary[: len(vocabulary)]  # most frequent first, not term0, term1, ...
    for name, org in corpus.organisations.items():
        counts = np.asarray(train[name].sum(axis=0))
        restored = align_topics(counts, vocabulary, corpus.vocabulary)
        np.testing.assert_array_equal(restored.ravel(), np.asarray(org.train.sum(axis=0)).ravel())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sweep": "C"}, "parameter 'synthetic.sweep' is 'C'"),
        ({"sweeps": {"A": {"parameter": "n_shared", "values": []}}}, r"synthetic\.sweeps\.A\.values' is \(\)"),
        ({"sweeps": {}}, r"synthetic\.sweeps' is empty"),
        ({"sweeps": {"A": {"parameter": "alpha", "values": [1]}}}, r"synthetic\.sweeps\.A\.parameter"),
        ({"sweeps": {"A": {"parameter": "n_shared", "values": [6]}}}, r"synthetic\.generator\.n_shared"),
        ({"sweeps": {"A": {"parameter": "n_shared", "values": [1]}}}, r"cannot be split evenly"),
        ({"sweeps": {"A": {"parameter": "eta", "values": [0.0]}}}, r"synthetic\.generator\.eta"),
        ({"repetitions": 0}, r"synthetic\.repetitions"),
        ({"inference_samples": -1}, r"synthetic\.inference_samples"),
        ({"train": {**TINY["train"], "validation_fraction": 1.0}}, r"'synthetic\.train\.validation_fraction'"),
        ({"colour": "red"}, r"synthetic\.colour"),
        ({"sweeps": {"A": {"parameter": "n_shared", "values": [2], "scenarios": ["fed"]}}}, r"sweeps\.A\.scenarios"),
    ],
)
def test_bad_sweep_parameters_are_named_before_any_training(change: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SyntheticExperimentConfig.from_params({**TINY, **change})


def test_a_sweep_can_train_only_some_scenarios() -> None:
    config = SyntheticExperimentConfig.from_params(
        {**TINY, "sweeps": {"A": {"parameter": "n_shared", "values": [2], "scenarios": ["federated"]}}}
    )
    result = run_point(config, config.points()[0], progress=False)
    assert [r["model"] for r in result.rows] == ["federated"]
