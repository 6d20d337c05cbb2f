"""The fednmf pipeline on the tiny corpus: every method at two numbers of topics, the organisations'
counts into the pooled NPMI, macro-F1 and accuracy, the paper's tables and figures, the claims,
nested MLflow runs."""

from __future__ import annotations

import math

import pytest

from fedtopic_pipelines.core.config import ConfigError, from_mapping
from fedtopic_pipelines.experiments.config import FEDNMF_METHODS, FedNMFRunConfig
from fedtopic_pipelines.pipelines import fednmf, preprocess, vocab_consensus
from tests.pipelines.conftest import run_slice

ORGS = ["alpha", "beta", "gamma"]
FEDNMF = {
    "topics": [3, 4],
    "mi_weight": 0.5,
    "train": {
        "model": {"family": "nmf", "inference_epochs": 2},
        "optimizer": {"name": "sgd", "lr": 0.05},
        "aggregation": {"client_fraction": 0.67, "local_epochs": 2},
        "batch_size": 8,
        "max_steps": 4,
        "device": "cpu",
    },
    "lda": {"passes": 2, "iterations": 10},
    "sklearn_max_iter": 30,
    "evaluate": {"curve_topics": 4, "curve_points": 2},
    "heterogeneity": {"alphas": [0.5, 5.0], "clients": [2, 3], "methods": ["fedavg", "fedadam_mi"], "topics": 3},
}


def _run_fednmf(settings: dict) -> dict:
    """The chain from the tiny corpus's raw tables through fednmf, with ``settings`` as its block."""
    from tests.conftest import make_tiny_raw_tables

    inputs = {
        **{f"clients.{o}.raw_documents": t for o, t in make_tiny_raw_tables().items()},
        "params:preprocess": {"min_df": 2, "max_df": 0.9},
        "params:vocab_consensus": {"top_n": 50, "min_count": 1, "merge": "union"},
        "params:privacy": {"vocab_k": 1},  # the vocabulary exchange reads it (plain: every term in the clear)
        "params:train": {},
        "params:evaluate": {},
        "params:fednmf": settings,
        "params:organisations": ORGS,
    }
    upstream = run_slice(preprocess.create_pipeline(ORGS) + vocab_consensus.create_pipeline(ORGS), inputs)
    return run_slice(fednmf.create_pipeline(ORGS), {**inputs, **upstream})


@pytest.fixture(scope="module")
def chain():
    return _run_fednmf(FEDNMF)


def test_every_method_at_every_number_of_topics_is_trained_and_scored(chain) -> None:
    runs = chain["fednmf_tables"]["runs"]
    assert sorted(zip(runs["method"], runs["topics"], strict=True)) == sorted(
        (m, k) for m in FEDNMF_METHODS for k in (3, 4)
    )
    assert all(0 <= v <= 1 for v in runs["macro_f1"]) and all(0 <= v <= 1 for v in runs["accuracy"])
    assert all(-1 <= v <= 1 for v in runs["we_coherence"]) and all(runs["we_coverage"] > 0.5)
    assert runs["inverted_rbo"].between(0.0, 1.0).all() and (runs["largest_topic_overlap"] >= 0).all()
    assert sum(v is not None and math.isfinite(v) for v in runs["npmi"]) >= len(runs) // 2  # from the summed counts
    federated = runs[runs["method"].str.startswith("fed") & (runs["method"] != "fedlda")]
    assert (federated["bytes"] > 0).all() and (runs.loc[runs["method"] == "nmf_sgd", "bytes"] == 0).all()
    weights = federated[federated["method"] != "fedexact"]
    assert (weights["rounds"] == 4).all()
    # FedNMF exact runs scikit-learn's iterations: up to sklearn_max_iter, fewer when it converges
    exact = runs[runs["method"] == "fedexact"]
    assert len(exact) == 2 and exact["rounds"].between(2, 30).all()
    # gensim's distributed scheme equals its batch LDA on the concatenated documents
    lda, fedlda = (runs[runs["method"] == m].sort_values("topics") for m in ("lda", "fedlda"))
    assert lda["we_coherence"].tolist() == fedlda["we_coherence"].tolist()
    assert lda["macro_f1"].tolist() == fedlda["macro_f1"].tolist()


