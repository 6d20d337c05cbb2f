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

Against an honest-but-curious server (``privacy.vocab_k``, ``vocab_min_count``,
``vocab_keyed``, ``vocab_count_noise``; docs/vocabulary.md) the exchange has up to two
steps: each organisation *offers* its proposal (counts possibly noised; with k > 1 and
``vocab_keyed`` as keyed digests, ``core/vocab/privacy.py``), the server *selects* the
tokens that pass the privacy rule and the floors, and, keyed, asks the organisations to
*reveal* only those; it checks every reveal and then publishes the vocabulary. A term passes
the privacy rule if at least k organisations hold it, or (``vocab_min_count`` m > 0) if its
summed count reaches m; it must also pass both floors. :func:`exchange_vocabulary` plays the
whole exchange in one process.
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

from fedtopic_pipelines.core.config import ConsensusConfig, PrivacyConfig, count_from
from fedtopic_pipelines.core.lineage import TokensHasher, vocabulary_fingerprint
from fedtopic_pipelines.core.text.preprocess import largest_floor
from fedtopic_pipelines.core.vocab.privacy import (
    VocabularyPrivacyError,
    check_reveal,
    noise_seed,
    noisy_counts,
    server_view,
    term_digest,
    term_opening,
)

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


def total_count_floor(setting: int | float, table: pd.DataFrame) -> int:
    """``vocab_consensus.min_total_count`` as a count: itself, or (a float) that share of the merged
    terms' summed proposed counts, rounded up, so that the floor scales with the corpus."""
    return count_from(setting, int(table["frequency"].sum()))


def keep_min_terms(merged: pd.DataFrame, passes: pd.Series, config: ConsensusConfig, least: int) -> int:
    """The summed-count floor to apply: ``least``, lowered to the largest value that keeps
    ``vocab_consensus.min_terms`` of the terms the other floor and the privacy rule keep (or all
    of them, when they keep fewer). A share measured on a large corpus cut a small one to a few
    dozen generic words; this makes the floor follow the corpus from the merged counts alone."""
    if not config.min_terms or least <= 0:
        return least
    eligible = merged.loc[passes & (merged["n_organisations"] >= config.min_organisations), "frequency"]
    kept = int((eligible >= least).sum())
    found = None if kept >= config.min_terms else largest_floor(eligible, below=least, terms=config.min_terms)
    if not found:
        return least
    logger.info(
        "vocabulary floors: 'vocab_consensus.min_total_count' = %s (%d) would keep %d terms, fewer than "
        "'vocab_consensus.min_terms' = %d: lowered to %d, which keeps %d of them",
        config.min_total_count,
        least,
        kept,
        config.min_terms,
        found[0],
        found[1],
    )
    return found[0]


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


def keyed(privacy: PrivacyConfig | None) -> bool:
    """Whether proposals travel as keyed digests: ``privacy.vocab_keyed`` with k > 1."""
    return privacy is not None and privacy.vocab_k > 1 and privacy.vocab_keyed


def privacy_mask(table: pd.DataFrame, privacy: PrivacyConfig) -> pd.Series:
    """The merged terms that pass the privacy rule: held by >= ``vocab_k`` organisations, or
    (``vocab_min_count`` > 0) with a summed proposed count >= ``vocab_min_count``."""
    passes = table["n_organisations"] >= privacy.vocab_k
    if privacy.vocab_min_count > 0:
        passes |= table["frequency"] >= privacy.vocab_min_count
    return passes


def _refuse_unreachable(organisations: int, config: ConsensusConfig, privacy: PrivacyConfig) -> None:
    """Stop before merging when ``vocab_k`` or ``min_organisations`` exceeds the organisations: no term could pass."""
    if privacy.vocab_k > organisations:
        raise EmptyVocabularyError(
            f"parameter 'privacy.vocab_k' is {privacy.vocab_k} but only {organisations} organisations propose "
            f"terms: no term can be held by {privacy.vocab_k} organisations; lower it (at most {organisations})"
        )
    if config.min_organisations > organisations:
        raise EmptyVocabularyError(
            f"parameter 'vocab_consensus.min_organisations' is {config.min_organisations} but only "
            f"{organisations} organisations propose terms: no term can pass; lower it"
        )


