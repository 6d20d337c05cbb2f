"""The gradient family's ``train.model`` blocks: ProdLDA and the contextual CombinedTM and
ZeroShotTM built on it."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Self

from pydantic import Field, model_validator

from fedtopic_pipelines.core.capabilities import DataKind, FamilyCapabilities
from fedtopic_pipelines.core.config.base import Fraction, PositiveInt
from fedtopic_pipelines.core.config.family import FamilyConfig


class ProdLDAConfig(FamilyConfig):
    """ProdLDA hyper-parameters; defaults follow the CTM reference implementation."""

    block: ClassVar[str] = "train.model"
    capabilities: ClassVar[FamilyCapabilities] = FamilyCapabilities(
        data_kind=DataKind.BAG_OF_WORDS, pipelines=frozenset({"realdata"}), membership_audit=True
    )

    family: Literal["prodlda"] = "prodlda"
    n_topics: Annotated[int, Field(ge=2)] = 20
    hidden_sizes: Annotated[tuple[PositiveInt, ...], Field(min_length=1)] = (100, 100)
    activation: Literal["softplus", "relu"] = "softplus"
    dropout: Fraction = 0.2
    learn_priors: bool = True
    # How mu, log-sigma and the decoder logits are normalised (docs/batchnorm.md): "batch"
    # (CTM's affine-free BatchNorm: statistics of each client's batch), "pooled_batch" (the same
    # BatchNorm over the step's batch of every organisation together: synchronised, its sums
    # exchanged before each FedSGD step, so federated = centralized on the same documents),
    # "layer" (affine-free LayerNorm over each document's units: no batch coupling, so
    # federated = pooled on any batch grouping) or "none".
    normalization: Literal["batch", "pooled_batch", "layer", "none"] = "batch"
    # The decoder's own normalisation, when it should differ from ``normalization`` (None: the
    # same). Besides batch / layer / none: "centred" subtracts each word's mean over the topics
    # from beta's column (a word's background no longer lives in beta, as under BatchNorm, but
    # nothing depends on the batch); "standardised" also divides the column by its standard
    # deviation over the topics; "+layer" then also normalises each document's logits as "layer"
    # does (docs/batchnorm.md, section 7).
    decoder_normalization: (
        Literal[
            "batch", "pooled_batch", "layer", "none", "centred", "standardised", "centred+layer", "standardised+layer"
        ]
        | None
    ) = None
    # A learned per-word offset added to the decoder's normalised logits (a background
    # log-frequency, as in Card et al.'s Scholar): frequent words no longer need a large
    # weight in every topic's row of beta. Without BatchNorm's per-word standardisation
    # they otherwise fill every topic's top words (docs/batchnorm.md, section 6).
    word_bias: bool = False

    @property
    def decoder(self) -> str:
        """The decoder's normalisation (``decoder_normalization``, else ``normalization``)."""
        return self.decoder_normalization or self.normalization

    def batch_coupled(self) -> bool:
        return bool({"batch", "pooled_batch"} & {self.normalization, self.decoder})

    def pooled(self) -> bool:
        """Whether a BatchNorm layer pools its statistics over the organisations (exchanges per step)."""
        return "pooled_batch" in (self.normalization, self.decoder)

    def batch_setting(self) -> str:
        batch = ("batch", "pooled_batch")
        which = "normalization" if self.normalization in batch else "decoder_normalization"
        return f"'train.model.{which}: {getattr(self, which)}'"

    @model_validator(mode="after")
    def _one_batch_kind(self) -> Self:
        kinds = {self.normalization, self.decoder}
        if {"batch", "pooled_batch"} <= kinds:
            raise ValueError(
                "'train.model.normalization' and 'train.model.decoder_normalization' mix 'batch' (each organisation's "
                "statistics) with 'pooled_batch' (every organisation's); choose one of them for both"
            )
        return self


class CombinedTMConfig(ProdLDAConfig):
    """CombinedTM (Bianchi et al., 2021): ProdLDA whose encoder reads the bag of words
    concatenated with the document's sentence embedding mapped to the vocabulary's size by a
    learned linear layer (contextualized-topic-models' ``adapt_bert``). Defaults as CTM 2.6.1.

    ``embedding_size`` is the sentence encoder's output size (384 for all-MiniLM-L6-v2); every
    organisation's embeddings must have it (checked per organisation before the first round).
    """

    capabilities: ClassVar[FamilyCapabilities] = FamilyCapabilities(
        data_kind=DataKind.CONTEXTUAL, pipelines=frozenset({"realdata"})
    )
    encoder_reads_bow: ClassVar[bool] = True  # the encoder's input: bag of words and mapped embedding

    family: Literal["combinedtm"] = "combinedtm"  # type: ignore[assignment]
    embedding_size: PositiveInt = 384


class ZeroShotTMConfig(ProdLDAConfig):
    """ZeroShotTM (Bianchi et al., 2021): the encoder reads the sentence embedding only; the
    decoder still reconstructs the bag of words. Defaults as CTM 2.6.1."""

    capabilities: ClassVar[FamilyCapabilities] = FamilyCapabilities(
        data_kind=DataKind.CONTEXTUAL, pipelines=frozenset({"realdata"})
    )
    encoder_reads_bow: ClassVar[bool] = False  # the encoder reads the embedding alone

    family: Literal["zeroshottm"] = "zeroshottm"  # type: ignore[assignment]
    embedding_size: PositiveInt = 384

    @model_validator(mode="after")
    def _batch_norm(self) -> Self:
        # Measured on the demo (docs/ctm.md): with only the embedding at the encoder's input,
        # LayerNorm or no normalisation let every document collapse onto the same topic
        # proportions (their std over documents 0.0002 and 0.0001, macro-F1 0.03 and 0.01);
        # BatchNorm, CTM's, standardises mu over the batch's documents and does not.
        if self.normalization not in ("batch", "pooled_batch"):
            raise ValueError(
                "ZeroShotTM needs 'train.model.normalization: pooled_batch' (or 'batch', CTM's, whose per-organisation "
                f"statistics collapse it federated), not {self.normalization!r}: without "
                "BatchNorm its documents collapse onto the same topic proportions (docs/ctm.md)"
            )
        return self
