"""Vocabulary consensus: the first stage of every federated family.

Each organisation proposes its top-N terms that occur more than T times (seed 003,
sec. 3.1.4); the server merges the proposals by union or intersection and keeps, for
every retained term, its merged frequency summed over organisations (seed 001, sec. 3.1).
Two floors then keep junk out of a union (docs/vocabulary.md): a term stays only if at
least ``min_organisations`` organisations proposed it AND its summed proposed count
reaches ``min_total_count`` (1 and 0 turn each floor off). Both engines call
:func:`agree_on_vocabulary`, so Kedro's consensus node and a Flower federation agree on
the same terms. Each organisation then vectorises its own documents against the common
vocabulary.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from fedtopic_pipelines.core.config import ConsensusConfig
from fedtopic_pipelines.core.lineage import vocabulary_fingerprint

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


@dataclass(frozen=True)
class Consensus:
    """The common vocabulary and the server's report on how it was made (no document leaves
    an organisation for it: the report holds only counts over the proposals)."""

    vocabulary: pd.DataFrame
    report: dict[str, Any]


def apply_floors(table: pd.DataFrame, min_organisations: int, min_total_count: int) -> tuple[pd.DataFrame, dict]:
    """Keep the merged terms proposed by >= ``min_organisations`` organisations whose summed
    proposed count is >= ``min_total_count``; return them and what each floor removed.

    A term can fail both floors: it counts under each, and once under ``total``.
    """
    few_orgs = table["n_organisations"] < min_organisations
    rare = table["frequency"] < min_total_count
    removed = few_orgs | rare

    def summary(mask: pd.Series) -> dict[str, int]:
        return {"terms": int(mask.sum()), "proposed_count": int(table.loc[mask, "frequency"].sum())}

    report = {
        "min_organisations": summary(few_orgs),
        "min_total_count": summary(rare),
        "both": summary(few_orgs & rare),
        "total": summary(removed),
    }
    return table.loc[~removed].reset_index(drop=True), report


def agree_on_vocabulary(proposals: Mapping[str, Mapping[str, int]], config: ConsensusConfig) -> Consensus:
    """The server's whole consensus: merge the proposals, then apply the floors.

    Raises :class:`EmptyVocabularyError` naming the parameters to relax when nothing is left.
    """
    if config.min_organisations > len(proposals):
        raise EmptyVocabularyError(
            f"parameter 'vocab_consensus.min_organisations' is {config.min_organisations} but only "
            f"{len(proposals)} organisations propose terms: no term can pass; lower it"
        )
    merged = merge_vocabularies(proposals, config.merge)
    vocabulary, removed = apply_floors(merged, config.min_organisations, config.min_total_count)
    by_orgs = merged["n_organisations"].value_counts().sort_index()
    report: dict[str, Any] = {
        "merge": config.merge,
        "organisations": len(proposals),
        "proposed_terms": {org: len(p) for org, p in proposals.items()},
        "merged_terms": len(merged),
        "merged_terms_by_organisations": {str(int(k)): int(v) for k, v in by_orgs.items()},
        "floors": {"min_organisations": config.min_organisations, "min_total_count": config.min_total_count},
        "removed_by_floors": removed,
        "vocabulary_size": len(vocabulary),
        "vocabulary_proposed_count": int(vocabulary["frequency"].sum()),
    }
    if vocabulary.empty:
        raise EmptyVocabularyError(
            f"the floors removed all {len(merged)} terms of the {config.merge} of the organisations' vocabularies "
            f"({removed['min_organisations']['terms']} proposed by fewer than 'vocab_consensus.min_organisations' = "
            f"{config.min_organisations} organisations, {removed['min_total_count']['terms']} with a summed count "
            f"below 'vocab_consensus.min_total_count' = {config.min_total_count}); lower one of them"
        )
    if removed["total"]["terms"]:
        logger.info(
            "vocabulary floors: %d of %d terms removed (%d by min_organisations = %d, %d by min_total_count = %d)",
            removed["total"]["terms"],
            len(merged),
            removed["min_organisations"]["terms"],
            config.min_organisations,
            removed["min_total_count"]["terms"],
            config.min_total_count,
        )
    return Consensus(vocabulary, report)


@dataclass
class BowCorpus:
    """One organisation's documents as a sparse document-term matrix over the common vocabulary."""

    matrix: sp.csr_matrix
    doc_ids: np.ndarray
    labels: np.ndarray
    split: np.ndarray
    vocabulary: str | None = None  # fingerprint of the vocabulary its columns index (core/lineage.py)

    def subset(self, split: str) -> BowCorpus:
        """Rows of one split (``train`` or ``test``)."""
        mask = self.split == split
        return BowCorpus(self.matrix[mask], self.doc_ids[mask], self.labels[mask], self.split[mask], self.vocabulary)

    def without_empty_documents(self) -> tuple[BowCorpus, dict[str, int]]:
        """Drop documents with no term of the common vocabulary; return how many, per split.

        They carry no word to learn from or to predict, yet would count in eq. 2's weights.
        """
        empty = np.asarray(self.matrix.sum(axis=1)).ravel() == 0
        dropped = {str(s): int((self.split[empty] == s).sum()) for s in np.unique(self.split[empty])}
        keep = ~empty
        kept = BowCorpus(self.matrix[keep], self.doc_ids[keep], self.labels[keep], self.split[keep], self.vocabulary)
        return kept, dropped

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
    return BowCorpus(
        matrix, np.asarray(doc_ids), np.asarray(labels), np.asarray(split), vocabulary_fingerprint(vocabulary)
    )