def floor_suggestions(merged: pd.DataFrame, passes: pd.Series, config: ConsensusConfig, least: int) -> list[str]:
    """For each floor, a value that keeps terms with the other floor and the privacy rule as they are,
    computed from the merged counts: what an empty-vocabulary error proposes. ``least``: the
    summed-count floor as a count (:func:`total_count_floor`)."""
    out = []
    by_count = merged.loc[passes & (merged["n_organisations"] >= config.min_organisations), "frequency"]
    found = largest_floor(by_count, least)
    if found:
        out.append(f"'vocab_consensus.min_total_count' = {found[0]} keeps {found[1]} terms")
    by_orgs = merged.loc[passes & (merged["frequency"] >= least), "n_organisations"]
    found = largest_floor(by_orgs, config.min_organisations)
    if found:
        out.append(f"'vocab_consensus.min_organisations' = {found[0]} keeps {found[1]} terms")
    if not out and passes.any():
        both = largest_floor(merged.loc[passes, "frequency"], least + 1)
        if both:
            out.append(
                f"'vocab_consensus.min_organisations' = 1 with 'vocab_consensus.min_total_count' = {both[0]} "
                f"keeps {both[1]} terms"
            )
    if not passes.any():
        most = int(merged["n_organisations"].max())
        out.append(
            f"no term is held by 'privacy.vocab_k' organisations: the most any term is held by is {most}; "
            f"'privacy.vocab_k' = {most} lowers the privacy floor (docs/privacy.md)"
        )
    return out


def _refuse_empty(
    vocabulary: pd.DataFrame,
    merged: pd.DataFrame,
    removed: dict[str, Any],
    passes: pd.Series,
    config: ConsensusConfig,
    privacy: PrivacyConfig,
    least: int,
) -> None:
    """Stop on an empty vocabulary, saying how many terms each floor and the privacy rule removed,
    and which value of each floor would keep terms."""
    if vocabulary.empty:
        suggestions = floor_suggestions(merged, passes, config, least)
        raise EmptyVocabularyError(
            f"the floors removed all {len(merged)} terms of the {config.merge} of the organisations' vocabularies "
            f"({removed['min_organisations']['terms']} proposed by fewer than 'vocab_consensus.min_organisations' = "
            f"{config.min_organisations} organisations, {removed['min_total_count']['terms']} with a summed count "
            f"below 'vocab_consensus.min_total_count' = {_floor_shown(config.min_total_count, least)}, "
            f"{int((~passes).sum())} held by fewer than 'privacy.vocab_k' = {privacy.vocab_k} organisations"
            + (
                f" with a summed count below 'privacy.vocab_min_count' = {privacy.vocab_min_count}"
                if privacy.vocab_min_count
                else ""
            )
            + "); try "
            + "; or ".join(suggestions)
        )


def _floor_shown(setting: int | float, least: int) -> str:
    return str(setting) if isinstance(setting, int) else f"{setting} ({least} of the summed proposed counts)"


def removed_per_organisation(proposals: Mapping[str, Mapping[str, int]], kept: set[str]) -> dict[str, dict[str, int]]:
    """What the floors and the privacy rule took from each organisation's proposal: the smallest
    organisation's terms go first under a floor, and this says by how much."""
    out = {}
    for org, proposal in proposals.items():
        gone = [t for t in proposal if t not in kept]
        out[org] = {
            "proposed_terms": len(proposal),
            "kept_terms": len(proposal) - len(gone),
            "removed_terms": len(gone),
            "removed_proposed_count": int(sum(proposal[t] for t in gone)),
        }
    return out


