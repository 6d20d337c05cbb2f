"""Warnings for a degenerate topic model: what a reviewer would reject, with what to change.

A model whose topics repeat each other, whose vocabulary cannot give every topic distinct top
words, or whose pooled coherence is undefined for some topic still gets every metric; this
module says so as a warning with the parameter to change and a value to try, computed from
the model, so that a run never reports such a model as a silent success.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from fedtopic_pipelines.core.metrics.topics import Redundancy


@dataclass(frozen=True)
class QualityWarning:
    """One problem of one model: what it is, why, and the parameter (with a value) that addresses it."""

    model: str
    kind: str  # duplicate_topics | small_vocabulary | undefined_coherence
    message: str
    parameter: str | None
    value_to_try: int | None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def distinct_topic_count(n_topics: int, pairs: Sequence[tuple[int, int, int]]) -> int:
    """How many topics remain when every duplicate pair is merged (connected components)."""
    parent = list(range(n_topics))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j, _ in pairs:
        parent[root(i)] = root(j)
    return len({root(i) for i in range(n_topics)})


def model_warnings(
    model: str,
    topics: Sequence[Sequence[str]],
    found: Redundancy,
    vocabulary_size: int,
    undefined: Mapping[str, int],
    n_topics_parameter: str,
) -> list[QualityWarning]:
    """The warnings a model of these top-word lists earns; ``undefined``: measure -> topics whose
    pooled score is undefined. ``n_topics_parameter``: the full path of the topic count."""
    k, n = len(topics), len(topics[0])
    out: list[QualityWarning] = []
    if vocabulary_size < n * k:
        fit = max(2, vocabulary_size // n)
        out.append(
            QualityWarning(
                model,
                "small_vocabulary",
                f"a vocabulary of {vocabulary_size} terms cannot give {k} topics {n} distinct top words each "
                f"({n * k} needed): set '{n_topics_parameter}' to {fit} or lower the vocabulary floors "
                "('vocab_consensus.min_total_count', 'vocab_consensus.min_organisations', 'preprocess.min_df'; "
                f"'vocab_consensus.min_terms' = {n * k * 5 // 2} lowers the summed-count floor for you)",
                n_topics_parameter,
                fit,
            )
        )
    if found.duplicate_pairs:
        distinct = distinct_topic_count(k, found.duplicate_pairs)
        i, j = found.pair
        out.append(
            QualityWarning(
                model,
                "duplicate_topics",
                f"{len(found.duplicate_pairs)} pair(s) of topics share {found.duplicate_at} "
                f"or more of their top {n} words; the closest, topics {i} and {j}, share {found.largest_overlap} "
                f"({' '.join(found.shared)}). Merged, they leave {distinct} distinct topics: try "
                f"'{n_topics_parameter}' = {distinct}",
                n_topics_parameter,
                distinct,
            )
        )
    for measure, count in undefined.items():
        if count:
            out.append(
                QualityWarning(
                    model,
                    "undefined_coherence",
                    f"{count} of {k} topics have no pooled {measure}: a top word occurs in no organisation's "
                    "evaluation texts, so the model's score is the mean over the other topics",
                    None,
                    None,
                )
            )
    return out