def vectorize_frames(
    frames: Iterable[pd.DataFrame], vocabulary: Sequence[str], proposal: Iterable[str] | None = None
) -> tuple[BowCorpus, dict[str, Any]]:
    """One organisation's token tables (shard by shard) as a bag-of-words matrix, plus a report.

    Only the matrix, which training needs, is held whole. Documents left without any term of
    the common vocabulary (likely with ``intersection``) are dropped and counted per split.
    The report counts, per split, the tokens inside and outside the vocabulary; given the
    organisation's own ``proposal``, also the tokens of its proposed terms the consensus left
    out (by the floors, or the intersection): the organisation knows those without learning
    anything of the others' proposals.
    """
    vocabulary = list(vocabulary)
    left_out = set(proposal or ()) - set(vocabulary)
    parts: list[BowCorpus] = []
    org = "?"
    tokens: dict[str, Counter[str]] = {}
    for frame in frames:
        if len(frame):
            org = str(frame["organisation"].iloc[0])
        docs = [t.split() for t in frame["tokens"]]
        part = vectorize(
            docs, vocabulary, frame["doc_id"].to_numpy(), frame["label"].to_numpy(), frame["split"].to_numpy()
        )
        inside = np.asarray(part.matrix.sum(axis=1)).ravel()
        for doc, split, n_in in zip(docs, part.split, inside, strict=True):
            counter = tokens.setdefault(str(split), Counter())
            counter["total"] += len(doc)
            counter["in_vocabulary"] += int(n_in)
            if left_out:
                counter["of_proposed_terms_left_out"] += sum(1 for t in doc if t in left_out)
        parts.append(part)
    parts = parts or [vectorize([], vocabulary, [], [], [])]
    bow = BowCorpus(
        sp.vstack([p.matrix for p in parts], format="csr"),
        np.concatenate([p.doc_ids for p in parts]),
        np.concatenate([p.labels for p in parts]),
        np.concatenate([p.split for p in parts]),
        vocabulary_fingerprint(vocabulary),
    )
    bow, dropped = bow.without_empty_documents()
    if dropped:
        logger.warning("organisation %s: dropped %s documents with no term of the common vocabulary", org, dropped)
    kept = {s: int((bow.split == s).sum()) for s in ("train", "test")}
    token_report = {}
    for split in ("train", "test"):
        counter = tokens.get(split, Counter())
        token_report[split] = {
            "total": counter["total"],
            "in_vocabulary": counter["in_vocabulary"],
            "outside_vocabulary": counter["total"] - counter["in_vocabulary"],
        }
        if proposal is not None:
            token_report[split]["of_proposed_terms_left_out"] = counter["of_proposed_terms_left_out"]
    report: dict[str, Any] = {
        "organisation": org,
        "documents": kept,
        "dropped_no_vocabulary_term": dropped,
        "tokens": token_report,
    }
    if proposal is not None:
        report["proposed_terms_left_out"] = len(left_out)
    return bow, report