def _consensus_report(
    proposals: Mapping[str, Mapping[str, int]],
    merged: pd.DataFrame,
    vocabulary: pd.DataFrame,
    removed: dict[str, Any],
    passes: pd.Series,
    kept_by_floors: pd.Series,
    config: ConsensusConfig,
    privacy: PrivacyConfig,
    floors: tuple[int, int],
) -> dict[str, Any]:
    """The server's report: counts over the proposals only, what each floor and the privacy rule
    removed, and the summed-count floor as configured and as applied."""
    configured, least = floors
    by_orgs = merged["n_organisations"].value_counts().sort_index()

    def summary(mask: pd.Series) -> dict[str, int]:
        return {"terms": int(mask.sum()), "proposed_count": int(merged.loc[mask, "frequency"].sum())}

    report: dict[str, Any] = {
        "merge": config.merge,
        "organisations": len(proposals),
        "proposed_terms": {org: len(p) for org, p in proposals.items()},
        "merged_terms": len(merged),
        "merged_terms_by_organisations": {str(int(k)): int(v) for k, v in by_orgs.items()},
        "floors": {
            "min_organisations": config.min_organisations,
            "min_total_count": config.min_total_count,
            "min_total_count_as_count": least,
            "min_terms": config.min_terms,
            "min_total_count_lowered_from": configured if least < configured else None,
        },
        "removed_by_floors": removed,
        "privacy": {
            "vocab_k": privacy.vocab_k,
            "vocab_min_count": privacy.vocab_min_count,
            "keyed": keyed(privacy),
            "count_noise": privacy.vocab_count_noise,
            # every term that fails the privacy rule, and those of them the floors would have kept
            "removed_by_vocab_k": summary(~passes),
            "removed_by_vocab_k_only": summary(~passes & kept_by_floors),
        },
        "vocabulary_size": len(vocabulary),
        "vocabulary_proposed_count": int(vocabulary["frequency"].sum()),
        "per_organisation": removed_per_organisation(proposals, set(vocabulary["term"])),
    }
    return report


def agree_on_vocabulary(
    proposals: Mapping[str, Mapping[str, int]], config: ConsensusConfig, privacy: PrivacyConfig | None = None
) -> Consensus:
    """The server's whole consensus: merge the proposals, then keep the terms that pass the
    privacy rule (``privacy``; none: every term passes) and both floors.

    The proposals' keys may be keyed digests (the first step of the keyed exchange): nothing
    here reads a term. Raises :class:`EmptyVocabularyError` naming the parameters to relax when
    nothing is left, or when ``vocab_k`` or ``min_organisations`` exceeds the organisations.
    """
    privacy = privacy or PrivacyConfig()
    _refuse_unreachable(len(proposals), config, privacy)
    merged = merge_vocabularies(proposals, config.merge)
    passes = privacy_mask(merged, privacy)
    configured = total_count_floor(config.min_total_count, merged)
    least = keep_min_terms(merged, passes, config, configured)
    floored, removed = apply_floors(merged, config.min_organisations, least)
    kept_by_floors = merged["term"].isin(set(floored["term"]))
    vocabulary = merged.loc[passes & kept_by_floors].reset_index(drop=True)
    report = _consensus_report(
        proposals, merged, vocabulary, removed, passes, kept_by_floors, config, privacy, (configured, least)
    )
    _refuse_empty(vocabulary, merged, removed, passes, config, privacy, least)
    if removed["total"]["terms"] or not passes.all():
        logger.info(
            "vocabulary floors: %d of %d terms removed (%d by min_organisations = %d, %d by min_total_count = %d, "
            "%d by privacy.vocab_k = %d, %d of them by it alone)",
            len(merged) - len(vocabulary),
            len(merged),
            removed["min_organisations"]["terms"],
            config.min_organisations,
            removed["min_total_count"]["terms"],
            least,
            int((~passes).sum()),
            privacy.vocab_k,
            int((~passes & kept_by_floors).sum()),
        )
    return Consensus(vocabulary, report)


# The exchange, step by step (docs/vocabulary.md) ------------------------------------------------


