"""Organisations drawn from one labelled corpus with Dirichlet(alpha p) label skew.

Seed 004 (sec. IV-D) builds its clients "in the same way as" Hsu et al. (2019): each client
draws label proportions q ~ Dir(alpha p), p the corpus's label distribution, and its
documents' labels follow q; every client holds the same number of documents, the corpus
size divided by K. Small alpha gives clients of one or two labels, large alpha clients
that each look like the whole corpus. Neither text says what happens when a label runs
out or how N/K is rounded; the choices made here (docs/ingestion.md, "Label skew"):

* documents are drawn without replacement; organisations are filled in their listed
  order, each taking ``N // K`` documents;
* an organisation's labels are one multinomial draw of its size from q; a label whose
  pool holds fewer documents than drawn gives what it has, and the shortfall is drawn
  again from q renormalised over the labels that still have documents (if q puts no
  mass on any of them, from what is left, in proportion);
* within a label, documents are taken in a seeded random order;
* the ``N - K * (N // K)`` documents left over belong to no organisation: counted and
  listed (``remainder``, ``remainder_labels``, their positions), never silently lost.

Everything is drawn from one ``numpy`` Generator seeded with ``seed``: the same labels,
organisations, alpha and seed give the same partition.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedtopic_pipelines.core.text.demo import CorpusError, RawCorpus

logger = logging.getLogger(__name__)

LOGGED_LABELS = 3  # labels named per organisation in the log line (the report has them all)


@dataclass(frozen=True)
class LabelPartition:
    """Each document's organisation (an index into ``organisations``; -1: the remainder) and the report."""

    assignment: np.ndarray
    report: dict[str, Any]


def _missing(label: Any) -> bool:
    return label is None or (isinstance(label, float) and math.isnan(label)) or not str(label).strip()


def entropy(counts: np.ndarray) -> float:
    """Shannon entropy (nats) of a label histogram: 0 for one label, log L for L equal labels."""
    total = counts.sum()
    if total == 0:
        return 0.0
    share = counts[counts > 0] / total
    return max(0.0, float(-(share * np.log(share)).sum()))  # max: not -0.0 for one label