def test_the_tables_figures_claims_and_mlflow_runs_follow_the_paper(chain) -> None:
    tables, figures, metrics = chain["fednmf_tables"], chain["fednmf_figures"], chain["fednmf_metrics"]
    assert tables["table3_coherence"]["method"].tolist() == list(FEDNMF_METHODS)
    assert set(tables["table4_classification"].columns) == {
        "method",
        "macro_f1",
        "accuracy",
        "paper_pooled_macro_f1",
        "paper_pooled_accuracy",
    }
    assert set(figures) == {"fig2_accuracy_vs_topics", "fig3_f1_vs_bytes", "fig4_heterogeneity"}
    curves = tables["curves"]
    # 9 federated methods (8 weights rules, FedNMF exact), 2 points each
    assert set(curves["topics"]) == {4} and len(curves) == 9 * 2
    assert (curves.groupby("method")["bytes"].diff().dropna() > 0).all()  # bytes accumulate
    heterogeneity = tables["heterogeneity"]
    assert sorted(set(zip(heterogeneity["alpha"], heterogeneity["clients"], strict=True))) == [
        (0.5, 3),
        (1.0, 2),
        (1.0, 3),
        (5.0, 3),
    ]
    assert set(metrics["claims"]) == {
        "mi_improves_centralized_f1",
        "mi_improves_federated_f1",
        "fednmf_mi_beats_fedlda",
        "federated_approaches_centralized_as_alpha_grows",
    }
    assert metrics["repeats"] == 1
    for name in ("mi_improves_centralized_f1",):  # one repeat: the verdict is the sign, its noise not estimated
        claim = metrics["claims"][name]
        assert claim["noise"] == "not estimated" and claim["verdict"] == ("holds" if claim["holds"] else "fails")
    federated = metrics["claims"]["mi_improves_federated_f1"]
    assert sorted(federated["holds_for"] + federated["fails_for"]) == sorted(federated["f1"])
    assert federated["within_noise_for"] == []
    # Fig. 3's curves say whether each federated method still moved over its last interval
    converged = metrics["curves_converged"]
    assert set(converged) == set(curves["method"])
    for method, facts in converged.items():
        assert facts["converged"] == (abs(facts["macro_f1"][1] - facts["macro_f1"][0]) <= 0.01), method
    trend = metrics["claims"]["federated_approaches_centralized_as_alpha_grows"]["accuracy_by_alpha"]["fedavg"]
    at_k3 = heterogeneity[(heterogeneity["method"] == "fedavg") & (heterogeneity["clients"] == 3)]
    assert trend == dict(zip(at_k3["alpha"], at_k3["accuracy"], strict=True))  # the alpha trend at the corpus's K
    assert set(metrics["table4"]) == set(FEDNMF_METHODS)
    runs = chain["fednmf_mlflow_runs"]["runs"]
    assert len(runs) == 2 * len(FEDNMF_METHODS) and {"macro_f1", "accuracy"} <= set(runs[0]["metrics"])
    assert {"fednmf/table4_classification.csv", "fednmf/runs.csv"} <= set(chain["fednmf_mlflow_runs"]["artifacts"])


def test_only_counts_leave_an_organisation(chain) -> None:
    candidates = chain["fednmf_sweep"]["candidates"]
    keys = set(chain["fednmf_sweep"]["top_words"])
    for org in ORGS:
        sent = chain[f"fednmf_evaluation__{org}"]
        assert set(sent) == {"counts", "classification"}
        counts = sent["counts"]
        assert set(counts) == {"sliding_window_10"}  # NPMI's context kind, nothing else
        assert set(counts["sliding_window_10"]) == {"n_contexts", "occurrences", "co_occurrences"}
        assert len(counts["sliding_window_10"]["occurrences"]) == len(candidates["words"])
        assert set(sent["classification"]) == keys  # every model: main sweep, Fig. 3's snapshots, Fig. 4's
        for confusion in sent["classification"].values():
            if confusion is not None:
                assert set(confusion) == {"classes", "matrix"}
                assert all(isinstance(n, int) and n >= 0 for row in confusion["matrix"] for n in row)


