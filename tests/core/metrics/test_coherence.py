"""Exact federated coherence: summed per-organisation counts equal gensim on the concatenated texts."""

import json

import numpy as np
import pytest
from gensim.corpora import Dictionary
from gensim.models.coherencemodel import CoherenceModel

from fedtopic_pipelines.core.metrics import coherence
from fedtopic_pipelines.core.metrics.coherence import (
    CoherenceCandidates,
    CoherenceError,
    coherence_by_model,
    context_of,
    count_cooccurrences,
    counts_from_dict,
    counts_to_dict,
    sum_counts,
)

MEASURES = ("c_npmi", "c_v", "u_mass", "c_uci")
CONTEXTS = sorted({context_of(m) for m in MEASURES})


def _organisations() -> dict[str, list[list[str]]]:
    """Three organisations of different sizes, each with words the others lack; texts empty, shorter and
    longer than both windows, with repeated words close together (where gensim's window set is not the plain set)."""
    rng = np.random.default_rng(3)
    shared = [f"s{i}" for i in range(12)]
    own = {o: [f"{o}{i}" for i in range(10)] for o in ("a", "b", "c")}
    sizes = {"a": 40, "b": 9, "c": 3}
    out = {}
    for org, n in sizes.items():
        words = shared + own[org]
        texts = []
        for _ in range(n):
            length = int(rng.choice([0, 1, 4, 9, 10, 11, 30, 150]))
            texts.append([words[j] for j in rng.integers(0, len(words), size=length)])
        out[org] = texts
    out["a"].append(["s0", "s1", "s0", "s0", "a1", "s1"] * 40)  # repeats within 10 and 110 tokens
    return out


def _topics() -> dict[str, list[list[str]]]:
    return {
        "m1": [["s0", "s1", "s2", "a1", "s3"], ["b0", "b1", "s4", "s5", "s0"], ["s6", "c1", "a0", "s1", "s2"]],
        "m2": [["a0", "a1", "a2", "a3", "s0"], ["c0", "c2", "c1", "s3", "s7"]],
    }


def _gensim(topics: list[list[str]], texts: list[list[str]], measure: str) -> np.ndarray:
    model = CoherenceModel(
        topics=topics, texts=texts, dictionary=Dictionary(texts), coherence=measure, topn=len(topics[0]), processes=1
    )
    return np.asarray(model.get_coherence_per_topic(), dtype=float)


def test_pooled_counts_equal_gensim_on_concatenated_texts() -> None:
    orgs = _organisations()
    topics = _topics()
    candidates = CoherenceCandidates.from_topics(t for ts in topics.values() for t in ts)
    per_org = {o: count_cooccurrences(texts, candidates, CONTEXTS) for o, texts in orgs.items()}
    # each organisation lacks some candidate words
    for org in orgs:
        assert (per_org[org][context_of("u_mass")].occurrences == 0).any()
    # counts survive JSON, as they travel
    per_org = {o: counts_from_dict(json.loads(json.dumps(counts_to_dict(c))), candidates) for o, c in per_org.items()}
    pooled = sum_counts(per_org.values())
    concatenated = [t for texts in orgs.values() for t in texts]
    for measure in MEASURES:
        result = coherence_by_model(topics, candidates, pooled, measure)
        for name, ts in topics.items():
            expected = _gensim(ts, concatenated, measure)
            assert np.isfinite(expected).all()
            np.testing.assert_allclose(result[name].per_topic, expected, rtol=0, atol=1e-9, err_msg=measure)
            assert result[name].mean == pytest.approx(float(np.mean(expected)), abs=1e-9)
            assert result[name].undefined_topics == 0 and result[name].coverage == 1.0
            # the test can fail: the old per-organisation average is a different number
            by_org = [coherence_by_model(topics, candidates, per_org[o], measure)[name].mean for o in orgs]
            averaged = np.mean([v for v in by_org if v is not None])
            assert abs(averaged - result[name].mean) > 1e-3, measure


def test_one_organisation_equals_gensim_and_unseen_words_make_a_topic_undefined() -> None:
    texts = _organisations()["b"]
    topics = {"m": [["s0", "s1", "s2"], ["s0", "a9", "s1"]]}  # a9 never occurs at b
    candidates = CoherenceCandidates.from_topics(topics["m"])
    counts = count_cooccurrences(texts, candidates, CONTEXTS)
    for measure in MEASURES:
        result = coherence_by_model(topics, candidates, counts, measure)["m"]
        assert result.per_topic[0] == pytest.approx(_gensim([topics["m"][0]], texts, measure)[0], abs=1e-9)
        assert np.isnan(result.per_topic[1]) and result.undefined_topics == 1
        assert result.coverage == pytest.approx(5 / 6)
        assert result.mean == pytest.approx(result.per_topic[0])


def test_candidates_and_counts_are_checked() -> None:
    candidates = CoherenceCandidates.from_topics([["x", "y", "z"], ["z", "w"]])
    assert candidates.words == ("w", "x", "y", "z")
    assert candidates.pairs.tolist() == [[0, 3], [1, 2], [1, 3], [2, 3]]  # only within-topic pairs
    assert CoherenceCandidates.from_dict(json.loads(json.dumps(candidates.to_dict()))) == candidates
    counts = count_cooccurrences([["x", "y"]], candidates, [context_of("c_npmi")])
    with pytest.raises(CoherenceError, match="candidates"):
        counts_from_dict(counts_to_dict(counts), CoherenceCandidates.from_topics([["x", "y"]]))
    with pytest.raises(CoherenceError, match="different contexts"):
        sum_counts([counts, count_cooccurrences([["x"]], candidates, [context_of("u_mass")])])
    with pytest.raises(CoherenceError, match="not among"):
        coherence_by_model({"m": [["x", "q"]]}, candidates, counts, "c_npmi")
    with pytest.raises(CoherenceError, match="needs"):
        coherence_by_model({"m": [["x", "y"]]}, candidates, counts, "c_v")
    with pytest.raises(CoherenceError, match="unsupported"):
        context_of("c_w2v")


def test_coherent_topics_score_higher() -> None:
    texts = [
        ["apple", "banana", "fruit"],
        ["apple", "fruit", "juice"],
        ["car", "engine", "wheel"],
        ["car", "wheel", "road"],
    ] * 5
    topics = {
        "good": [["apple", "fruit", "banana"], ["car", "wheel", "engine"]],
        "bad": [["apple", "car", "road"], ["fruit", "road", "engine"]],
    }
    candidates = CoherenceCandidates.from_topics(t for ts in topics.values() for t in ts)
    counts = count_cooccurrences(texts, candidates, CONTEXTS)
    for measure in MEASURES:
        result = coherence_by_model(topics, candidates, counts, measure)
        assert result["good"].mean > result["bad"].mean, measure


def test_counting_in_chunks_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = _organisations()["a"]
    candidates = CoherenceCandidates.from_topics(t for ts in _topics().values() for t in ts)
    whole = counts_to_dict(count_cooccurrences(texts, candidates, CONTEXTS))
    monkeypatch.setattr(coherence, "_CHUNK_ENTRIES", 7)
    assert counts_to_dict(count_cooccurrences(texts, candidates, CONTEXTS)) == whole
