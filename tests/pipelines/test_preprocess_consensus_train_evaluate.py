"""Sliced runs of preprocess -> vocab_consensus -> train -> evaluate on a tiny corpus."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from gensim.corpora import Dictionary
from gensim.models.coherencemodel import CoherenceModel

from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.federated.engine import InProcessEngine
from fedtopic_pipelines.core.federated.messages import Instruction, Update
from fedtopic_pipelines.core.federation import run_federation
from fedtopic_pipelines.core.metrics.topics import redundancy
from fedtopic_pipelines.core.site import MemoryEndpoint
from fedtopic_pipelines.core.text.demo import CorpusError
from fedtopic_pipelines.core.vocab.consensus import EmptyVocabularyError
from fedtopic_pipelines.pipelines import embed, evaluate, preprocess, train, vocab_consensus
from tests.conftest import poisson_matrices
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
    """The raw tables and the blocks the size check before preprocessing reads."""
    return {
        **{f"clients.{o}.raw_documents": t for o, t in tables.items()},
        "params:train": TRAIN,
        "params:evaluate": EVAL,
        "params:privacy": {"vocab_k": 1},  # the vocabulary exchange reads it (plain: every term in the clear)
    }


def test_preprocess_keeps_tokens_and_term_counts_inside(tiny_raw_tables) -> None:
    out = run_slice(preprocess.create_pipeline(ORGS), {**_raw(tiny_raw_tables), "params:preprocess": PRE})
    tokens = out["clients.alpha.tokens"]
    assert "the" not in " ".join(tokens["tokens"]).split()  # stopword
    assert "1234" not in " ".join(tokens["tokens"]).split()  # number
    assert set(out["clients.alpha.term_counts"]) <= set(" ".join(tokens["tokens"]).split())
    assert out["preprocess_report__alpha"]["documents_in"] == 40
    crossing = {name for name in out if not name.startswith("clients.")}
    assert crossing == {f"{d}__{o}" for o in ORGS for d in ("preprocess_report", "document_counts")} | {
        "organisation_check"
    }  # only the reports and the counts of the ingestion report leave
    assert out["document_counts__alpha"] == {"train": 30, "test": 10}
    assert out["organisation_check"]["alpha"]["min_df_documents"] == 2


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
            {**inputs, "params:vocab_consensus": {**VOCAB, "merge": "intersection"}, "params:privacy": {"vocab_k": 1}},
        )


def test_floors_that_empty_the_vocabulary_name_the_parameters(tiny_raw_tables) -> None:
    counts = run_slice(preprocess.create_pipeline(ORGS), {**_raw(tiny_raw_tables), "params:preprocess": PRE})
    inputs = {k: v for k, v in counts.items() if k.startswith("clients.")}
    with pytest.raises(EmptyVocabularyError, match="'vocab_consensus.min_organisations' = 2"):
        run_slice(
            vocab_consensus.create_pipeline(ORGS),
            {
                **inputs,
                "params:vocab_consensus": {**VOCAB, "min_organisations": 2},
                "params:privacy": {"vocab_k": 1},
            },  # three disjoint vocabularies
        )


def _chain(orgs: list[str]):
    """preprocess -> vocab_consensus -> embed -> train -> evaluate."""
    return (
        preprocess.create_pipeline(orgs)
        + vocab_consensus.create_pipeline(orgs)
        + embed.create_pipeline(orgs)
        + train.create_pipeline(orgs)
        + evaluate.create_pipeline(orgs)
    )


def _caches(orgs: list[str], folder) -> dict:
    """Each organisation's embedding cache folder (a work folder in the catalog)."""
    return {f"clients.{o}.embedding_cache": folder / "embedding_cache" / o for o in orgs}


def _chain_inputs(tables, folder, train: dict, **params) -> dict:
    """Every input of :func:`_chain` over ``ORGS``: the raw tables, the caches and the parameter
    blocks, with ``train`` and any other ``params:<name>`` given."""
    return {
        **_raw(tables),
        **_caches(ORGS, folder),
        "params:preprocess": PRE,
        "params:vocab_consensus": VOCAB,
        "params:train": train,
        "params:organisations": ORGS,
        "params:evaluate": EVAL,
        **{f"params:{name}": value for name, value in params.items()},
    }