def test_macro_f1_and_accuracy_are_the_organisations_summed_confusion_counts(chain) -> None:
    runs = chain["fednmf_tables"]["runs"]
    row = runs[(runs["method"] == "fedavg") & (runs["topics"] == 4)].iloc[0]
    sent = [chain[f"fednmf_evaluation__{org}"]["classification"]["fedavg-4"] for org in ORGS]
    tested = sum(sum(map(sum, c["matrix"])) for c in sent if c is not None)
    correct = sum(sum(c["matrix"][i][i] for i in range(len(c["classes"]))) for c in sent if c is not None)
    assert row["accuracy"] == pytest.approx(correct / tested, abs=1e-12)
    assert row["classified_organisations"] == sum(c is not None for c in sent)
    # the paper's pooled protocol stays beside, named as such
    assert 0 <= row["paper_pooled_macro_f1"] <= 1 and 0 <= row["paper_pooled_accuracy"] <= 1


def test_no_server_node_reads_an_organisations_documents_for_evaluation() -> None:
    pipeline = fednmf.create_pipeline(ORGS)
    readers = {n.name for n in pipeline.nodes if any(d.startswith("clients.") for d in n.inputs)}
    inside = {f"clients.{org}.evaluate_fednmf_organisation" for org in ORGS}
    assert readers == {"run_fednmf"} | inside  # the simulation node is on the boundary's allow-list


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"train": {"model": {"family": "prodlda"}}}, "'fednmf.train.model.family' is 'prodlda'"),
        ({"topics": [5, 5]}, "'fednmf.topics' repeats a value"),
        ({"repeats": 0}, "fednmf.repeats"),
        ({"evaluate": {"curve_topics": 4, "curve_tolerance": -0.1}}, "fednmf.evaluate.curve_tolerance"),
        ({"evaluate": {"curve_topics": 7}}, "'fednmf.evaluate.curve_topics' is 7"),
        ({"methods": ["fedprox"]}, "fednmf.methods"),
        ({"heterogeneity": {"alphas": [0.0]}}, "fednmf.heterogeneity.alphas"),
        (
            {
                "train": {
                    "model": {"family": "nmf"},
                    "optimizer": {"name": "sgd"},
                    "aggregation": {"client_fraction": 0},
                }
            },
            "client_fraction",
        ),
    ],
)
def test_bad_settings_are_refused_naming_the_parameter(change, message) -> None:
    with pytest.raises(ConfigError, match=message):
        from_mapping(FedNMFRunConfig, {**FEDNMF, **change}, "fednmf")


def test_each_federated_method_reports_who_took_part_in_which_round(chain) -> None:
    """Client sampling (2 of 3 organisations a round) leaves one out of each of the 4 rounds: said per
    method. FedNMF exact takes every organisation in every round: none left out."""
    metrics, runs = chain["fednmf_metrics"], chain["fednmf_tables"]["runs"]
    federated = {f"{m}-{k}" for m in FEDNMF_METHODS if m.startswith("fed") and m != "fedlda" for k in (3, 4)}
    exact = {f"fedexact-{k}" for k in (3, 4)}
    assert set(metrics["participation"]) == federated
    for key, summary in metrics["participation"].items():
        if key in exact:
            assert summary["totals"]["took_part"] == 3 * summary["rounds"] and not summary["left_out"]
            continue
        assert summary["rounds"] == 4 and summary["totals"]["sampled_out"] == 4
        assert summary["totals"]["took_part"] == 8 and sum(summary["took_part"].values()) == 8
        rounds = sorted(r for entries in summary["left_out"].values() for e in entries for r in e["rounds"])
        assert rounds == [0, 1, 2, 3]  # each round names the organisation it left out
    by_key = dict(zip(runs["method"] + "-" + runs["topics"].astype(str), runs["left_out"], strict=True))
    assert all(by_key[key] == (0 if key in exact else 4) for key in federated)
    assert all(math.isnan(v) for key, v in by_key.items() if key not in federated)  # no federation, no count
    nested = {r["name"]: r["metrics"] for r in chain["fednmf_mlflow_runs"]["runs"]}
    federated -= exact
    assert all(nested[key]["left_out"] == 4 for key in federated) and "left_out" not in nested["nmf-3"]


