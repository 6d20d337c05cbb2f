"""A trained topic model's headline scores, the way the evaluate pipeline computes them, in one
call: for benchmarks' learning curves and the Flower demo's report beside the in-process model.

Every figure is computed inside each organisation and summed: each organisation counts the top
``evaluate.top_words`` words' co-occurrences in its own preprocessed texts and the server sums
the counts into the pooled NPMI (gensim's c_npmi); each organisation scores an SVM's macro-F1
on its own held-out documents' topic proportions, and the mean is taken over the organisations
where it is defined. Topic diversity and redundancy need only the model's top words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from fedtopic_pipelines.core.config import EvaluateConfig
from fedtopic_pipelines.core.metrics.classification import svm_macro_f1
from fedtopic_pipelines.core.metrics.coherence import (
    CoherenceCandidates,
    coherence_by_model,
    context_of,
    count_cooccurrences,
    sum_counts,
)
from fedtopic_pipelines.core.metrics.topics import redundancy, top_words, topic_diversity


class PooledScorer:
    """Scores a model (anything with ``topic_word()`` and ``doc_topic(dense)``) against the
    organisations' held-out bags of words (``tests``, with labels) and their preprocessed texts."""

    def __init__(
        self,
        terms: Sequence[str],
        tests: Mapping[str, Any],
        texts: Mapping[str, Sequence[Sequence[str]]],
        config: EvaluateConfig,
    ) -> None:
        self.terms, self.tests, self.texts, self.config = list(terms), tests, texts, config
        self.dense = {org: torch.from_numpy(t.matrix.toarray()) for org, t in tests.items() if len(t)}

    def npmi(self, model: Any) -> float:
        """The pooled NPMI alone (cheap next to the per-organisation SVMs: for curves at many organisations)."""
        with torch.no_grad():
            beta = model.topic_word().cpu().numpy()
        return self._npmi(top_words(beta, self.terms, self.config.top_words))

    def _npmi(self, topics: list[list[str]]) -> float:
        candidates = CoherenceCandidates.from_topics(topics)
        context = context_of("c_npmi")
        pooled = sum_counts(count_cooccurrences(texts, candidates, [context]) for texts in self.texts.values())
        npmi = coherence_by_model({"model": topics}, candidates, pooled, "c_npmi")["model"].mean
        return float("nan") if npmi is None else float(npmi)

    def __call__(self, model: Any) -> dict[str, Any]:
        config = self.config
        with torch.no_grad():
            beta = model.topic_word().cpu().numpy()
        topics = top_words(beta, self.terms, config.top_words)
        npmi = self._npmi(topics)
        found = redundancy(topics, config.duplicate_shared_words, config.rbo_weight)
        with torch.no_grad():
            f1s = [
                svm_macro_f1(
                    model.doc_topic(dense).cpu().numpy(), self.tests[org].labels, config.svm_test_size, config.svm_c,
                    config.seed,
                )
                for org, dense in self.dense.items()
            ]  # fmt: skip
        defined = [f for f in f1s if f is not None and np.isfinite(f)]
        return {
            "npmi": npmi,
            "topic_diversity": topic_diversity(top_words(beta, self.terms, config.diversity_top_words)),
            "duplicate_topic_pairs": len(found.duplicate_pairs),
            "largest_topic_overlap": found.largest_overlap,
            "inverted_rbo": found.inverted_rbo,
            "macro_f1": float(np.mean(defined)) if defined else float("nan"),
            "duplicate_pairs_detail": " ".join(f"{i}-{j}:{n}" for i, j, n in found.duplicate_pairs),
            "topics": topics,
        }