def offer_vocabulary(
    proposal: Mapping[str, int],
    privacy: PrivacyConfig | None,
    key: bytes | None = None,
    noise_secret: bytes | None = None,
) -> dict[str, int]:
    """Organisation, step 1: what leaves it. Its proposal, counts noised when
    ``vocab_count_noise`` > 0 (seeded by ``noise_secret`` and the proposal), terms replaced by
    their keyed digests when :func:`keyed` (not without ``privacy``: the plain offer, as
    :func:`select_vocabulary` and the engine read it). ``key``: the organisations' shared key."""
    secure = keyed(privacy)
    privacy = privacy or PrivacyConfig()
    counts = {t: int(c) for t, c in proposal.items()}
    if privacy.vocab_count_noise > 0:
        secret = noise_secret if noise_secret is not None else key
        if secret is None:
            raise ValueError("'privacy.vocab_count_noise' > 0 needs a secret to seed the noise from")
        counts = noisy_counts(counts, privacy.vocab_count_noise, noise_seed(secret, proposal))
    if not secure:
        return counts
    if key is None:
        raise ValueError("'privacy.vocab_keyed' with vocab_k > 1 needs the organisations' key")
    return {term_digest(key, t): c for t, c in counts.items()}


@dataclass(frozen=True)
class Selection:
    """Server, step 2: the consensus over what was offered (digests, when keyed) and, keyed,
    the digests the organisations must reveal (those of the vocabulary, nothing else)."""

    consensus: Consensus
    keyed: bool

    @property
    def request(self) -> list[str]:
        return sorted(self.consensus.vocabulary["term"]) if self.keyed else []


def select_vocabulary(
    offers: Mapping[str, Mapping[str, int]], config: ConsensusConfig, privacy: PrivacyConfig | None = None
) -> Selection:
    """Server, step 2 (:class:`Selection`): the privacy rule and the floors on the offers."""
    return Selection(agree_on_vocabulary(offers, config, privacy), keyed(privacy))


def reveal_vocabulary(proposal: Mapping[str, int], requested: Iterable[str], key: bytes) -> dict[str, list[str]]:
    """Organisation, step 3: for each requested digest of one of its own terms, the term and its
    opening (the server checks one against the other); nothing for the digests of others."""
    mine = {term_digest(key, t): t for t in proposal}
    return {d: [mine[d], term_opening(key, mine[d])] for d in requested if d in mine}


def complete_vocabulary(
    selection: Selection,
    offers: Mapping[str, Mapping[str, int]],
    reveals: Mapping[str, Mapping[str, Sequence[str]]],
) -> Consensus:
    """Server, step 4: check every organisation's reveal (it opens exactly the requested digests
    it offered, each to its own term; a lie is an error naming the organisation) and publish the
    vocabulary in plain terms, in the order a plain consensus gives."""
    consensus = selection.consensus
    report = {**consensus.report, "terms_read_by_server": consensus.report["merged_terms"]}
    if not selection.keyed:
        return Consensus(consensus.vocabulary, report)
    request = selection.request
    terms: dict[str, str] = {}
    owner: dict[str, str] = {}
    for org, offer in offers.items():
        for digest, term in check_reveal(org, request, offer, reveals.get(org, {})).items():
            if term in owner and owner[term] != digest:
                raise VocabularyPrivacyError(
                    f"organisation '{org}' revealed the term of another digest: its key differs from the others'"
                )
            terms[digest], owner[term] = term, digest
    table = consensus.vocabulary.assign(term=consensus.vocabulary["term"].map(terms))
    table = table.sort_values(["frequency", "term"], ascending=[False, True], ignore_index=True)
    report["terms_read_by_server"] = len(table)
    return Consensus(table, report)


