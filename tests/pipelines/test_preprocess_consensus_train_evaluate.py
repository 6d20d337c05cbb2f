"""Sliced runs of preprocess -> vocab_consensus -> train -> evaluate on a tiny corpus."""

import math

import numpy as np
import pytest
from gensim.corpora import Dictionary
from gensim.models.coherencemodel import CoherenceModel

from fedtopic_pipelines.core.text.demo import CorpusError
from fedtopic_pipelines.core.vocab.consensus import EmptyVocabularyError
from fedtopic_pipelines.pipelines import evaluate, preprocess, train, vocab_consensus
from tests.pipelines.conftest import run_slice

ORGS = ["alpha", "beta", "gamma"]
PRE = {"min_df": 2, "max_df": 0.9}
VOCAB = {"top_n": 50, "min_count": 1, "merge": "union"}
TRAIN = {
    "model": {"n_topics": 3, "hidden_sizes": [16]},
    "optimizer": {"lr": 0.02},
    "batch_size": 8,
    "max_steps": 150,
    "mlflow_every": 50,
}
EVAL = {"coherence_measures": ["c_npmi", "u_mass"], "top_words": 5, "diversity_top_words": 5}


def _raw(tables):
    return {f"clients.{o}.raw_documents": t for o, t in tables.items()}


def test_preprocess_keeps_tokens_and_term_counts_inside(tiny_raw_tables) -> None:
    out = run_slice(preprocess.create_pipeline(ORGS), {**_raw(tiny_raw_tables), "params:preprocess": PRE})
    tokens = out["clients.alpha.tokens"]
    assert "the" not in " ".join(tokens["tokens"]).split()  # stopword
    assert "1234" not in " ".join(tokens["tokens"]).split()  # number
    assert set(out["clients.alpha.term_counts"]) <= set(" ".join(tokens["tokens"]).split())
    assert out["preprocess_report__alpha"]["documents_in"] == 40
    crossing = {name for name in out if not name.startswith("clients.")}
    assert crossing == {f"preprocess_report__{o}" for o in ORGS}  # only the reports leave


def test_empty_organisation_after_cleaning_is_named(tiny_raw_tables) -> None:
    tables = dict(tiny_raw_tables)
    tables["beta"] = tables["beta"].assign(text="the and of 42")
    with pytest.raises(CorpusError, match="organisation 'beta'"):
        run_slice(preprocess.create_pipeline(ORGS), {**_raw(tables), "params:preprocess": PRE})


def test_intersection_of_disjoint_vocabularies_is_an_error(tiny_raw_tables) -> None:
    counts = run_slice(preprocess.create_pipeline(ORGS), {**_raw(tiny_raw_tables), "params:preprocess": PRE})
    inputs = {k: v for k, v in counts.items() if k.startswith("clients.")}
    with pytest.raises(EmptyVocabularyError, match="intersection"):
        run_slice(
            vocab_consensus.create_pipeline(ORGS),
            {**inputs, "params:vocab_consensus": {**VOCAB, "merge": "intersection"}},
        )


def test_full_chain_in_memory(tiny_raw_tables) -> None:
    data = {
        **_raw(tiny_raw_tables),
        "params:preprocess": PRE,
        "params:vocab_consensus": VOCAB,
        "params:train": TRAIN,
        "params:organisations": ORGS,
        "params:evaluate": EVAL,
    }
    pipe = (
        preprocess.create_pipeline(ORGS)
        + vocab_consensus.create_pipeline(ORGS)
        + train.create_pipeline(ORGS)
        + evaluate.create_pipeline(ORGS)
    )
    out = run_slice(pipe, data)
    vocab = out["common_vocabulary"]
    proposed = {t for o in ORGS for t in out[f"vocabulary_proposal__{o}"]}
    assert set(vocab["term"]) == proposed  # union of the three (disjoint) proposals
    assert all(n > VOCAB["min_count"] for o in ORGS for n in out[f"vocabulary_proposal__{o}"].values())
    assert len(proposed & set(out["clients.alpha.term_counts"])) < len(proposed)
    (merge,) = [n for n in pipe.nodes if n.name == "merge_vocabulary"]
    assert set(merge.inputs) == {"params:vocab_consensus", *(f"vocabulary_proposal__{o}" for o in ORGS)}
    assert out["clients.alpha.bow"].matrix.shape[1] == len(vocab)
    report = out["vectorize_report__alpha"]
    assert report["documents"]["train"] + report["documents"]["test"] == len(out["clients.alpha.bow"])
    models = out["trained_models"]
    assert set(models) == {"federated", "centralized", "local__alpha", "local__beta", "local__gamma"}
    assert all(len(m.history) == 150 for m in models.values())
    history = out["training_history"]
    assert set(history["federated"]["client_loss"]) == set(ORGS)
    assert len(out["training_metrics_mlflow"]["federated.loss"]) == 4  # rounds 0, 50, 100 and the last
    metrics = out["metrics"]
    assert set(metrics["scenarios"]) == {"federated", "centralized", "non_collaborative", "non_collaborative_on_others"}
    fed = metrics["models"]["federated"]["organisations"]["alpha"]
    assert math.isfinite(fed["perplexity"]) and 0 <= fed["macro_f1"] <= 1
    # a local model covers its own organisation's words, not the others'
    local = metrics["models"]["local__alpha"]["organisations"]
    assert local["alpha"]["topic_coverage"] > local["beta"]["topic_coverage"]
    assert len(out["topics"]["federated"]) == 3
    assert out["scenario_comparison"].axes
    assert any(k.startswith("federated.alpha.") for k in out["evaluation_metrics_mlflow"])
    _check_pooled_coherence(out)


