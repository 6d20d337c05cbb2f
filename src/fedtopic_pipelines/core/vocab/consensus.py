"""Vocabulary consensus: the first stage of every federated family.

Each organisation proposes its top-N terms that occur more than T times (seed 003,
sec. 3.1.4); the server merges the proposals by union or intersection and keeps, for
every retained term, its merged frequency summed over organisations (seed 001, sec. 3.1).
Each organisation then vectorises its own documents against the common vocabulary.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

logger = logging.getLogger(__name__)


class EmptyVocabularyError(ValueError):
    """The merged vocabulary is empty; the message names the parameters to relax."""


def propose_terms(counts: Mapping[str, int], top_n: int, min_count: int) -> dict[str, int]:
    """An organisation's proposal: its ``top_n`` most frequent terms with count > ``min_count``.

    Ties are broken alphabetically so the proposal is deterministic.
    """
    eligible = [(term, int(n)) for term, n in counts.items() if n > min_count]
    eligible.sort(key=lambda item: (-item[1], item[0]))
    return dict(eligible[:top_n])


def merge_vocabularies(proposals: Mapping[str, Mapping[str, int]], merge: str) -> pd.DataFrame:
    """Merge organisations' proposals into the common vocabulary.

    Returns a table with columns ``term``, ``frequency`` (summed over the organisations
    that proposed it) and ``n_organisations``, sorted by frequency then term; the row
    order is the column order of every bag-of-words matrix.
    """
    if not proposals:
        raise EmptyVocabularyError("no organisation proposed a vocabulary")
    term_sets = [set(p) for p in proposals.values()]
    if merge == "union":
        terms = set().union(*term_sets)
    elif merge == "intersection":
        terms = set.intersection(*term_sets)
    else:
        raise ValueError(f"parameter 'vocab_consensus.merge' is {merge!r}; expected 'union' or 'intersection'")
    if not terms:
        sizes = {org: len(p) for org, p in proposals.items()}
        raise EmptyVocabularyError(
            f"the {merge} of the organisations' vocabularies is empty (proposal sizes {sizes}); "
            "raise 'vocab_consensus.top_n', lower 'vocab_consensus.min_count' or use merge 'union'"
        )
    rows = []
    for term in terms:
        freqs = [p[term] for p in proposals.values() if term in p]
        rows.append((term, int(sum(freqs)), len(freqs)))
    table = pd.DataFrame(rows, columns=["term", "frequency", "n_organisations"])
    return table.sort_values(["frequency", "term"], ascending=[False, True], ignore_index=True)


@dataclass
class BowCorpus:
    """One organisation's documents as a sparse document-term matrix over the common vocabulary."""

    matrix: sp.csr_matrix
    doc_ids: np.ndarray
    labels: np.ndarray
    split: np.ndarray

    def subset(self, split: str) -> BowCorpus:
        """Rows of one split (``train`` or ``test``)."""
        mask = self.split == split
        return BowCorpus(self.matrix[mask], self.doc_ids[mask], self.labels[mask], self.split[mask])

    def without_empty_documents(self) -> tuple[BowCorpus, dict[str, int]]:
        """Drop documents with no term of the common vocabulary; return how many, per split.

        They carry no word to learn from or to predict, yet would count in eq. 2's weights.
        """
        empty = np.asarray(self.matrix.sum(axis=1)).ravel() == 0
        dropped = {str(s): int((self.split[empty] == s).sum()) for s in np.unique(self.split[empty])}
        keep = ~empty
        return BowCorpus(self.matrix[keep], self.doc_ids[keep], self.labels[keep], self.split[keep]), dropped

    def __len__(self) -> int:
        return self.matrix.shape[0]


def vectorize(
    docs: Sequence[Sequence[str]],
    vocabulary: Sequence[str],
    doc_ids: Sequence[str],
    labels: Sequence[str],
    split: Sequence[str],
) -> BowCorpus:
    """Count each document's tokens that are in the common vocabulary (others are dropped)."""
    index = {term: i for i, term in enumerate(vocabulary)}
    indptr = [0]
    indices: list[int] = []
    for doc in docs:
        ids = [index[t] for t in doc if t in index]
        indices.extend(ids)
        indptr.append(len(indices))
    data = np.ones(len(indices), dtype=np.float32)
    matrix = sp.csr_matrix(
        (data, np.asarray(indices, dtype=np.int64), np.asarray(indptr)), shape=(len(indptr) - 1, len(vocabulary))
    )
    matrix.sum_duplicates()
    return BowCorpus(matrix, np.asarray(doc_ids), np.asarray(labels), np.asarray(split))


def vectorize_frames(frames: Iterable[pd.DataFrame], vocabulary: Sequence[str]) -> tuple[BowCorpus, dict[str, Any]]:
    """One organisation's token tables (shard by shard) as a bag-of-words matrix, plus a report.

    Only the matrix, which training needs, is held whole. Documents left without any term of
    the common vocabulary (likely with ``intersection``) are dropped and counted per split.
    """
    parts: list[BowCorpus] = []
    org = "?"
    for frame in frames:
        if len(frame):
            org = str(frame["organisation"].iloc[0])
        parts.append(
            vectorize(
                [t.split() for t in frame["tokens"]],
                vocabulary,
                frame["doc_id"].to_numpy(),
                frame["label"].to_numpy(),
                frame["split"].to_numpy(),
            )
        )
    parts = parts or [vectorize([], vocabulary, [], [], [])]
    bow = BowCorpus(
        sp.vstack([p.matrix for p in parts], format="csr"),
        np.concatenate([p.doc_ids for p in parts]),
        np.concatenate([p.labels for p in parts]),
        np.concatenate([p.split for p in parts]),
    )
    bow, dropped = bow.without_empty_documents()
    if dropped:
        logger.warning("organisation %s: dropped %s documents with no term of the common vocabulary", org, dropped)
    kept = {s: int((bow.split == s).sum()) for s in ("train", "test")}
    return bow, {"organisation": org, "documents": kept, "dropped_no_vocabulary_term": dropped}
