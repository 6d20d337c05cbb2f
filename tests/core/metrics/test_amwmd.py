"""AMWMD (gFedNTM eq. 7) on tiny word vectors, and the default GloVe vectors."""

import math

import numpy as np
import pytest
from gensim.models import KeyedVectors

from fedtopic_pipelines.core.metrics.amwmd import AMWMDError, amwmd, amwmd_matrix
from fedtopic_pipelines.core.text.word_vectors import load_word_vectors


@pytest.fixture(scope="module")
def vectors() -> KeyedVectors:
    kv = KeyedVectors(3)
    words = ["rocket", "orbit", "moon", "puck", "goal", "team", "disk", "file"]
    base = {"rocket": [1, 0, 0], "orbit": [0.9, 0.1, 0], "moon": [1, 0.2, 0], "puck": [0, 1, 0]}
    base |= {"goal": [0.1, 1, 0], "team": [0, 0.9, 0.1], "disk": [0, 0, 1], "file": [0.1, 0, 0.9]}
    kv.add_vectors(words, np.array([base[w] for w in words], dtype=np.float32))
    return kv


SPACE, HOCKEY, COMPUTER = ["rocket", "orbit", "moon"], ["puck", "goal", "team"], ["disk", "file"]


def test_eq7_is_the_sum_of_each_node_topics_nearest_wmd(vectors) -> None:
    node, evaluated = [SPACE, HOCKEY], [COMPUTER, ["rocket", "moon"], ["goal", "team"]]
    result = amwmd(node, evaluated, vectors)
    expected = [min(vectors.wmdistance(t, e) for e in evaluated) for t in node]
    assert result.total == pytest.approx(sum(expected)) and result.mean == pytest.approx(sum(expected) / 2)
    assert result.topics == 2 and result.undefined_topics == 0 and result.missing_words == 0
    assert amwmd(node, node, vectors).total == pytest.approx(0, abs=1e-6)  # a model against itself
    far = amwmd(node, [COMPUTER], vectors)
    assert far.mean > result.mean  # the minimum picks the closest topic


def test_words_without_vectors_are_counted_and_empty_topics_left_out(vectors) -> None:
    result = amwmd([[*SPACE, "zzz"], ["qqq", "www"]], [SPACE], vectors)
    assert result.missing_words == 3 and result.undefined_topics == 1 and result.topics == 1
    assert result.total == pytest.approx(0, abs=1e-6)
    with pytest.raises(AMWMDError, match="no topic with a word that has a vector"):
        amwmd([SPACE], [["qqq"]], vectors)


def test_the_matrix_has_a_row_per_node_and_a_column_per_model(vectors) -> None:
    nodes = {"a": [SPACE], "b": [HOCKEY]}
    values, left_out = amwmd_matrix(nodes, {**nodes, "federated": [SPACE, HOCKEY]}, vectors, progress=False)
    assert list(values.index) == ["a", "b"] and list(values.columns) == ["a", "b", "federated"]
    assert values.loc["a", "a"] == pytest.approx(0, abs=1e-6) and values.loc["a", "b"] > 0.1
    assert values["federated"].max() == pytest.approx(0, abs=1e-6)  # it holds both nodes' topics
    assert len(left_out) == 6 and set(left_out.columns) >= {"node", "model", "total", "missing_words"}


def test_vector_sources(tmp_path) -> None:
    with pytest.raises(AMWMDError, match="'realdata.word_vectors' is '.*nowhere.kv': no such file"):
        load_word_vectors(str(tmp_path / "nowhere.kv"))
    glove = load_word_vectors()
    assert glove.vectors.shape == (400_000, 50)
    assert glove.similarity("king", "queen") > glove.similarity("king", "banana")
    assert math.isfinite(amwmd([["rocket", "orbit"]], [["hockey", "puck"]], glove).mean)
