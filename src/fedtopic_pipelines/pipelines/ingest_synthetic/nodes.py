"""Nodes of ``ingest_synthetic``."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd

from fedtopic_pipelines.core.config import ConfigError, IngestSyntheticConfig, from_mapping
from fedtopic_pipelines.core.ingest.common import IngestReport
from fedtopic_pipelines.core.synthetic import generate, organisation_names
from fedtopic_pipelines.pipelines.naming import ingestion_result

logger = logging.getLogger(__name__)


def documents_as_text(counts, vocabulary: list[str]) -> list[str]:
    """Each row of a term-count matrix as the text that repeats each term its count (order is irrelevant)."""
    terms = np.asarray(vocabulary)
    rows = counts.tocsr()
    return [
        " ".join(np.repeat(terms[rows.indices[a:b]], rows.data[a:b].astype(int)))
        for a, b in zip(rows.indptr[:-1], rows.indptr[1:], strict=True)
    ]


def generate_organisations(organisations: list[str], params: dict[str, Any]) -> dict[str, Any]:
    """The generator's organisations as raw tables: training documents ``train``, validation ``test``.

    Lets the real-corpus chain (preprocess, consensus, train, evaluate) run on data whose
    topics are known; ``kedro run --pipelines=synthetic`` is the paper's experiment itself.
    """
    config = from_mapping(IngestSyntheticConfig, params, "ingest_synthetic").generator
    expected = organisation_names(config.n_organisations)
    if list(organisations) != expected:
        raise ConfigError(
            f"parameter 'organisations' must be {expected} for corpus 'synthetic' "
            f"(ingest_synthetic.generator.n_organisations = {config.n_organisations}); got {organisations}"
        )
    corpus = generate(config)
    tables: dict[str, pd.DataFrame] = {}
    for org in organisations:
        generated = corpus.organisations[org]
        parts = []
        for split, matrix in (("train", generated.train), ("test", generated.validation)):
            texts = documents_as_text(matrix, corpus.vocabulary)
            parts.append(
                pd.DataFrame(
                    {
                        "doc_id": [f"{org}:{split}:{i}" for i in range(len(texts))],
                        "organisation": org,
                        "text": texts,
                        "label": "",
                        "split": split,
                    }
                )
            )
        tables[org] = pd.concat(parts, ignore_index=True)
    report = IngestReport("synthetic", sources=[f"LDA generator (seed {config.seed})"])
    for org, table in tables.items():
        for split, n in table["split"].value_counts().items():
            report.keep(org, str(split), int(n))
        report.documents_read += len(table)
    done = report.to_dict(organisations)
    logger.info("synthetic corpus: %s", done["kept"])
    return ingestion_result(tables, done)