def _labels_drawn(q: np.ndarray, left: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """How many documents of each label one organisation takes: ``size`` draws from q, without
    replacement from the pools ``left``; an exhausted label's share goes to the labels still left."""
    taken = np.zeros_like(left)
    need = size
    while need:
        available = left - taken
        weights = np.where(available > 0, q, 0.0)
        if not np.isfinite(weights).all() or weights.sum() <= 0:  # q has no mass where documents are left
            weights = available.astype(float)
        draw = np.minimum(rng.multinomial(need, weights / weights.sum()), available)
        taken += draw
        need -= int(draw.sum())
    return taken


def _encode_labels(labels: Sequence[Any], names: list[str], what: str) -> tuple[np.ndarray, np.ndarray, int]:
    """The labels' classes and codes and each organisation's size, refusing what label skew cannot split."""
    n, k = len(labels), len(names)
    missing = [i for i, label in enumerate(labels) if _missing(label)]
    if missing:
        raise CorpusError(
            f"{what}: {len(missing)} documents have no label (first positions {missing[:10]}): "
            "a partition by label skew needs every document's label"
        )
    values = np.array([str(label) for label in labels], dtype=object)
    classes, codes = np.unique(values, return_inverse=True)
    if len(classes) < 2:
        only = f"the single label {classes[0]!r}" if len(classes) else "no document"
        raise CorpusError(
            f"{what}: {n} documents with {only}: a partition by label skew needs at least two labels "
            "(a source's 'label_column' / 'label_member', or several sources each labelled by its name)"
        )
    size = n // k
    if size == 0:
        raise CorpusError(
            f"{what}: {n} documents for {k} organisations: {names[n:]} would receive no document; "
            "list at most as many names in 'organisations' as there are documents"
        )
    return classes, codes, size


def _assign(
    codes: np.ndarray, counts: np.ndarray, k: int, size: int, alpha: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Draw each organisation's q and documents in turn (one generator, so the seed fixes the whole partition).

    Returns the organisation of each document (-1: left over), the per-organisation label
    histogram, the drawn q and how many documents of each label were used.
    """
    n = len(codes)
    p = counts / n
    rng = np.random.default_rng(seed)
    pools = [rng.permutation(np.flatnonzero(codes == c)) for c in range(len(counts))]
    used = np.zeros(len(counts), dtype=np.int64)
    assignment = np.full(n, -1, dtype=np.int64)
    histogram = np.zeros((k, len(counts)), dtype=np.int64)
    drawn_q = np.zeros((k, len(counts)))
    for org in range(k):
        q = rng.dirichlet(alpha * p)
        drawn_q[org] = q
        taken = _labels_drawn(q, counts - used, size, rng)
        for c in np.flatnonzero(taken):
            assignment[pools[c][used[c] : used[c] + taken[c]]] = org
        used += taken
        histogram[org] = taken
    return assignment, histogram, drawn_q, used


def dirichlet_label_partition(
    labels: Sequence[Any], organisations: Sequence[str], alpha: float, seed: int, what: str = "the corpus"
) -> LabelPartition:
    """Split documents by their ``labels`` into ``len(organisations)`` organisations of ``N // K``
    documents with Dirichlet(alpha p) label skew (module docstring); ``what`` names the corpus in errors.

    Refused, naming ``what``: documents without a label, a single label (label skew is then
    meaningless), fewer documents than organisations (one would get none).
    """
    if not math.isfinite(alpha) or alpha <= 0:
        raise ValueError(f"partition 'alpha' must be a finite number > 0, got {alpha!r}")
    names = list(organisations)
    k = len(names)
    if k == 0:
        raise ValueError("no organisation to partition into: 'organisations' is empty")
    classes, codes, size = _encode_labels(labels, names, what)
    n = len(codes)
    counts = np.bincount(codes, minlength=len(classes))
    assignment, histogram, drawn_q, used = _assign(codes, counts, k, size, alpha, seed)
    remainder = np.flatnonzero(assignment < 0)
    label_names = [str(c) for c in classes]
    entropies = {name: entropy(histogram[i]) for i, name in enumerate(names)}
    report = {
        "method": "dirichlet_label_skew",
        "alpha": float(alpha),
        "seed": int(seed),
        "organisations": k,
        "documents": n,
        "documents_per_organisation": size,
        "remainder": len(remainder),
        "labels": dict(zip(label_names, counts.tolist(), strict=True)),
        "histogram": {name: dict(zip(label_names, histogram[i].tolist(), strict=True)) for i, name in enumerate(names)},
        "remainder_labels": {label: int(c) for label, c in zip(label_names, counts - used, strict=True) if c},
        "remainder_positions": remainder.tolist(),
        "q": {name: [round(float(x), 6) for x in drawn_q[i]] for i, name in enumerate(names)},
        "label_entropy_nats": {name: round(h, 6) for name, h in entropies.items()},
        "mean_label_entropy_nats": round(float(np.mean(list(entropies.values()))), 6),
        "corpus_label_entropy_nats": round(entropy(counts), 6),
    }
    log_partition(report, what)
    return LabelPartition(assignment, report)


def log_partition(report: dict[str, Any], what: str) -> None:
    """A compact view of a partition report: one line for the whole, one per organisation."""
    logger.info(
        "%s: Dirichlet(alpha p) label skew, alpha %g, seed %d: %d documents of %d labels into %d organisations "
        "of %d, %d left over %s; mean label entropy %.3f nats (corpus %.3f)",
        what,
        report["alpha"],
        report["seed"],
        report["documents"],
        len(report["labels"]),
        report["organisations"],
        report["documents_per_organisation"],
        report["remainder"],
        report["remainder_labels"] or "",
        report["mean_label_entropy_nats"],
        report["corpus_label_entropy_nats"],
    )
    for org, counts in report["histogram"].items():
        present = sorted(((n, label) for label, n in counts.items() if n), key=lambda x: (-x[0], x[1]))
        shown = ", ".join(f"{label} {n}" for n, label in present[:LOGGED_LABELS])
        more = f", +{len(present) - LOGGED_LABELS} labels" if len(present) > LOGGED_LABELS else ""
        logger.info(
            "  %s: %d/%d labels: %s%s (entropy %.3f)",
            org,
            len(present),
            len(counts),
            shown,
            more,
            report["label_entropy_nats"][org],
        )


def partition_raw_corpus(
    raw: RawCorpus, organisations: Sequence[str], alpha: float, seed: int, what: str
) -> tuple[RawCorpus, dict[str, Any]]:
    """The corpus with each document's organisation drawn by label skew (train and test documents
    together), and the partition's report. ``what`` names the corpus in errors.

    The documents left over (``N - K * (N // K)``) are removed from the corpus and reported
    with their labels and source lines (``remainder_source_lines``): the caller counts them.
    """
    docs = raw.documents
    partition = dirichlet_label_partition(docs["label"].tolist(), organisations, alpha, seed, what)
    assigned = partition.assignment >= 0
    names = np.array(list(organisations), dtype=object)
    docs = docs.assign(organisation=np.where(assigned, names[np.maximum(partition.assignment, 0)], None))
    report = {key: value for key, value in partition.report.items() if key != "remainder_positions"}
    report["remainder_source_lines"] = [int(x) for x in docs.loc[~assigned, "source_line"]]
    return RawCorpus(docs.loc[assigned].reset_index(drop=True), raw.skipped), report


def report_partition(report: dict[str, Any], partition: dict[str, Any]) -> None:
    """Add a partition to an ingestion report, in place: its leftover documents counted as read
    and dropped (``partition_remainder``), never silently lost, and the partition itself."""
    if partition["remainder"]:
        report["dropped"]["partition_remainder"] = partition["remainder"]
    report["documents_read"] += partition["remainder"]
    report["partition"] = partition