def _check_pooled_coherence(out: dict) -> None:
    """Headline coherence is gensim's on the concatenated texts; only counts of candidates crossed."""
    metrics, topics = out["metrics"], out["topics"]
    texts = [t.split() for o in ORGS for t in out[f"clients.{o}.tokens"]["tokens"]]
    candidates = out["coherence_candidates"]
    assert set(candidates["words"]) == {w for ts in topics.values() for t in ts for w in t}
    sent = out["evaluation__beta"]["coherence_counts"]
    assert set(sent) == {"boolean_document", "sliding_window_10"}
    assert all(len(c["occurrences"]) == len(candidates["words"]) for c in sent.values())
    for name in ("federated", "local__alpha"):
        for measure in ("c_npmi", "u_mass"):
            model = CoherenceModel(
                topics=topics[name], texts=texts, dictionary=Dictionary(texts), coherence=measure, processes=1
            )
            assert metrics["models"][name][measure] == pytest.approx(model.get_coherence(), abs=1e-9)
    fed = metrics["scenarios"]["federated"]
    assert fed["c_npmi"]["kind"] == "pooled" and fed["c_npmi"]["covers"] == ORGS
    assert fed["c_npmi"]["value"] == metrics["models"]["federated"]["c_npmi"]
    assert fed["perplexity"]["covers"] == ORGS and fed["perplexity"]["kind"] == "mean"
    secondary = metrics["models"]["federated"]["organisations"]["beta"]
    assert "per_organisation.c_npmi" in secondary and "c_npmi" not in secondary
    local_mean = metrics["scenarios"]["non_collaborative"]["c_npmi"]
    assert local_mean["kind"] == "mean_of_local_models" and local_mean["n_organisations"] == 3
    assert local_mean["value"] == pytest.approx(np.mean([metrics["models"][f"local__{o}"]["c_npmi"] for o in ORGS]))
    headline = out["headline_metrics"]
    assert set(headline) == {"federated", "centralized", "non_collaborative_local_mean"}
    assert headline["federated"]["c_npmi"] == fed["c_npmi"]["value"]
    assert out["evaluation_metrics_mlflow"]["scenario.federated.c_npmi"]["value"] == fed["c_npmi"]["value"]


def test_a_scenario_mean_over_a_subset_says_so() -> None:
    from fedtopic_pipelines.pipelines.evaluate.nodes import _mean_over, headline_metrics

    full = _mean_over({"alpha": 1.0, "beta": 3.0, "gamma": 2.0})
    assert full == {"value": 2.0, "kind": "mean", "covers": ORGS, "n_organisations": 3, "left_out": []}
    subset = _mean_over({"alpha": 1.0, "beta": None, "gamma": float("nan")})
    assert subset["kind"] == "mean_over_subset" and subset["value"] == 1.0
    assert subset["covers"] == ["alpha"] and subset["left_out"] == ["beta", "gamma"]
    pooled = {"value": 0.1, "kind": "pooled", "covers": ORGS, "n_organisations": 3, "left_out": []}
    scenarios = {"federated": {"c_npmi": pooled, "perplexity": full, "macro_f1": subset}}
    assert headline_metrics(scenarios) == {
        "federated": {
            "c_npmi": 0.1,
            "perplexity_mean": 2.0,
            "perplexity_n_organisations": 3,
            "macro_f1_mean": 1.0,
            "macro_f1_n_organisations": 1,
        }
    }
