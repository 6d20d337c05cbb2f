import numpy as np
import pytest
import scipy.sparse as sp

from fedtopic_pipelines.core.config import OptimizerConfig, ProdLDAConfig, TrainConfig
from fedtopic_pipelines.core.metrics.classification import svm_macro_f1, svm_undefined
from fedtopic_pipelines.core.metrics.perplexity import completion_perplexity, split_tokens
from fedtopic_pipelines.core.metrics.topics import top_words, topic_diversity
from fedtopic_pipelines.core.models.prodlda import ProdLDA
from fedtopic_pipelines.core.training import train_scenarios


def test_top_words_and_diversity() -> None:
    topics = top_words(np.array([[0.1, 0.7, 0.2], [0.5, 0.4, 0.1]]), ["a", "b", "c"], 2)
    assert topics == [["b", "c"], ["a", "b"]]
    assert topic_diversity(topics) == 0.75


def test_svm_macro_f1_protocol() -> None:
    rng = np.random.default_rng(0)
    labels = np.array(["a", "b"] * 50)
    features = np.where(labels[:, None] == "a", 1.0, -1.0) + rng.normal(0, 0.1, (100, 2))
    assert svm_macro_f1(features, labels, 0.2, 1.0, seed=0) == 1.0
    assert svm_macro_f1(features, np.array(["a"] * 100), 0.2, 1.0, seed=0) is None


def test_training_lowers_held_out_perplexity() -> None:
    rng = np.random.default_rng(0)
    topics = rng.dirichlet(np.full(60, 0.05), size=3)
    docs = np.stack([rng.multinomial(80, topics[rng.integers(3)]) for _ in range(300)]).astype(np.float32)
    train, test = sp.csr_matrix(docs[:240]), sp.csr_matrix(docs[240:])
    config = TrainConfig(
        model=ProdLDAConfig(n_topics=3, hidden_sizes=(32,)),
        optimizer=OptimizerConfig(lr=0.01),
        batch_size=32,
        max_steps=300,
        seed=0,
        device="cpu",
        scenarios=("federated",),
    )
    before = completion_perplexity(ProdLDA.create(60, config.model, 0), test)
    model = train_scenarios({"o": train}, config, progress=False)["federated"].to_model()
    after = completion_perplexity(model, test)
    assert after < 0.8 * before
    assert after < 60  # better than a uniform distribution over the 60 words


def test_completion_split_conserves_tokens_and_is_seeded() -> None:
    bow = sp.csr_matrix(np.array([[3, 0, 5], [1, 1, 0]], dtype=np.float32))
    observed, held_out = split_tokens(bow, seed=1)
    np.testing.assert_array_equal((observed + held_out).toarray(), bow.toarray())
    np.testing.assert_array_equal(split_tokens(bow, seed=1)[0].toarray(), observed.toarray())


def test_svm_with_too_few_documents_or_unlabelled_ones() -> None:
    labels = np.array(["a", "b", "c"] * 2)
    assert svm_macro_f1(np.eye(6), labels, 0.2, 1.0, seed=0) is None  # 2 test documents for 3 classes
    labels = np.array(["a", "b"] * 20 + [""] * 10)
    features = np.vstack([np.where(labels[:40, None] == "a", 1.0, -1.0), np.zeros((10, 1))])
    assert svm_macro_f1(features, labels, 0.2, 1.0, seed=0) == 1.0


def test_svm_scores_report_macro_f1_and_accuracy() -> None:
    from fedtopic_pipelines.core.metrics.classification import svm_scores

    rng = np.random.default_rng(0)
    labels = np.array(["a"] * 60 + ["b"] * 40)
    features = rng.normal(size=(100, 3)) + (labels == "b")[:, None] * 0.8  # overlapping classes
    scores = svm_scores(features, labels, 0.2, 1.0, seed=0)
    from sklearn.metrics import accuracy_score, f1_score
    from sklearn.model_selection import train_test_split
    from sklearn.svm import LinearSVC

    x_tr, x_te, y_tr, y_te = train_test_split(features, labels, test_size=0.2, random_state=0, stratify=labels)
    predicted = LinearSVC(C=1.0, random_state=0).fit(x_tr, y_tr).predict(x_te)
    assert scores == {
        "macro_f1": f1_score(y_te, predicted, average="macro"),
        "accuracy": accuracy_score(y_te, predicted),
    }
    assert 0.5 < scores["accuracy"] < 1.0 and scores["macro_f1"] != scores["accuracy"]


def test_summed_confusion_counts_score_as_the_pooled_predictions() -> None:
    """One organisation: the summed counts give svm_scores' numbers; several: scikit-learn's scores
    of all their test predictions together (the classes each saw differ)."""
    from sklearn.metrics import accuracy_score, f1_score

    from fedtopic_pipelines.core.metrics.classification import (
        pooled_scores,
        svm_confusion,
        svm_predictions,
        svm_scores,
    )

    rng = np.random.default_rng(0)
    parts = []
    for classes in (["a", "b", "c"], ["a", "b"], ["b", "c", "d"]):
        labels = np.array([classes[i % len(classes)] for i in range(60)], dtype=object)
        features = rng.normal(size=(60, 4)) + np.array([[classes.index(y) % 2, 0, 0, 0] for y in labels])
        parts.append((features, labels))
    one = parts[0]
    assert pooled_scores([svm_confusion(*one, 0.2, 1.0, 7)]) == pytest.approx(
        {**svm_scores(*one, 0.2, 1.0, 7), "organisations": 1}, abs=1e-12
    )
    truth, predicted = zip(*(svm_predictions(*p, 0.2, 1.0, 7) for p in parts), strict=True)
    truth, predicted = np.concatenate(truth), np.concatenate(predicted)
    summed = pooled_scores([*(svm_confusion(*p, 0.2, 1.0, 7) for p in parts), None])
    assert summed["macro_f1"] == pytest.approx(f1_score(truth, predicted, average="macro"), abs=1e-12)
    assert summed["accuracy"] == pytest.approx(accuracy_score(truth, predicted), abs=1e-12)
    assert summed["organisations"] == 3  # the one that could train none is counted out
    assert pooled_scores([None]) == {"macro_f1": None, "accuracy": None, "organisations": 0}


def test_an_undefined_macro_f1_says_why_exactly_when_the_svm_gives_none() -> None:
    rng = np.random.default_rng(0)
    features = rng.normal(size=(100, 3))
    cases = {
        "one class": np.array(["a"] * 100),
        "one per class but one": np.array(["a"] * 99 + ["b"]),  # b has a single document: dropped
        "unlabelled": np.array([""] * 100),
        "too few": np.array(["a", "b", "c", "a", "b", "c"] + [""] * 94),
        "two classes": np.array(["a", "b"] * 50),
    }
    for name, labels in cases.items():
        reason = svm_undefined(labels, 0.2)
        assert (reason is None) == (svm_macro_f1(features, labels, 0.2, 1.0, seed=0) is not None), name
    assert svm_undefined(cases["one class"], 0.2).startswith("1 class with two or more labelled held-out documents")
    assert svm_undefined(cases["unlabelled"], 0.2).startswith("no held-out document has a label")
    assert (
        svm_undefined(cases["too few"], 0.2)
        == "6 labelled held-out documents are too few for a stratified split of 3 classes"
    )
