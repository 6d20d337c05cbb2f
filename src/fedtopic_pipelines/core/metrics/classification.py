"""Document classification on document-topic vectors (FedNMF seed 004 protocol).

A random stratified 80/20 split of the documents' topic vectors, a linear SVM trained
on the 80 %, macro-F1 on the 20 %. Federated, each organisation trains its own and sends
only its confusion counts (:func:`svm_confusion`); their sum scores them all (:func:`pooled_scores`).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from sklearn.metrics import accuracy_score, confusion_matrix, f1_score
from sklearn.model_selection import train_test_split
from sklearn.svm import LinearSVC

logger = logging.getLogger(__name__)


def svm_undefined(labels: np.ndarray, test_size: float) -> str | None:
    """Why :func:`svm_predictions` gives no score for these ``labels`` (None: it gives one), in words
    for metrics.json: a label per organisation leaves each organisation one class."""
    labels = np.asarray(labels)
    counts = Counter(labels[labels != ""].tolist())
    kept = {y: n for y, n in counts.items() if n >= 2}
    n, n_classes = sum(kept.values()), len(kept)
    if not counts:
        return "no held-out document has a label (the corpus gives none: ingest_table.label_column, for a table)"
    if n_classes < 2:
        return (
            f"{n_classes} class with two or more labelled held-out documents (an SVM needs two; "
            "one label per organisation leaves each organisation a single class)"
        )
    n_test = math.ceil(test_size * n)
    if n_test < n_classes or n - n_test < n_classes:
        return f"{n} labelled held-out documents are too few for a stratified split of {n_classes} classes"
    return None


def svm_macro_f1(features: np.ndarray, labels: np.ndarray, test_size: float, c: float, seed: int) -> float | None:
    """Macro-F1 of a linear SVM, or ``None`` when it is undefined (logged): see :func:`svm_scores`."""
    scores = svm_scores(features, labels, test_size, c, seed)
    return None if scores is None else scores["macro_f1"]


def svm_scores(
    features: np.ndarray, labels: np.ndarray, test_size: float, c: float, seed: int
) -> dict[str, float] | None:
    """Macro-F1 and accuracy of a linear SVM on the test share, or None: see :func:`svm_predictions`."""
    split = svm_predictions(features, labels, test_size, c, seed)
    if split is None:
        return None
    truth, predicted = split
    return {
        "macro_f1": float(f1_score(truth, predicted, average="macro")),
        "accuracy": float(accuracy_score(truth, predicted)),
    }


def svm_confusion(
    features: np.ndarray, labels: np.ndarray, test_size: float, c: float, seed: int
) -> dict[str, Any] | None:
    """The confusion counts of a linear SVM on the test share (``classes`` and ``matrix``: row =
    true class, column = predicted), or None where no SVM can be trained (see
    :func:`svm_predictions`). An organisation sends these counts; :func:`pooled_scores` sums them."""
    split = svm_predictions(features, labels, test_size, c, seed)
    if split is None:
        return None
    truth, predicted = split
    classes = sorted(set(truth.tolist()) | set(predicted.tolist()))
    matrix = confusion_matrix(truth, predicted, labels=classes)
    return {"classes": classes, "matrix": matrix.astype(int).tolist()}


def pooled_scores(confusions: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """Macro-F1 and accuracy of the organisations' summed confusion counts (what scoring every
    organisation's classifier on the pooled test documents gives), and how many organisations
    sent counts. Macro-F1 averages over the classes that occur in the truth or the predictions,
    as scikit-learn's ``f1_score(average='macro')``, a class without any prediction scoring 0."""
    sent = [c for c in confusions if c is not None]
    classes = sorted({label for c in sent for label in c["classes"]})
    total = np.zeros((len(classes), len(classes)), dtype=np.int64)
    for c in sent:
        where = np.array([classes.index(label) for label in c["classes"]], dtype=np.int64)
        total[np.ix_(where, where)] += np.asarray(c["matrix"], dtype=np.int64)
    if not sent or total.sum() == 0:
        return {"macro_f1": None, "accuracy": None, "organisations": len(sent)}
    tp = np.diag(total).astype(np.float64)
    denominator = total.sum(axis=0) + total.sum(axis=1)  # 2 TP + FP + FN
    f1 = np.divide(2 * tp, denominator, out=np.zeros_like(tp), where=denominator > 0)
    return {"macro_f1": float(f1.mean()), "accuracy": float(tp.sum() / total.sum()), "organisations": len(sent)}


def svm_predictions(
    features: np.ndarray, labels: np.ndarray, test_size: float, c: float, seed: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """The test share's true and predicted classes of a linear SVM (seed 004's Table IV scores
    them), or ``None`` when it cannot be trained (:func:`svm_undefined` says why): fewer than two
    classes, or too few documents for a stratified split with every class on both sides.

    Documents without a label (empty string) are left out; classes with fewer than two
    documents cannot be stratified and are dropped (logged).
    """
    labelled = labels != ""
    features, labels = features[labelled], labels[labelled]
    counts = Counter(labels.tolist())
    keep = np.array([counts[y] >= 2 for y in labels.tolist()], dtype=bool)
    if (~keep).any():
        logger.info("classification: dropped %d documents of classes with a single document", int((~keep).sum()))
    features, labels = features[keep], labels[keep]
    undefined = svm_undefined(labels, test_size)
    if undefined is not None:  # metrics.json says why (evaluate's <metric>_undefined)
        logger.debug("classification: %s", undefined)
        return None
    x_tr, x_te, y_tr, y_te = train_test_split(features, labels, test_size=test_size, random_state=seed, stratify=labels)
    return y_te, LinearSVC(C=c, random_state=seed).fit(x_tr, y_tr).predict(x_te)
