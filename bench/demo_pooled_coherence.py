"""Pooled NPMI and topic diversity of the demo's trained models (the normalisation check).

Scores every model in ``<data>/06_models/trained_models`` with gensim's ``CoherenceModel``
(``c_npmi``, top 10 words) on the *pooled* training texts of all organisations
(``<data>/02_intermediate/tokens/*``, split ``train``), and topic diversity (share of
distinct words among every topic's top 25). Run it after ``kedro run`` (the demo):

    .venv/bin/python bench/demo_pooled_coherence.py --data data [--models-dir DIR]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from gensim.corpora import Dictionary
from gensim.models.coherencemodel import CoherenceModel

from fedtopic_pipelines.datasets import TrainedModelsDataset

logger = logging.getLogger("demo_pooled_coherence")


def pooled_train_texts(tokens: Path) -> list[list[str]]:
    """Every organisation's training documents, as token lists."""
    frames = [pd.read_parquet(part, columns=["split", "tokens"]) for part in sorted(tokens.glob("*/*.parquet"))]
    table = pd.concat(frames, ignore_index=True)
    return [text.split() for text in table.loc[table["split"] == "train", "tokens"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("data"))
    parser.add_argument("--models-dir", type=Path, default=None, help="default: <data>/06_models/trained_models")
    parser.add_argument("--models", nargs="*", default=["federated", "centralized"])
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    terms = pd.read_parquet(args.data / "05_model_input/vocabulary.parquet")["term"].to_numpy()
    texts = pooled_train_texts(args.data / "02_intermediate/tokens")
    dictionary = Dictionary(texts)
    models = TrainedModelsDataset(path=str(args.models_dir or args.data / "06_models/trained_models")).load()
    logger.info("| model | normalization | pooled NPMI (c_npmi, top 10) | topic diversity (top 25) |")
    logger.info("| --- | --- | --- | --- |")
    for name in args.models:
        model = models[name]
        beta = model.to_model("cpu").topic_word().double().numpy()
        order = np.argsort(-beta, axis=1)
        top10 = [list(terms[row[:10]]) for row in order]
        npmi = CoherenceModel(
            topics=top10, texts=texts, dictionary=dictionary, coherence="c_npmi", topn=10, processes=1
        ).get_coherence()
        diversity = len(np.unique(order[:, :25])) / order[:, :25].size
        logger.info("| %s | %s | %.3f | %.3f |", name, model.config.model.normalization, npmi, diversity)


if __name__ == "__main__":
    main()
