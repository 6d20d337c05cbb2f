"""CombinedTM and ZeroShotTM as federated families: FedSGD exactly as ProdLDA (gFedNTM).

An organisation's data is its bag of words *and* its documents' sentence embeddings
(:class:`ContextualData`), computed inside the organisation; only gradients of the shared
parameters leave it, as for ProdLDA. Everything else (local step, replay, strategy, batch
statistics, exactness of federated = centralized on the concatenated batches) is
ProdLDA's family, whose batch sources carry the embeddings row for row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from fedtopic_pipelines.core.config import CombinedTMConfig, TrainConfig, ZeroShotTMConfig
from fedtopic_pipelines.core.families.prodlda import VALIDATION_CHUNK, ProdLDAFamily
from fedtopic_pipelines.core.federated.batching import BatchSource, GhostBatchSource
from fedtopic_pipelines.core.lineage import LineageError, digest
from fedtopic_pipelines.core.models.ctm import ContextualBatch, ContextualProdLDA


@dataclass(frozen=True)
class ContextualData:
    """An organisation's documents: bag of words (rows) and sentence embeddings (same rows)."""

    bow: sp.csr_matrix
    embeddings: np.ndarray

    def __post_init__(self) -> None:
        if self.embeddings.ndim != 2 or self.embeddings.shape[0] != self.bow.shape[0]:
            raise ValueError(
                f"{self.bow.shape[0]} documents but embeddings of shape {self.embeddings.shape}: "
                "one embedding per document is needed"
            )

    @property
    def shape(self) -> tuple[int, int]:
        """The bag of words' shape (documents x vocabulary), as a matrix's."""
        return self.bow.shape

    @property
    def embedding_size(self) -> int:
        return int(self.embeddings.shape[1])


class ContextualFamily(ProdLDAFamily):
    """``train.model.family: combinedtm`` or ``zeroshottm`` (see the module docstring)."""

    def __init__(self, name: str, config_type: type[CombinedTMConfig] | type[ZeroShotTMConfig]) -> None:
        self.name = name
        self.config_type = config_type

    def create_model(self, vocab_size: int, config: TrainConfig, device: torch.device) -> ContextualProdLDA:
        return ContextualProdLDA.create(vocab_size, config.model, config.seed).to(device)

    def stream(
        self, data: ContextualData, config: TrainConfig, seed: int, device: torch.device, ghosts: int | None = None
    ) -> BatchSource | GhostBatchSource:
        data = _contextual(data)
        if ghosts is None:
            return BatchSource(data.bow, config.batch_size, seed, device, data.embeddings)
        return GhostBatchSource(data.bow, config.batch_size, ghosts, seed, device, data.embeddings)

    def validation_loss(self, model: ContextualProdLDA, data: ContextualData, seed: int) -> tuple[float, int]:
        """As ProdLDA's (eval mode, one seeded sample), with each document's embedding."""
        data = _contextual(data)
        bow = data.bow.tocsr().astype(np.float32)
        device = next(model.parameters()).device
        generator = torch.Generator(device=device).manual_seed(seed)
        total, n = 0.0, bow.shape[0]
        for start in range(0, n, VALIDATION_CHUNK):
            chunk = slice(start, start + VALIDATION_CHUNK)
            batch = ContextualBatch(
                torch.from_numpy(bow[chunk].toarray()).to(device),
                torch.from_numpy(np.asarray(data.embeddings[chunk], dtype=np.float32)).to(device),
            )
            total += float(model.validation_loss(batch, generator).sum())
        return total / n, n

    def rows(self, data: ContextualData) -> int:
        return int(_contextual(data).bow.shape[0])

    def select(self, data: ContextualData, rows: Sequence[int]) -> ContextualData:
        data, index = _contextual(data), np.asarray(rows)
        return ContextualData(data.bow[index], data.embeddings[index])

    def concatenate(self, parts: Sequence[ContextualData]) -> ContextualData:
        parts = [_contextual(p) for p in parts]
        return ContextualData(sp.vstack([p.bow for p in parts]).tocsr(), np.concatenate([p.embeddings for p in parts]))

    def validate_data(self, name: str, data: ContextualData, config: TrainConfig | None = None) -> None:
        """Two documents at least (BatchNorm), and embeddings of the size the model reads: a
        mismatch names the organisation before any round."""
        if not isinstance(data, ContextualData):
            raise ValueError(
                f"organisation '{name}' has no sentence embeddings: 'train.model.family' {self.name!r} "
                "needs each document's embedding beside its bag of words"
            )
        super().validate_data(name, data.bow, config)
        if config is not None and data.embedding_size != config.model.embedding_size:  # type: ignore[union-attr]
            raise ValueError(
                f"organisation '{name}' has sentence embeddings of size {data.embedding_size}, but "
                f"'train.model.embedding_size' is {config.model.embedding_size}: every organisation "  # type: ignore[union-attr]
                "must embed its documents with the same sentence encoder"
            )


@dataclass(frozen=True)
class DocumentEmbeddings:
    """An organisation's sentence embeddings, one row per document of its bag of words, in
    the same order (``documents``: the fingerprint of those document ids), and the
    fingerprint of the model that computed them. Empty (0 x 0, ``documents`` None) when the
    configured family reads no embeddings: nothing was computed."""

    values: np.ndarray
    documents: str | None
    model: str | None

    @classmethod
    def none(cls) -> DocumentEmbeddings:
        return cls(np.zeros((0, 0), dtype=np.float32), None, None)

    @property
    def computed(self) -> bool:
        return self.documents is not None


def documents_fingerprint(doc_ids: Sequence[str] | np.ndarray) -> str:
    """Fingerprint of an ordered list of document ids (embeddings rows = bag-of-words rows)."""
    return digest(["documents", [str(d) for d in doc_ids]])


def contextual_split(bow, embeddings: DocumentEmbeddings, split: str, where: str) -> ContextualData:
    """One split of an organisation's bag of words (a ``BowCorpus``) with its embeddings' rows.

    ``where`` names the embeddings artefact in errors: embeddings computed for other
    documents (another run's bag of words) stop here instead of being misaligned."""
    if not embeddings.computed:
        raise LineageError(
            f"{where} holds no sentence embeddings (they are computed only when 'train.model.family' "
            "is a contextual family): run `kedro run --pipelines=vocab_consensus` with that family"
        )
    expected = documents_fingerprint(bow.doc_ids)
    if embeddings.documents != expected or embeddings.values.shape[0] != len(bow):
        raise LineageError(
            f"{where} were computed for other documents ({embeddings.values.shape[0]} rows, documents "
            f"{embeddings.documents}) than the bag of words ({len(bow)} rows, documents {expected}): they come "
            "from different runs; run `kedro run --pipelines=vocab_consensus` again"
        )
    mask = bow.split == split
    return ContextualData(bow.matrix[mask].tocsr(), np.asarray(embeddings.values[mask], dtype=np.float32))


def _contextual(data: ContextualData) -> ContextualData:
    if not isinstance(data, ContextualData):
        raise TypeError(f"a contextualized topic model trains on ContextualData, got {type(data).__name__}")
    return data