def test_full_chain_in_memory(tiny_raw_tables, tmp_path) -> None:
    data = _chain_inputs(tiny_raw_tables, tmp_path, TRAIN)
    pipe = _chain(ORGS)
    out = run_slice(pipe, data)
    assert not any(out[f"clients.{o}.embeddings"].computed for o in ORGS)  # ProdLDA reads none
    assert not (tmp_path / "embedding_cache").exists()
    vocab = out["common_vocabulary"]
    proposed = {t for o in ORGS for t in out[f"vocabulary_proposal__{o}"]}
    assert set(vocab["term"]) == proposed  # union of the three (disjoint) proposals
    assert all(n > VOCAB["min_count"] for o in ORGS for n in out[f"vocabulary_proposal__{o}"].values())
    assert len(proposed & set(out["clients.alpha.term_counts"])) < len(proposed)
    (merge,) = [n for n in pipe.nodes if n.name == "merge_vocabulary"]
    assert set(merge.inputs) == {
        "params:vocab_consensus",
        "params:privacy",
        *(f"{d}__{o}" for o in ORGS for d in ("vocabulary_proposal", "vocabulary_reveal")),
    }
    assert all(out[f"vocabulary_reveal__{o}"] == {} for o in ORGS)  # plain proposals: nothing to reveal
    assert out["consensus_report"]["privacy"]["rare_term_attack"]["pooled"]["recall"] == 1.0  # all read in the clear
    assert out["clients.alpha.bow"].matrix.shape[1] == len(vocab)
    report = out["vectorize_report__alpha"]
    assert report["documents"]["train"] + report["documents"]["test"] == len(out["clients.alpha.bow"])
    tokens = report["tokens"]["train"]
    assert tokens["in_vocabulary"] == out["clients.alpha.bow"].subset("train").matrix.sum()
    own = out["clients.alpha.tokens"]
    assert tokens["total"] == sum(len(t.split()) for t in own.loc[own["split"] == "train", "tokens"])
    assert tokens["outside_vocabulary"] == tokens["total"] - tokens["in_vocabulary"]
    assert tokens["of_proposed_terms_left_out"] == 0  # no floor: the union keeps every proposed term
    assert out["consensus_report"]["vocabulary_size"] == len(vocab)
    assert out["consensus_metrics_mlflow"]["vocabulary_size"] == [{"step": 0, "value": float(len(vocab))}]
    assert out["consensus_report"]["removed_by_floors"]["total"]["terms"] == 0
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
    _check_inputs_of_another_run_are_refused(out)


