"""Nodes of ``embed``: each organisation embeds its own documents, when the family reads embeddings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from fedtopic_pipelines.core.capabilities import DataKind
from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.families.ctm import DocumentEmbeddings
from fedtopic_pipelines.core.shards import ShardedTable
from fedtopic_pipelines.core.site import Site
from fedtopic_pipelines.core.vocab.consensus import BowCorpus


def embed_documents(
    raw: pd.DataFrame | ShardedTable, bow: BowCorpus, params: dict[str, Any], cache: Path
) -> DocumentEmbeddings:
    """Client: the sentence embedding of each document of its bag of words (same rows), when
    ``train.model.family`` reads them (its data kind is contextual: CombinedTM, ZeroShotTM);
    otherwise nothing is computed and nothing is read.

    Computed from the raw text with ``train.embeddings.model``, cached in its own ``cache``
    folder (recomputed only when the texts or the model change) and never sent anywhere.
    """
    config = TrainConfig.from_params(params)
    if config.model.capabilities.data_kind != DataKind.CONTEXTUAL:
        return DocumentEmbeddings.none()
    return Site().embed(raw, bow.doc_ids.tolist(), config.embeddings, cache)