REPEATED = {
    **FEDNMF,
    "topics": [3],
    "methods": ["nmf_sgd", "nmf_sgd_mi", "fedavg", "fedavg_mi", "fedlda"],
    "repeats": 3,
    "evaluate": {"curve_topics": None},
    "heterogeneity": {"enabled": False},
}


@pytest.fixture(scope="module")
def repeated():
    return _run_fednmf(REPEATED)


def test_repeats_train_each_model_again_with_moved_seeds_and_the_claims_judge_their_spread(repeated) -> None:
    runs = repeated["fednmf_tables"]["runs"]
    # Fig. 3 and Fig. 4 turned off: no table (not even an empty one) and no figure for them
    assert set(repeated["fednmf_tables"]) == {"runs", "table3_coherence", "table4_classification"}
    assert set(repeated["fednmf_figures"]) == {"fig2_accuracy_vs_topics"}
    assert sorted(set(zip(runs["method"], runs["repeat"], strict=True))) == sorted(
        (m, r) for m in REPEATED["methods"] for r in range(3)
    )
    sgd = runs[runs["method"] == "nmf_sgd"].sort_values("repeat")
    assert sgd["we_coherence"].nunique() > 1  # other seeds, other models
    table = repeated["fednmf_tables"]["table4_classification"]
    assert {"macro_f1_std", "accuracy_std"} <= set(table.columns)
    row = table[table["method"] == "nmf_sgd"].iloc[0]
    assert row["macro_f1"] == pytest.approx(sgd["macro_f1"].mean())
    assert row["macro_f1_std"] == pytest.approx(sgd["macro_f1"].std(ddof=1))
    claims = repeated["fednmf_metrics"]["claims"]
    centralized = claims["mi_improves_centralized_f1"]
    assert centralized["repeats"] == 3 and centralized["standard_error"] >= 0
    assert centralized["verdict"] in ("holds", "fails", "within noise")
    federated = claims["mi_improves_federated_f1"]
    assert sum(len(federated[k]) for k in ("holds_for", "fails_for", "within_noise_for")) == 1
    names = {r["name"] for r in repeated["fednmf_mlflow_runs"]["runs"]}
    assert {"nmf_sgd-3", "nmf_sgd-3-r1", "nmf_sgd-3-r2"} <= names  # one MLflow run per model, repeats apart


@pytest.mark.parametrize(
    ("before", "after", "verdict"),
    [
        ([0.50, 0.52, 0.51], [0.60, 0.61, 0.62], "holds"),  # 0.10 better, spread 0.01
        ([0.60, 0.61, 0.62], [0.50, 0.52, 0.51], "fails"),
        ([0.50, 0.60, 0.40], [0.55, 0.45, 0.52], "within noise"),  # +0.05, -0.15, +0.12
        ([0.5, 0.5], [0.5, 0.5], "within noise"),  # no difference at all
        ([0.50], [0.51], "holds"),  # one repeat: the sign, noise not estimated
    ],
)
def test_a_claim_is_within_noise_when_its_mean_difference_is_under_two_standard_errors(before, after, verdict) -> None:
    from fedtopic_pipelines.pipelines.fednmf.nodes import judge

    result = judge(before, after)
    assert result["verdict"] == verdict
    assert result["repeats"] == len(before)
    assert ("noise" in result) == (len(before) == 1)
