"""Nodes of ``word2vec``: each organisation's token sequences, the scenarios' training, the benchmarks.

Inside an organisation (namespace ``clients.<org>``) its preprocessed tokens become ids of
the common vocabulary; only the counts of its report cross to the server. Training runs
every scenario through the one federation entry point (Flower for the federated scenario
with ``engine: flower``), as the ``train`` pipeline does for topic models. Evaluation
scores every model's vectors on the word benchmarks (``core/metrics/word_benchmarks.py``).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedtopic_pipelines.core.config import Word2VecRunConfig, from_mapping
from fedtopic_pipelines.core.families.word2vec import (
    Sentences,
    gensim_reference,
    sentences_from_frames,
    words_per_second,
)
from fedtopic_pipelines.core.lineage import TokensHasher, require_same, vocabulary_fingerprint
from fedtopic_pipelines.core.model_store import TrainedModel
from fedtopic_pipelines.core.shards import iter_frames
from fedtopic_pipelines.core.vocab.consensus import BowCorpus
from fedtopic_pipelines.pipelines.train.nodes import train_recorded

logger = logging.getLogger(__name__)


RECONSENSUS = (
    "The tokens were rebuilt (preprocess ran again) after vocab_consensus: run "
    "`kedro run --pipelines=vocab_consensus`, then `--pipelines=word2vec` (or `kedro run`, then word2vec)."
)


def build_sentences(tokens: Any, vocabulary: pd.DataFrame, bow: BowCorpus) -> tuple[Sentences, dict[str, Any]]:
    """The organisation's training documents as ids of the common vocabulary (inside it), and a
    report of counts (documents kept, dropped for fewer than two vocabulary tokens).

    ``bow`` is read for its lineage only: vocab_consensus wrote it with the common vocabulary,
    so it tells whether these tokens are the ones that vocabulary was agreed on (another
    preprocessing since stops here, named, instead of training on a mixed run)."""
    terms = vocabulary["term"].tolist()
    hasher = TokensHasher()
    org = "?"

    def hashed(frames: Iterable[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        """The shards, fed to the fingerprint on the way: the tokens are read once."""
        nonlocal org
        for frame in frames:
            hasher.update(frame)
            org = str(frame["organisation"].iloc[0]) if len(frame) else org
            yield frame

    sentences, report = sentences_from_frames(hashed(iter_frames(tokens)), terms, vocabulary["frequency"].tolist())
    bow_name = f"clients.{org}.bow"
    require_same("vocabulary", vocabulary_fingerprint(terms), {bow_name: bow.vocabulary}, RECONSENSUS)
    require_same(
        f"clients.{org}.tokens", hasher.hexdigest(), {bow_name: bow.tokens}, RECONSENSUS, built_from="counted from"
    )
    return sentences, report


def train_word2vec(
    params: dict[str, Any],
    organisations: list[str],
    preprocess_params: dict[str, Any],
    consensus_params: dict[str, Any],
    common_vocabulary: pd.DataFrame,
    **sentences: Sentences,
) -> tuple[dict[str, TrainedModel], dict[str, Any], dict[str, Any]]:
    """Every configured scenario of ``word2vec.train`` on the organisations' sequences (keyed by
    organisation); the federated one on Flower with ``engine: flower``. Returns the models, the
    full history (with the bytes each round's updates carried) and the series for MLflow."""
    config = from_mapping(Word2VecRunConfig, params, "word2vec").train
    data = {org: sentences[org] for org in organisations}
    models, history, mlflow = train_recorded(
        config, organisations, preprocess_params, consensus_params, common_vocabulary, data
    )
    for name, model in models.items():
        kept = [r for r in model.history if r.round % config.mlflow_every == 0 or r is model.history[-1]]
        for metric in ("bytes_sent", "bytes_dense", "bytes_ratio"):
            series = [{"value": r.metrics[metric], "step": r.round} for r in kept if metric in r.metrics]
            if series:
                mlflow[f"{name}.{metric}"] = series
        speed = words_per_second(model.history, [data[o] for o in model.organisations], config.model)
        if speed is not None:
            history[name]["words_per_second"] = speed
            mlflow[f"{name}.words_per_second"] = [{"value": speed, "step": 0}]
            logger.info("word2vec %s: %.0f words/s over %d rounds", name, speed, len(model.history))
        validated = [r for r in model.history if r.validation_loss is not None]
        if validated:
            mlflow[f"{name}.validation_loss"] = [{"value": r.validation_loss, "step": r.round} for r in validated]
        history[name]["client_bytes"] = {
            org: [r.client_bytes.get(org) for r in model.history]
            for org in dict.fromkeys(o for r in model.history for o in r.client_bytes)
        }
    return models, history, mlflow


def train_reference(
    params: dict[str, Any], organisations: list[str], common_vocabulary: pd.DataFrame, **sentences: Sentences
) -> dict[str, Any]:
    """With ``word2vec.reference: gensim``, gensim's Word2Vec on the pooled sequences (the model a
    user would otherwise train; pooled, so it sees what the centralized scenario sees), with
    the training's settings and ``max_epochs`` passes; ``{}`` with ``none``."""
    config = from_mapping(Word2VecRunConfig, params, "word2vec")
    if config.reference == "none":
        return {}
    train = config.train
    epochs = train.max_epochs or 1
    threads = train.threads or os.cpu_count() or 1
    data = [sentences[org] for org in organisations]
    kv, info = gensim_reference(data, common_vocabulary["term"].tolist(), train.model, epochs, threads, train.seed)
    logger.info(
        "word2vec reference %s: %d passes over %d tokens in %.1f s (%.0f words/s, %d threads)",
        info["library"],
        epochs,
        info["tokens"],
        info["seconds"],
        info["words_per_second"] or 0.0,
        threads,
    )
    return {"gensim": {"vectors": kv, "run": info}}


def evaluate_word_vectors(
    models: dict[str, TrainedModel],
    common_vocabulary: pd.DataFrame,
    params: dict[str, Any],
    reference: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, list[dict[str, float]]]]:
    """Each model's vectors (word2vec text format, gensim-loadable), its benchmark scores, its
    probes' nearest neighbours and its 3-D PCA plot; the flat scores again for MLflow
    (``word2vec.<model>.<benchmark>.<score>``). The reference (gensim) is scored the same way."""
    from fedtopic_pipelines.core.metrics import word_benchmarks as wb

    config = from_mapping(Word2VecRunConfig, params, "word2vec").evaluate
    terms = common_vocabulary["term"].tolist()
    require_same(
        "vocabulary",
        vocabulary_fingerprint(terms),
        {f"word2vec_models['{name}']": model.vocabulary for name, model in models.items()},
        "Run `kedro run --pipelines=word2vec` again after the vocabulary changed.",
        built_from="trained on",
    )
    benchmarks = wb.load_benchmarks(Path(config.benchmarks_wheel))
    scores: dict[str, Any] = {}
    vectors: dict[str, Any] = {}
    figures: dict[str, Any] = {}
    mlflow: dict[str, list[dict[str, float]]] = {}
    entries = {
        name: (
            word_vectors(model, terms, common_vocabulary["frequency"].tolist()),
            model.scenario,
            {"organisations": model.organisations},
        )
        for name, model in models.items()
    }
    for name, ref in (reference or {}).items():
        entries[name] = (ref["vectors"], "reference", {"organisations": [], "run": ref["run"]})
    for name, (kv, scenario, about) in entries.items():
        vectors[name] = kv
        result = wb.evaluate_vectors(
            kv,
            benchmarks,
            probes=list(config.probes),
            topn=config.neighbours,
            seed=config.seed,
            restrict_vocab=config.analogy_restrict_vocab,
        )
        scores[name] = {"scenario": scenario, **about, **result}
        figures[f"pca_{name}"], scores[name]["pca"] = wb.pca_figure(
            kv,
            list(config.probes),
            topn=config.neighbours,
            title=f"{name} ({scenario})",
            background=config.plot_words,
        )
        for key, value in result.get("metrics", {}).items():
            if isinstance(value, int | float) and math.isfinite(value):
                mlflow[f"{name}.{key}"] = [{"value": float(value), "step": 0}]
        speed = about.get("run", {}).get("words_per_second")
        if speed:  # the reference's, beside ours (train_word2vec logs each model's)
            mlflow[f"{name}.words_per_second"] = [{"value": float(speed), "step": 0}]
        logger.info("word2vec %s: %s", name, _headline(result.get("metrics", {})))
    return scores, vectors, figures, mlflow


def word_vectors(model: TrainedModel, terms: list[str], counts: list[float]):
    """The model's word vectors (rows of U) as a gensim ``KeyedVectors`` in vocabulary order (most
    frequent first), each with its consensus count (word2vec's text format keeps the order)."""
    from gensim.models import KeyedVectors

    table = model.state["input"].detach().cpu().float().numpy()
    kv = KeyedVectors(table.shape[1])
    kv.add_vectors(terms, table)
    kv.expandos["count"] = np.asarray(counts, dtype=np.int64)
    return kv


def _headline(metrics: dict[str, float]) -> str:
    keys = [k for k in metrics if k.endswith((".spearman", ".accuracy", "purity"))]
    return ", ".join(f"{k} {metrics[k]:.3f}" for k in keys[:6])
