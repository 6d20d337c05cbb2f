"""Nodes of ``preprocess``: they run inside one organisation."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd

from fedtopic_pipelines.core.config import PreprocessConfig, from_mapping
from fedtopic_pipelines.core.text.demo import CorpusError
from fedtopic_pipelines.core.text.tokenize import document_frequency_vocabulary, term_counts, tokenize_documents

logger = logging.getLogger(__name__)


def clean_documents(raw: pd.DataFrame, params: dict[str, Any]) -> tuple[pd.DataFrame, dict[str, int], dict[str, Any]]:
    """Tokenise an organisation's documents; return its tokens (private), term counts and a report.

    Document-frequency limits are computed on the training split only, so held-out
    documents never shape the vocabulary; term counts are training-split counts.
    Documents left without tokens are dropped and counted.
    """
    config = from_mapping(PreprocessConfig, params, "preprocess")
    org = raw["organisation"].iloc[0] if len(raw) else "?"
    docs = tokenize_documents(raw["text"].tolist(), config)
    train_docs = [d for d, split in zip(docs, raw["split"], strict=True) if split == "train"]
    if not train_docs:
        raise CorpusError(f"organisation '{org}' has no training documents to preprocess")
    keep, removed = document_frequency_vocabulary(train_docs, config.min_df, config.max_df)
    tokens = raw[["doc_id", "organisation", "label", "split"]].assign(
        tokens=[" ".join(t for t in d if t in keep) for d in docs]
    )
    empty = tokens["tokens"] == ""
    tokens = tokens.loc[~empty].reset_index(drop=True)
    if (tokens["split"] == "train").sum() == 0:
        raise CorpusError(
            f"organisation '{org}' has no training document left after preprocessing; "
            "relax 'preprocess.min_df' / 'preprocess.max_df'"
        )
    counts = dict(term_counts(d.split() for d in tokens.loc[tokens["split"] == "train", "tokens"]))
    report = {
        "documents_in": len(raw),
        "documents_out": len(tokens),
        "dropped_empty_after_cleaning": int(empty.sum()),
        "terms_removed_by_document_frequency": removed,
        "vocabulary_size": len(counts),
    }
    logger.info("preprocess %s: %d -> %d documents, %d terms", org, len(raw), len(tokens), len(counts))
    return tokens, counts, report
