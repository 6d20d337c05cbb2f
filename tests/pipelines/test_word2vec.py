"""The word2vec pipeline on the tiny corpus: sequences per organisation, three scenarios, the benchmarks."""

from __future__ import annotations

import json
import math

import pytest

from fedtopic_pipelines.core.lineage import LineageError
from fedtopic_pipelines.pipelines import preprocess, vocab_consensus, word2vec
from tests.conftest import PROJECT
from tests.pipelines.conftest import run_slice

ORGS = ["alpha", "beta", "gamma"]
WORD2VEC = {
    "train": {
        "model": {"family": "word2vec", "dimension": 8, "window": 3, "negatives": 3, "validation_pairs": 500},
        "optimizer": {"name": "sgd", "lr": 0.5},
        "batch_size": 32,
        "max_steps": 12,
        "validation_fraction": 0.2,
        "validation_every": 4,
        "mlflow_every": 4,
        "device": "cpu",
    },
    "evaluate": {
        "benchmarks_wheel": str(PROJECT / ".cache/benchmarks/hyperhyper-0.3.0-py3-none-any.whl"),
        "probes": ["player", "orbit", "nosuchword"],
        "neighbours": 3,
        "plot_words": 30,
    },
}


@pytest.fixture(scope="module")
def chain(request):
    from tests.conftest import make_tiny_raw_tables

    inputs = {
        **{f"clients.{o}.raw_documents": t for o, t in make_tiny_raw_tables().items()},
        "params:preprocess": {"min_df": 2, "max_df": 0.9},
        "params:vocab_consensus": {"top_n": 50, "min_count": 1, "merge": "union"},
        "params:privacy": {"vocab_k": 1},  # the vocabulary exchange reads it (plain: every term in the clear)
        "params:train": {},
        "params:evaluate": {},
        "params:word2vec": WORD2VEC,
        "params:organisations": ORGS,
    }
    pipe = preprocess.create_pipeline(ORGS) + vocab_consensus.create_pipeline(ORGS)
    upstream = run_slice(pipe, inputs)
    out = run_slice(word2vec.create_pipeline(ORGS), {**inputs, **upstream})
    return upstream, out


def test_the_pipeline_trains_every_scenario_and_scores_each_model(chain) -> None:
    upstream, out = chain
    models = out["word2vec_models"]
    assert set(models) == {"federated", "centralized", "local__alpha", "local__beta", "local__gamma"}
    assert all(m.config.model.family == "word2vec" and len(m.history) == 12 for m in models.values())
    history = out["word2vec_history"]
    federated = history["federated"]
    assert federated["validation_loss"]  # the server's validation from the organisations' held-out pairs
    assert len(federated["client_bytes"]) == 3 and all(len(v) == 12 for v in federated["client_bytes"].values())
    assert all(r > 1 for r in federated["bytes_ratio"])  # sparse rows are fewer bytes than the dense tables
    scores = out["word2vec_scores"]
    assert json.loads(json.dumps(scores)) is not None  # what the JSON dataset writes
    assert set(scores) == {*models, "gensim"}  # gensim's Word2Vec on the pooled sequences, scored alike
    run = scores["gensim"]["run"]
    assert (
        scores["gensim"]["scenario"] == "reference" and run["epochs"] == 1 and run["negatives"] == 5
    )  # ours: 3 shared by a batch
    assert run["tokens"] == sum(len(out[f"clients.{o}.sentences"].tokens) for o in ORGS)
    assert scores["gensim"]["metrics"]["analogy.google.total"] == 19544
    metrics = scores["federated"]["metrics"]
    for name in ("wordsim353", "simlex999", "men", "rare_words", "mturk287"):
        assert metrics[f"similarity.{name}.pairs"] > 0  # every pair counted, covered or not
        assert (
            metrics[f"similarity.{name}.out_of_vocabulary"] + metrics[f"similarity.{name}.covered"]
            == (metrics[f"similarity.{name}.pairs"])
        )
    assert metrics["analogy.google.total"] == 19544
    assert scores["federated"]["neighbours"]["nosuchword"] is None
    assert len(scores["federated"]["neighbours"]["player"]) == 3
    vectors = out["word2vec_vectors"]
    terms = upstream["common_vocabulary"]["term"].tolist()
    assert vectors["federated"].index_to_key == terms
    assert set(out["word2vec_figures"]) == {f"pca_{name}" for name in scores}
    assert vectors["gensim"].vector_size == 8
    assert out["word2vec_figures"]["pca_federated"].axes
    mlflow = out["word2vec_metrics_mlflow"]
    assert "federated.similarity.wordsim353.coverage" in mlflow
    assert all(math.isfinite(v[0]["value"]) for v in mlflow.values())
    assert {"federated.loss", "federated.bytes_ratio", "federated.validation_loss"} <= set(
        out["word2vec_training_mlflow"]
    )
    # speed in one unit for every model: ours from its timed rounds, gensim's from its own clock
    for name in models:
        assert history[name]["words_per_second"] > 0
        logged = out["word2vec_training_mlflow"][f"{name}.words_per_second"]
        assert logged[0]["value"] == history[name]["words_per_second"]
    assert mlflow["gensim.words_per_second"][0]["value"] == run["words_per_second"] > 0
    reports = {o: out[f"word2vec_report__{o}"] for o in ORGS}
    assert all(r["kept_documents"] > 0 for r in reports.values())


def test_models_of_another_vocabulary_are_refused(chain) -> None:
    from fedtopic_pipelines.pipelines.word2vec.nodes import evaluate_word_vectors

    upstream, out = chain
    vocabulary = upstream["common_vocabulary"].iloc[:-1]
    with pytest.raises(LineageError, match="vocabulary"):
        evaluate_word_vectors(out["word2vec_models"], vocabulary, WORD2VEC)


def test_the_topic_model_train_node_points_a_word_family_to_its_pipeline() -> None:
    from fedtopic_pipelines.core.config import ConfigError
    from fedtopic_pipelines.pipelines.train.nodes import train_models

    with pytest.raises(ConfigError, match=r"kedro run --pipelines=word2vec"):
        train_models(WORD2VEC["train"], ORGS, {}, {}, None)
