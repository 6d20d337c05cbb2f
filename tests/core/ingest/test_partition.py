"""Dirichlet(alpha p) label skew: equal sizes, the remainder, determinism, skew against alpha, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedtopic_pipelines.core.ingest.partition import _labels_drawn, dirichlet_label_partition, entropy
from fedtopic_pipelines.core.text.demo import CorpusError

LABELS = ["a"] * 400 + ["b"] * 300 + ["c"] * 200 + ["d"] * 100
ORGS = [f"org{i}" for i in range(10)]


def test_equal_sizes_histograms_and_the_remainder_add_up() -> None:
    labels = LABELS[:997]  # 997 = 10 * 99 + 7: seven documents left over
    part = dirichlet_label_partition(labels, ORGS, 1.0, 3)
    report = part.report
    assert report["documents_per_organisation"] == 99 and report["remainder"] == 7
    assert np.bincount(part.assignment[part.assignment >= 0], minlength=10).tolist() == [99] * 10
    assert len(report["remainder_positions"]) == 7 and (part.assignment[report["remainder_positions"]] == -1).all()
    # each organisation's histogram is the labels of the documents assigned to it, and sums to its size
    for i, org in enumerate(ORGS):
        mine = [labels[j] for j in np.flatnonzero(part.assignment == i)]
        assert report["histogram"][org] == {label: mine.count(label) for label in "abcd"}
        assert sum(report["histogram"][org].values()) == 99
    # per label: the organisations' counts plus the remainder's are the corpus's counts
    for label, total in report["labels"].items():
        held = sum(h[label] for h in report["histogram"].values()) + report["remainder_labels"].get(label, 0)
        assert held == total == labels.count(label)
    assert sum(report["remainder_labels"].values()) == 7
    assert report["alpha"] == 1.0 and report["seed"] == 3 and report["organisations"] == 10


def test_the_same_seed_gives_the_same_partition_and_another_seed_another() -> None:
    first = dirichlet_label_partition(LABELS, ORGS, 0.5, 11)
    again = dirichlet_label_partition(list(LABELS), list(ORGS), 0.5, 11)
    other = dirichlet_label_partition(LABELS, ORGS, 0.5, 12)
    assert np.array_equal(first.assignment, again.assignment) and first.report == again.report
    assert not np.array_equal(first.assignment, other.assignment)
    assert first.report["histogram"] != other.report["histogram"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_small_alpha_skews_more_than_large_alpha(seed: int) -> None:
    """Mean per-organisation label entropy rises with alpha; at a large alpha every
    organisation looks like the corpus (p), at a small one it holds about one label."""
    reports = {a: dirichlet_label_partition(LABELS, ORGS, a, seed).report for a in (0.05, 1, 100)}
    mean = {a: report["mean_label_entropy_nats"] for a, report in reports.items()}
    assert mean[0.05] < mean[1] < mean[100]
    assert mean[0.05] < 0.25  # log 4 = 1.39 for four equal labels
    wide = dirichlet_label_partition(LABELS, ORGS, 1000.0, seed).report
    assert abs(wide["mean_label_entropy_nats"] - wide["corpus_label_entropy_nats"]) < 0.06
    # each organisation's shares are p up to the multinomial's noise (sd 0.05 at 100 documents), but
    # the last one listed takes what the others left (without replacement, no remainder here): not checked
    p = np.array([0.4, 0.3, 0.2, 0.1])
    for org in ORGS[:-1]:
        assert np.abs(np.array(list(wide["histogram"][org].values())) / 100 - p).max() < 0.16
    assert np.mean([max(reports[0.05]["histogram"][org].values()) / 100 for org in ORGS[:-1]]) > 0.9


def test_an_exhausted_label_passes_its_share_to_the_labels_left() -> None:
    rng = np.random.default_rng(0)
    # q wants only 'a', which holds 10 documents: the other 40 come from 'b', the only label left
    assert _labels_drawn(np.array([1.0, 0.0]), np.array([10, 90]), 50, rng).tolist() == [10, 40]
    # q has no mass where documents are left: they are drawn in proportion to what is left (all of it here)
    assert _labels_drawn(np.array([1.0, 0.0, 0.0]), np.array([0, 5, 5]), 10, rng).tolist() == [0, 5, 5]
    # q renormalised over b and c (0.3 : 0.1): about three times as many b as c
    drawn = _labels_drawn(np.array([0.6, 0.3, 0.1]), np.array([0, 10_000, 10_000]), 4000, rng)
    assert drawn[0] == 0 and drawn.sum() == 4000 and 2.6 < drawn[1] / drawn[2] < 3.4


def test_a_skewed_first_organisation_never_takes_more_than_a_pool_holds() -> None:
    labels = ["rare"] * 5 + ["common"] * 95
    for seed in range(20):
        report = dirichlet_label_partition(labels, ["x", "y", "z", "w"], 0.01, seed).report
        assert sum(h["rare"] for h in report["histogram"].values()) == 5
        assert all(sum(h.values()) == 25 for h in report["histogram"].values())


def test_entropy_is_zero_for_one_label_and_log_l_for_l_equal_labels() -> None:
    assert entropy(np.array([7, 0, 0])) == 0.0 and math.isclose(entropy(np.array([3, 3, 3, 3])), math.log(4))


def test_bad_input_is_refused_naming_what_is_wrong() -> None:
    with pytest.raises(ValueError, match=r"'alpha' must be a finite number > 0, got 0.0"):
        dirichlet_label_partition(LABELS, ORGS, 0.0, 1)
    with pytest.raises(ValueError, match=r"'alpha' must be a finite number > 0, got -1"):
        dirichlet_label_partition(LABELS, ORGS, -1, 1)
    with pytest.raises(CorpusError, match=r"sms: 4 documents with the single label 'ham': .* at least two labels"):
        dirichlet_label_partition(["ham"] * 4, ["a", "b"], 1.0, 1, what="sms")
    with pytest.raises(CorpusError, match=r"sms: 3 documents for 5 organisations: \['d', 'e'\] would receive no"):
        dirichlet_label_partition(["ham", "spam", "ham"], list("abcde"), 1.0, 1, what="sms")
    with pytest.raises(CorpusError, match=r"sms: 3 documents have no label \(first positions \[1, 2, 4\]\)"):
        dirichlet_label_partition(["ham", None, "", "spam", float("nan")], ["a"], 1.0, 1, what="sms")
    with pytest.raises(ValueError, match=r"'organisations' is empty"):
        dirichlet_label_partition(LABELS, [], 1.0, 1)