def _check_inputs_of_another_run_are_refused(out: dict) -> None:
    """Issue 14 part 7: artefacts of two runs side by side (a concurrent or a partial rerun with
    other parameters) stop the stage that reads them, naming them, instead of an IndexError."""
    from fedtopic_pipelines.core.lineage import LineageError
    from fedtopic_pipelines.pipelines.evaluate.nodes import (
        evaluate_organisation,
        select_coherence_candidates,
        summarise,
    )
    from fedtopic_pipelines.pipelines.train.nodes import train_models

    vocab, models, bows = out["common_vocabulary"], out["trained_models"], {o: out[f"clients.{o}.bow"] for o in ORGS}
    assert (
        {b.vocabulary for b in bows.values()}
        == {m.vocabulary for m in models.values()}
        == {out["metrics"]["lineage"]["vocabulary"]}
    )
    other = vocab.iloc[: len(vocab) // 2]  # another run's (smaller) vocabulary
    every_bow = r"clients\.alpha\.bow, clients\.beta\.bow, clients\.gamma\.bow were vectorised with vocabulary"
    with pytest.raises(LineageError, match=every_bow + ".*vocab_consensus"):
        train_models(TRAIN, ORGS, PRE, VOCAB, other, **bows)
    every_model = "trained model 'federated', trained model 'centralized', .* were trained on vocabulary"
    with pytest.raises(LineageError, match=every_model):
        select_coherence_candidates(models, other, EVAL)  # on main: IndexError in top_words
    candidates, none = out["coherence_candidates"], out["clients.alpha.embeddings"]
    fewer = {n: m for n, m in models.items() if n != "centralized"}  # models retrained since
    with pytest.raises(LineageError, match="coherence_candidates was built from models"):
        evaluate_organisation(fewer, out["clients.alpha.tokens"], bows["alpha"], none, candidates, EVAL)
    with pytest.raises(LineageError, match="evaluate parameters"):
        other_params = {**EVAL, "top_words": 6}
        evaluate_organisation(models, out["clients.alpha.tokens"], bows["alpha"], none, candidates, other_params)
    evaluations = {o: out[f"evaluation__{o}"] for o in ORGS}
    stale = {**evaluations["beta"], "lineage": {**evaluations["beta"]["lineage"], "candidates": "0" * 16}}
    with pytest.raises(LineageError, match="evaluation__beta was built from candidates 0000000000000000"):
        summarise(models, vocab, ORGS, candidates, EVAL, **{**evaluations, "beta": stale})


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
    # every round's participation (the screen's rejections among the reasons), for the federated model only
    took_part = metrics["models"]["federated"]["participation"]["took_part"]
    assert took_part == dict.fromkeys(ORGS, metrics["models"]["federated"]["steps"])
    assert "participation" not in metrics["models"]["centralized"]
    local_mean = metrics["scenarios"]["non_collaborative"]["c_npmi"]
    assert local_mean["kind"] == "mean_of_local_models" and local_mean["n_organisations"] == 3
    assert local_mean["value"] == pytest.approx(np.mean([metrics["models"][f"local__{o}"]["c_npmi"] for o in ORGS]))
    headline = out["headline_metrics"]
    assert set(headline) == {"federated", "centralized", "non_collaborative_local_mean"}
    assert headline["federated"]["c_npmi"] == fed["c_npmi"]["value"]
    assert out["evaluation_metrics_mlflow"]["scenario.federated.c_npmi"]["value"] == fed["c_npmi"]["value"]
    _check_redundancy(out)


def _check_redundancy(out: dict) -> None:
    """Every model reports its largest top-word overlap and inverted RBO (metrics.json, headline,
    MLflow), and a model with a duplicate pair of topics is a warning naming the topic count."""
    metrics, topics = out["metrics"], out["topics"]
    for name, entry in metrics["models"].items():
        found = redundancy(topics[name], duplicate_at=5)
        assert entry["largest_topic_overlap"] == found.largest_overlap
        assert entry["inverted_rbo"] == pytest.approx(found.inverted_rbo)
        assert out["evaluation_metrics_mlflow"][f"{name}.inverted_rbo"]["value"] == pytest.approx(found.inverted_rbo)
        warned = {w["kind"] for w in metrics["quality_warnings"] if w["model"] == name}
        assert ("duplicate_topics" in warned) == bool(found.duplicate_pairs)
    scenario = metrics["scenarios"]["federated"]
    assert scenario["largest_topic_overlap"]["value"] == metrics["models"]["federated"]["largest_topic_overlap"]
    assert 0.0 <= out["evaluation_metrics_mlflow"]["scenario.centralized.inverted_rbo"]["value"] <= 1.0
    assert "inverted_rbo" not in out["headline_metrics"]["federated"]  # dvc metrics show stays one narrow table


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


# A user's own small corpus: S2ORC-like fields of 5-11 training documents ----------------
FIELDS = {
    "computer_science": ("algorithm network software compiler processor database protocol cache kernel parser", 5),
    "economics": ("market price inflation trade monetary demand supply wage tariff currency", 6),
    "sociology": ("community gender class migration family identity inequality urban youth ritual", 8),
    "philosophy": ("ontology ethics kant virtue epistemology metaphysics consciousness reason moral truth", 9),
    "political_science": ("election party parliament voter democracy regime policy coalition senate ballot", 11),
}
ACADEMIC = ["study", "analysis", "results", "approach", "theory", "evidence", "framework", "effect"]


def s2orc_like_tables() -> dict:
    """Five fields of study, 5-11 training and 2 test documents each: the S2ORC sample's sizes."""
    rng = np.random.default_rng(7)
    tables = {}
    for field, (words, n_train) in FIELDS.items():
        rows = []
        for i in range(n_train + 2):  # each paper on 4 of its field's words and 2 shared ones, ~7 times each
            chosen = [*rng.choice(words.split(), size=4, replace=False), *rng.choice(ACADEMIC, size=2, replace=False)]
            text = " ".join(rng.choice(chosen, size=40))
            rows.append((f"{field}:{i}", field, text, field, "train" if i < n_train else "test"))
        tables[field] = pd.DataFrame(rows, columns=["doc_id", "organisation", "text", "label", "split"])
    return tables


def test_an_absolute_min_df_too_large_for_small_fields_is_named_before_any_preprocessing() -> None:
    orgs = list(FIELDS)
    pipe = preprocess.create_pipeline(orgs)
    cleaning = [node for node in pipe.nodes if node.name.endswith("clean_documents")]
    assert len(cleaning) == 5 and all("organisation_check" in node.inputs for node in cleaning)  # all wait
    inputs = {**_raw(s2orc_like_tables()), "params:preprocess": {"min_df": 5, "max_df": 0.5}}
    with pytest.raises(CorpusError, match="^before preprocessing: ") as caught:
        run_slice(pipe, inputs)
    message = str(caught.value)
    assert "organisation 'computer_science' (5 training, 2 test documents): 'preprocess.min_df' = 5" in message
    assert "organisation 'philosophy' (9 training, 2 test documents)" in message
    assert "political_science" not in message  # 11 documents: 5 <= 0.5 * 11
    assert "set 'preprocess.min_df' to a share" in message


def test_the_shipped_s2orc_parameters_run_the_whole_chain_on_small_fields(tmp_path) -> None:
    from fedtopic_pipelines.flower.cli import project_parameters

    params = project_parameters("s2orc")
    orgs = list(FIELDS)
    assert params["organisations"] == orgs
    assert isinstance(params["preprocess"]["min_df"], float)  # a share: it scales with each field
    data = {
        **_raw(s2orc_like_tables()),
        "params:preprocess": params["preprocess"],
        "params:vocab_consensus": params["vocab_consensus"],
        "params:train": {**TRAIN, "max_steps": 5, "scenarios": ["federated", "centralized"]},
        "params:organisations": orgs,
        "params:evaluate": EVAL,
        **_caches(orgs, tmp_path),
    }
    out = run_slice(_chain(orgs), data)
    assert out["organisation_check"]["computer_science"]["min_df_documents"] == 1
    assert all(len(out[f"clients.{o}.bow"].subset("train")) >= 2 for o in orgs)
    assert set(out["metrics"]["models"]) == {"federated", "centralized"}
    assert "the SVM needs at least 6" in out["organisation_check"]["economics"]["warnings"][0]  # said at the start


def _contextual_inputs(family: str, tables, sentence_model, folder) -> tuple[dict, dict]:
    """The chain's inputs with a contextual family embedding by the tiny test encoder: the train
    block and every input the chain reads."""
    from tests.conftest import TINY_EMBEDDING_SIZE

    model = {**TRAIN["model"], "family": family, "embedding_size": TINY_EMBEDDING_SIZE}
    params = {**TRAIN, "max_steps": 40, "model": model, "embeddings": {"model": str(sentence_model)}}
    data = _chain_inputs(tables, folder, params)
    return params, data


@pytest.mark.parametrize("family", ["combinedtm", "zeroshottm"])
def test_the_chain_trains_and_evaluates_a_contextual_family(family, tiny_raw_tables, tiny_sentence_model, tmp_path):
    """Issue 15: each organisation embeds its own documents (cached in its own folder), the
    models train on bag of words + embeddings and are evaluated with the test documents'."""
    from tests.conftest import TINY_EMBEDDING_SIZE

    params, data = _contextual_inputs(family, tiny_raw_tables, tiny_sentence_model, tmp_path)
    out = run_slice(_chain(ORGS), data)
    for org in ORGS:
        embedded, bow = out[f"clients.{org}.embeddings"], out[f"clients.{org}.bow"]
        assert embedded.computed and embedded.values.shape == (len(bow), TINY_EMBEDDING_SIZE)
    models = out["trained_models"]
    assert {m.config.model.family for m in models.values()} == {family}
    metrics = out["metrics"]["models"]["federated"]
    assert math.isfinite(metrics["c_npmi"]) and math.isfinite(metrics["organisations"]["alpha"]["perplexity"])
    assert 0 <= metrics["organisations"]["alpha"]["macro_f1"] <= 1
    # embeddings of another run's documents (other rows) are refused, not misaligned
    from fedtopic_pipelines.core.lineage import LineageError
    from fedtopic_pipelines.pipelines.train.nodes import EMBEDDINGS, train_models

    bows = {o: out[f"clients.{o}.bow"] for o in ORGS}
    swapped = {EMBEDDINGS + o: out[f"clients.{o}.embeddings"] for o in ORGS}
    swapped[EMBEDDINGS + "alpha"] = out["clients.beta.embeddings"]
    with pytest.raises(LineageError, match=r"clients\.alpha\.embeddings were computed for other documents"):
        train_models(params, ORGS, PRE, VOCAB, out["common_vocabulary"], **bows, **swapped)


def test_the_real_data_experiment_writes_amwmd_per_node_and_model(tiny_raw_tables, tiny_sentence_model, tmp_path):
    """Issue 15 part 4 (gFedNTM Fig. 4) on the tiny corpus: node models, federated at two topic
    counts, AMWMD of every model against each node's topics, pooled NPMI beside it."""
    from fedtopic_pipelines.pipelines import realdata

    _, data = _contextual_inputs("zeroshottm", tiny_raw_tables, tiny_sentence_model, tmp_path)
    data["params:realdata"] = {"node_topics": 3, "federated_topics": [3, 5], "top_words": 5}
    pipe = preprocess.create_pipeline(ORGS) + vocab_consensus.create_pipeline(ORGS) + embed.create_pipeline(ORGS)
    out = run_slice(pipe + realdata.create_pipeline(ORGS), data)
    models = out["realdata_models"]
    assert set(models) == {"local__alpha", "local__beta", "local__gamma", "federated_3", "federated_5"}
    assert models["federated_5"].config.model.n_topics == 5 and models["local__beta"].config.model.n_topics == 3
    result = out["realdata_amwmd"]
    assert json.loads(json.dumps(result)) == result  # what the JSON dataset writes
    assert set(result["amwmd"]) == set(ORGS) and set(result["amwmd"]["alpha"]) == set(models)
    assert result["amwmd"]["alpha"]["local__alpha"] == pytest.approx(0, abs=1e-6)  # a node's own model
    assert result["amwmd"]["alpha"]["local__beta"] > 0.1
    assert set(result["claim"]["alpha"]["federated_better_than_every_other_node"]) == {"federated_3", "federated_5"}
    assert math.isfinite(result["pooled"]["federated_5"]["c_npmi"])
    assert out["realdata_figure"].axes
    # every figure of the report is an MLflow metric too (realdata.<key>)
    logged = out["realdata_metrics_mlflow"]
    assert logged["amwmd.alpha.local__beta"] == [{"step": 0, "value": result["amwmd"]["alpha"]["local__beta"]}]
    assert logged["pooled.federated_5.c_npmi"][0]["value"] == result["pooled"]["federated_5"]["c_npmi"]
    assert {f"best_other_node.{org}" for org in ORGS} <= set(logged)


def test_the_chain_trains_and_evaluates_fednmf_and_prodlda_under_a_weights_rule(tiny_raw_tables, tmp_path) -> None:
    """Issue 17: the NMF family and ProdLDA's FedAvg of local epochs through train and evaluate;
    NMF reports no perplexity (it has no word distribution), both are scored otherwise."""
    nmf = {
        "model": {"family": "nmf", "n_topics": 3, "mi_weight": 0.1, "inference_epochs": 2},
        "optimizer": {"name": "sgd", "lr": 0.05},
        "aggregation": {"client_fraction": 0.67, "local_epochs": 2},
        "batch_size": 8,
        "max_steps": 6,
    }
    fedavg = {**TRAIN, "max_steps": 6, "model": {**TRAIN["model"], "normalization": "layer"}}
    fedavg["aggregation"] = {"rule": "fedyogi", "local_epochs": 2}
    for params in (nmf, fedavg):
        data = _chain_inputs(tiny_raw_tables, tmp_path, params)
        out = run_slice(_chain(ORGS), data)
        models = out["trained_models"]
        assert all(len(m.history) == 6 for m in models.values())
        federated = out["metrics"]["models"]["federated"]
        assert math.isfinite(federated["c_npmi"]) and 0 <= federated["organisations"]["alpha"]["macro_f1"] <= 1
        perplexity = federated["organisations"]["alpha"]["perplexity"]
        assert (perplexity is None) == (params is nmf)
        if params is nmf:
            assert all(len(r.sampled) == 2 for r in models["federated"].history)  # C = 0.67 of 3
            assert "h" not in models["federated"].state  # H stays with the organisations


def test_sample_level_dp_through_train_evaluate_and_the_privacy_report(tiny_raw_tables, tmp_path) -> None:
    """``privacy.dp.level: sample`` reaches the train node's federated scenario only (the references
    train without a defence), and the privacy report gives the epsilon it spent, for one document."""
    from fedtopic_pipelines.pipelines import privacy as privacy_pipeline

    dp = {"dp": {"level": "sample", "clip": 1.0, "noise_multiplier": 1.0}, "attacks": False}
    params = {**TRAIN, "max_steps": 6, "model": {**TRAIN["model"], "normalization": "layer"}}
    data = _chain_inputs(tiny_raw_tables, tmp_path, params, privacy=dp)
    out = run_slice(_chain(ORGS) + privacy_pipeline.create_pipeline(ORGS), data)
    models = out["trained_models"]
    assert all(math.isnan(r.loss) for r in models["federated"].history)  # under DP no loss leaves
    assert all(not math.isnan(r.loss) for r in models["centralized"].history)
    epsilon = out["privacy_report"]["epsilon"]
    assert set(epsilon) == {"federated"}
    assert epsilon["federated"]["protects"] == "one document of an organisation"
    assert math.isfinite(epsilon["federated"]["epsilon_rdp"]) and epsilon["federated"]["rounds"] == 6
    (logged,) = out["training_metrics_mlflow"]["federated.epsilon_rdp"]  # MLflow: train.federated.epsilon_rdp
    assert logged == {"value": epsilon["federated"]["epsilon_rdp"], "step": 5}
    assert math.isfinite(out["metrics"]["models"]["federated"]["c_npmi"])


class BrokenInSomeRounds(MemoryEndpoint):
    """An organisation whose site breaks in some training rounds (its disk fills), then recovers."""

    def __init__(self, name: str, train, broken: set[int]) -> None:
        super().__init__(name, train)
        self.broken = broken

    def handle(self, instruction: Instruction) -> Update:
        if instruction.round in self.broken and instruction.config.get("action") != "evaluate":
            raise OSError("disk full")
        return super().handle(instruction)


def test_the_training_report_names_who_was_left_out_of_which_round_and_why() -> None:
    """The in-process engine, real endpoints, one of them failing in rounds 1 and 3: the train
    node's JSON history and its MLflow series say so, per organisation."""
    data = dict(zip(ORGS, poisson_matrices((30, 21, 45), 40), strict=True))
    endpoints = [MemoryEndpoint("alpha", data["alpha"]), BrokenInSomeRounds("beta", data["beta"], {1, 3})]
    endpoints.append(MemoryEndpoint("gamma", data["gamma"]))
    config = TrainConfig.from_params({**TRAIN, "max_steps": 5, "scenarios": ["federated"], "device": "cpu"})
    vocabulary = pd.DataFrame({"term": [f"w{j}" for j in range(40)]})
    model = run_federation(InProcessEngine(endpoints), ORGS, config, vocabulary=vocabulary, progress=False).model
    history, mlflow = train.nodes.training_histories({"federated": model}, {}, ORGS, every=50)
    report = json.loads(json.dumps(history))["federated"]["participation"]  # as training_history.json holds it
    assert report["took_part"] == {"alpha": 5, "beta": 3, "gamma": 5}
    assert report["left_out"] == {"beta": [{"why": "failed", "reason": "OSError: disk full", "rounds": [1, 3]}]}
    assert report["totals"]["failed"] == 2 and report["totals"]["took_part"] == 13
    assert mlflow["federated.participation.beta.left_out"] == [
        {"value": 1, "step": 1},
        {"value": 2, "step": 3},
        {"value": 2, "step": 4},
    ]
    assert mlflow["federated.participation.alpha.left_out"] == [{"value": 0, "step": 4}]
