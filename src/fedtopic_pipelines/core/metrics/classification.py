"""Document classification on document-topic vectors (FedNMF seed 004 protocol).

A random stratified 80/20 split of the documents' topic vectors, a linear SVM trained
on the 80 %, macro-F1 on the 20 %.
"""

from __future__ import annotations

import logging
import math
from collections import Counter

import numpy as np
from sklearn.metrics import accuracy_score, f1_score
from sklearn.model_selection import train_test_split
from sklearn.svm import LinearSVC

logger = logging.getLogger(__name__)


def svm_macro_f1(features: np.ndarray, labels: np.ndarray, test_size: float, c: float, seed: int) -> float | None:
    """Macro-F1 of a linear SVM, or ``None`` when it is undefined (logged): see :func:`svm_scores`."""
    scores = svm_scores(features, labels, test_size, c, seed)
    return None if scores is None else scores["macro_f1"]


def svm_scores(
    features: np.ndarray, labels: np.ndarray, test_size: float, c: float, seed: int
) -> dict[str, float] | None:
    """Macro-F1 and accuracy of a linear SVM on the test share (seed 004's Table IV reports
    both), or ``None`` when they are undefined (logged): fewer than two classes, or too few
    documents for a stratified split with every class on both sides.

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
    n_classes = len(set(labels.tolist()))
    if n_classes < 2:
        return None
    n_test = math.ceil(test_size * len(labels))
    if n_test < n_classes or len(labels) - n_test < n_classes:
        logger.warning(
            "classification: %d documents are too few for a stratified %.0f/%.0f split of %d classes",
            len(labels),
            100 * (1 - test_size),
            100 * test_size,
            n_classes,
        )
        return None
    x_tr, x_te, y_tr, y_te = train_test_split(features, labels, test_size=test_size, random_state=seed, stratify=labels)
    predicted = LinearSVC(C=c, random_state=seed).fit(x_tr, y_tr).predict(x_te)
    return {
        "macro_f1": float(f1_score(y_te, predicted, average="macro")),
        "accuracy": float(accuracy_score(y_te, predicted)),
    }
