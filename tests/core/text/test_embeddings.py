"""Sentence embeddings inside an organisation: the model check, length-sorted encoding, the cache."""

import logging
import shutil

import numpy as np
import pytest

from fedtopic_pipelines.core.text import embeddings as emb
from fedtopic_pipelines.core.text.embeddings import EmbeddingCache, EmbeddingError, embed_texts, resolve_model_path
from tests.conftest import TINY_EMBEDDING_SIZE

TEXTS = ["orbit rocket launch nasa", "", "hockey", "windows file disk drive software memory", "zzz unknown"]


def test_length_sorted_encoding_returns_rows_in_input_order(tiny_sentence_model) -> None:
    together = embed_texts(TEXTS, str(tiny_sentence_model), batch_size=2, progress=False)
    one_by_one = np.stack([embed_texts([t], str(tiny_sentence_model), progress=False)[0] for t in TEXTS])
    assert together.shape == (len(TEXTS), TINY_EMBEDDING_SIZE) and together.dtype == np.float32
    np.testing.assert_allclose(together, one_by_one, atol=1e-6)
    assert np.abs(together[0]).sum() > 0 and not np.allclose(together[0], together[3])
    # an empty text (or one with no known word) gets the encoder's own answer: here zeros
    assert np.all(together[1] == 0) and np.all(together[4] == 0)


def test_a_bad_model_parameter_is_named_before_any_encoding(tmp_path) -> None:
    with pytest.raises(EmbeddingError, match="'train.embeddings.model' is '.*nowhere': no such folder"):
        resolve_model_path(str(tmp_path / "nowhere"))
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(EmbeddingError, match="not a sentence-transformers model.*weights.bin"):
        resolve_model_path(str(tmp_path))
    assert (resolve_model_path("all-minilm-l6-v2") / "modules.json").is_file()  # the offline default


def test_the_cache_is_reused_only_for_the_same_model_and_texts(tiny_sentence_model, tmp_path, monkeypatch, caplog):
    calls = []
    real = emb.embed_texts
    monkeypatch.setattr(emb, "embed_texts", lambda texts, *a, **k: calls.append(len(texts)) or real(texts, *a, **k))
    cache = EmbeddingCache(tmp_path / "cache")
    first = cache.load_or_compute(TEXTS, str(tiny_sentence_model), progress=False)
    again = cache.load_or_compute(TEXTS, str(tiny_sentence_model), progress=False)
    assert calls == [5] and np.array_equal(first, again)  # the second call never ran the model
    assert "orbit" not in (tmp_path / "cache" / "embeddings.json").read_text()  # no text in the cache
    with caplog.at_level(logging.WARNING):
        cache.load_or_compute(TEXTS[:4], str(tiny_sentence_model), progress=False)  # other texts
        other = shutil.copytree(tiny_sentence_model, tmp_path / "other-model")
        (other / "README.md").write_text("another model")
        cache.load_or_compute(TEXTS[:4], str(other), progress=False)  # another model
    assert calls == [5, 4, 4]
    assert caplog.text.count("another model or other texts") == 2
