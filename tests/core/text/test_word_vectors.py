"""Word vectors load from formats that are data (GloVe, word2vec text / binary); a gensim
KeyedVectors file is a pickle, which runs code when loaded, and loads only when trusted."""

import gzip
import pickle
from pathlib import Path

import numpy as np
import pytest
from gensim.models import KeyedVectors

from fedtopic_pipelines.core.text.word_vectors import WordVectorsError, load_word_vectors

WORDS = ["rocket", "orbit", "puck"]


def _vectors() -> KeyedVectors:
    kv = KeyedVectors(2)
    kv.add_vectors(WORDS, np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]], dtype=np.float32))
    return kv


class _Planted:
    """What a hostile .kv file holds: unpickling it calls ``Path.touch`` on the marker."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_pickled_keyedvectors_file_is_refused_without_the_opt_in_and_loaded_with_it(tmp_path) -> None:
    path = tmp_path / "vectors.kv"
    _vectors().save(str(path))  # gensim's own format: a pickle
    refused = (
        r"parameter 'fednmf.evaluate.word_vectors' is '.*vectors.kv'.*pickle.*'fednmf.evaluate.trust_pickle: true'"
    )
    with pytest.raises(WordVectorsError, match=refused):
        load_word_vectors(str(path), "fednmf.evaluate.word_vectors")
    loaded = load_word_vectors(str(path), "fednmf.evaluate.word_vectors", trust_pickle=True)
    assert loaded.index_to_key == WORDS and np.allclose(loaded["puck"], [0.0, 1.0])
    with pytest.raises(WordVectorsError, match="pickle"):  # the trusted load stays cached, not handed out
        load_word_vectors(str(path), "realdata.word_vectors")


def test_a_hostile_pickle_runs_nothing_without_the_opt_in(tmp_path) -> None:
    marker, path = tmp_path / "ran", tmp_path / "hostile.model"
    path.write_bytes(pickle.dumps(_Planted(marker)))
    with pytest.raises(WordVectorsError, match=r"'realdata.word_vectors' is '.*hostile.model'.*realdata.trust_pickle"):
        load_word_vectors(str(path))
    assert not marker.exists()


@pytest.mark.parametrize("name", ["vectors.txt", "vectors.txt.gz", "vectors.bin", "vectors.bin.gz"])
def test_word2vec_text_and_binary_files_load_without_the_opt_in(tmp_path, name: str) -> None:
    path = tmp_path / name
    binary = ".bin" in name
    plain = tmp_path / ("plain.bin" if binary else "plain.txt")
    _vectors().save_word2vec_format(str(plain), binary=binary)
    path.write_bytes(gzip.compress(plain.read_bytes()) if name.endswith(".gz") else plain.read_bytes())
    loaded = load_word_vectors(str(path))
    assert loaded.index_to_key == WORDS and np.allclose(loaded["orbit"], [0.9, 0.1])
