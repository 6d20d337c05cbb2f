"""Topic coherence with gensim's CoherenceModel, on one organisation's own texts.

A topic of a consensus model may contain terms an organisation never wrote; NPMI and
C_V are undefined for them (gensim returns inf / NaN). We therefore score each topic as
the organisation sees it: its ``topn`` highest-ranked words *among those occurring in
the reference texts* (the topic restricted to the organisation's vocabulary), and report
next to it the share of the topic's plain top-``topn`` words that occur there
(``coverage``). A topic with fewer than ``topn`` such words among its ranked candidates
is left out of the mean and counted in ``undefined_topics``.

Co-occurrence statistics are accumulated once for the union of all models' topics
(``CoherenceModel.for_topics``) and every model is scored from them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from gensim.corpora import Dictionary
from gensim.models.coherencemodel import CoherenceModel

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CoherenceResult:
    """Mean coherence over defined topics, top-word coverage, and how many topics were undefined."""

    mean: float
    coverage: float
    undefined_topics: int


def coherence_by_model(
    ranked_topics_by_model: Mapping[str, Sequence[Sequence[str]]],
    texts: Sequence[Sequence[str]],
    measure: str,
    topn: int,
) -> dict[str, CoherenceResult]:
    """Coherence of every model's topics on ``texts``; each topic is a ranked word list
    (longer than ``topn``, so that unseen words can be skipped)."""
    dictionary = Dictionary(texts)
    seen = set(dictionary.token2id)
    names = list(ranked_topics_by_model)
    restricted: dict[str, list[list[str] | None]] = {}
    coverage: dict[str, float] = {}
    for name in names:
        ranked = ranked_topics_by_model[name]
        coverage[name] = float(np.mean([sum(w in seen for w in t[:topn]) / topn for t in ranked]))
        restricted[name] = []
        for topic in ranked:
            words = [w for w in topic if w in seen][:topn]
            restricted[name].append(words if len(words) == topn else None)
    usable = {name: [t for t in restricted[name] if t is not None] for name in names}
    scored = [name for name in names if usable[name]]
    values: dict[str, np.ndarray] = {name: np.array([], dtype=float) for name in names}
    if scored:
        model = CoherenceModel.for_topics(
            [usable[name] for name in scored],
            dictionary=dictionary,
            texts=[list(t) for t in texts],
            coherence=measure,
            topn=topn,
            processes=1,
        )
        for name in scored:
            model.topics = usable[name]  # words already accumulated: no new pass over the texts
            values[name] = np.asarray(model.get_coherence_per_topic(), dtype=float)
    out: dict[str, CoherenceResult] = {}
    for name in names:
        finite = values[name][np.isfinite(values[name])]
        undefined = len(restricted[name]) - len(finite)
        if undefined:
            logger.info(
                "%s: %d of %d topics have no %s coherence on these texts",
                name,
                undefined,
                len(restricted[name]),
                measure,
            )
        out[name] = CoherenceResult(float(finite.mean()) if len(finite) else float("nan"), coverage[name], undefined)
    return out