def exchange_vocabulary(
    proposals: Mapping[str, Mapping[str, int]],
    config: ConsensusConfig,
    privacy: PrivacyConfig | None = None,
    key: bytes | None = None,
    noise_secrets: Mapping[str, bytes] | None = None,
) -> tuple[Consensus, dict[str, Any]]:
    """The whole exchange in one process (every party is this process): offers, selection,
    reveals, the vocabulary; returns it with the server's view (``core/vocab/privacy.py``
    :func:`server_view`, what attack (d) reads). ``noise_secrets``: each organisation's noise
    secret (default: ``key``)."""
    noise_secrets = noise_secrets or {}
    offers = {org: offer_vocabulary(p, privacy, key, noise_secrets.get(org, key)) for org, p in proposals.items()}
    selection = select_vocabulary(offers, config, privacy)
    reveals = (
        {org: reveal_vocabulary(p, selection.request, key) for org, p in proposals.items()} if selection.keyed else {}
    )
    consensus = complete_vocabulary(selection, offers, reveals)
    return consensus, view_of(selection, offers, reveals, consensus)


def view_of(
    selection: Selection,
    offers: Mapping[str, Mapping[str, int]],
    reveals: Mapping[str, Mapping[str, Sequence[str]]],
    consensus: Consensus,
) -> dict[str, Any]:
    """The server's view of one exchange (offers, opened digests per organisation, vocabulary)."""
    revealed = {org: {d: pair[0] for d, pair in r.items()} for org, r in reveals.items()}
    return server_view(offers, selection.keyed, revealed, consensus.vocabulary["term"].tolist())


@dataclass
class BowCorpus:
    """One organisation's documents as a sparse document-term matrix over the common vocabulary."""

    matrix: sp.csr_matrix
    doc_ids: np.ndarray
    labels: np.ndarray
    split: np.ndarray
    vocabulary: str | None = None  # fingerprint of the vocabulary its columns index (core/lineage.py)
    tokens: str | None = None  # fingerprint of the token table its rows count (core/lineage.py)

    def subset(self, split: str) -> BowCorpus:
        """Rows of one split (``train`` or ``test``)."""
        mask = self.split == split
        return BowCorpus(
            self.matrix[mask], self.doc_ids[mask], self.labels[mask], self.split[mask], self.vocabulary, self.tokens
        )

    def without_empty_documents(self) -> tuple[BowCorpus, dict[str, int]]:
        """Drop documents with no term of the common vocabulary; return how many, per split.

        They carry no word to learn from or to predict, yet would count in eq. 2's weights.
        """
        empty = np.asarray(self.matrix.sum(axis=1)).ravel() == 0
        dropped = {str(s): int((self.split[empty] == s).sum()) for s in np.unique(self.split[empty])}
        keep = ~empty
        kept = BowCorpus(
            self.matrix[keep], self.doc_ids[keep], self.labels[keep], self.split[keep], self.vocabulary, self.tokens
        )
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


def _token_report(tokens: Mapping[str, Counter[str]], with_left_out: bool) -> dict[str, dict[str, int]]:
    """Per split, the tokens inside and outside the vocabulary (and of proposed terms left out, given a proposal)."""
    token_report = {}
    for split in ("train", "test"):
        counter = tokens.get(split, Counter())
        token_report[split] = {
            "total": counter["total"],
            "in_vocabulary": counter["in_vocabulary"],
            "outside_vocabulary": counter["total"] - counter["in_vocabulary"],
        }
        if with_left_out:
            token_report[split]["of_proposed_terms_left_out"] = counter["of_proposed_terms_left_out"]
    return token_report


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
    fingerprint = TokensHasher()
    for frame in frames:
        fingerprint.update(frame)
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
        fingerprint.hexdigest(),
    )
    bow, dropped = bow.without_empty_documents()
    if dropped:
        logger.warning("organisation %s: dropped %s documents with no term of the common vocabulary", org, dropped)
    kept = {s: int((bow.split == s).sum()) for s in ("train", "test")}
    token_report = _token_report(tokens, with_left_out=proposal is not None)
    report: dict[str, Any] = {
        "organisation": org,
        "documents": kept,
        "dropped_no_vocabulary_term": dropped,
        "tokens": token_report,
    }
    if proposal is not None:
        report["proposed_terms_left_out"] = len(left_out)
    return bow, report
