"""Contextualized topic models (Bianchi et al., 2021) as in contextualized-topic-models 2.6.1.

Both are ProdLDA (``core/models/prodlda.py``, with its explicit generators and returned
BatchNorm statistics, so that federated training stays exact) whose encoder also reads a
sentence embedding of each document; the decoder reconstructs the bag of words as before:

* **CombinedTM**: ``adapt_bert``, a linear map from the embedding to the vocabulary's size,
  and the encoder's first layer on the concatenation [bag of words, adapted embedding].
  The concatenation is not built: the first layer's weight is split into its bag-of-words
  and embedding columns; the result is the same sum.
* **ZeroShotTM**: the first layer reads the embedding only, so topics can be inferred for
  documents whose words the vocabulary misses.

A batch is a :class:`ContextualBatch`: the bag of words (sparse CSR or dense; a training pass
densifies it once) and the embeddings of the same documents, row for row.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from fedtopic_pipelines.core.config import CombinedTMConfig, ProdLDAConfig, ZeroShotTMConfig
from fedtopic_pipelines.core.models.prodlda import ProdLDA, bag_linear


class ContextualBatch(NamedTuple):
    """Documents as a bag of words and their sentence embeddings (same rows)."""

    bow: torch.Tensor
    embeddings: torch.Tensor

    @property
    def shape(self) -> torch.Size:
        return self.bow.shape


def _as_batch(batch: ContextualBatch | torch.Tensor) -> ContextualBatch:
    if not isinstance(batch, ContextualBatch):
        raise TypeError(
            "a contextualized topic model needs each document's bag of words and sentence embedding "
            f"(a ContextualBatch), got {type(batch).__name__}"
        )
    return batch


class ContextualProdLDA(ProdLDA):
    """CombinedTM or ZeroShotTM, by the config's family (see the module docstring)."""

    def __init__(self, vocab_size: int, config: CombinedTMConfig | ZeroShotTMConfig) -> None:
        super().__init__(vocab_size, config)
        self.combined = config.encoder_reads_bow
        if self.combined:
            self.adapt_bert = nn.Linear(config.embedding_size, vocab_size)

    def _encoder_input_size(self, vocab_size: int, config: ProdLDAConfig) -> int:
        size = config.embedding_size  # type: ignore[attr-defined]
        return 2 * vocab_size if config.encoder_reads_bow else size  # type: ignore[attr-defined]

    def _encoder_input(self, batch: ContextualBatch) -> torch.Tensor:  # type: ignore[override]
        batch = _as_batch(batch)
        layer = self.hidden[0]
        if not self.combined:
            return layer(batch.embeddings)
        # first layer on [bow, adapt_bert(embedding)], as the sum of its two blocks of rows
        v = self.beta.shape[1]
        adapted = self.adapt_bert(batch.embeddings)
        return bag_linear(batch.bow, layer.weight[:v], layer.bias) + adapted @ layer.weight[v:]

    @staticmethod
    def _bow(batch: ContextualBatch) -> torch.Tensor:  # type: ignore[override]
        return _as_batch(batch).bow

    @staticmethod
    def join(batches: list[ContextualBatch]) -> ContextualBatch:  # type: ignore[override]
        """Batches as one: their bags of words stacked, their embeddings concatenated."""
        batches = [_as_batch(b) for b in batches]
        return ContextualBatch(ProdLDA.join([b.bow for b in batches]), torch.cat([b.embeddings for b in batches]))

    def _cast(self, batch: ContextualBatch) -> ContextualBatch:  # type: ignore[override]
        batch = _as_batch(batch)
        dtype = self.beta.dtype
        return ContextualBatch(batch.bow.to(dtype), batch.embeddings.to(dtype))
