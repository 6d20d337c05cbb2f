"""Synthetic corpora: gFedNTM's LDA generator (sec. 4.1.1) and the ``ingest_synthetic`` block."""

from __future__ import annotations

from typing import Annotated, ClassVar, Self

from pydantic import Field, model_validator

from fedtopic_pipelines.core.config.base import (
    ConfigModel,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Seed,
)


class SyntheticGeneratorConfig(ConfigModel):
    """LDA generator of gFedNTM sec. 4.1.1 (defaults: the paper's; see docs/synthetic.md).

    ``alpha`` null means the paper's 50 / K (:attr:`document_prior`). ``inactive_ratio`` is
    the Dirichlet weight of the topics an organisation does not hold, relative to alpha: 0
    (paper) means they never occur in its documents; the authors' code used 1e-4 with alpha 0.1.
    """

    block: ClassVar[str] = "synthetic.generator"

    n_organisations: PositiveInt = 5
    vocab_size: PositiveInt = 5000
    n_topics: PositiveInt = 50
    n_shared: NonNegativeInt = 10
    eta: PositiveFloat = 0.01
    alpha: PositiveFloat | None = None
    inactive_ratio: NonNegativeFloat = 0.0
    doc_length: tuple[PositiveInt, PositiveInt] = (150, 250)
    n_train: Annotated[int, Field(ge=8)] = 10000
    n_validation: Annotated[int, Field(ge=2)] = 1000
    seed: Seed = 42

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        where = "synthetic.generator"
        if self.n_shared > self.n_topics:
            raise ValueError(
                f"'{where}.n_shared' (K' = {self.n_shared}) must be between 0 and "
                f"'{where}.n_topics' (K = {self.n_topics})"
            )
        if (self.n_topics - self.n_shared) % self.n_organisations:
            raise ValueError(
                f"'{where}.n_shared': K - K' = {self.n_topics - self.n_shared} private topics cannot be "
                f"split evenly over '{where}.n_organisations' = {self.n_organisations}"
            )
        if self.doc_length[0] > self.doc_length[1]:
            raise ValueError(f"'{where}.doc_length' must be [min, max] with 1 <= min <= max")
        return self

    @property
    def document_prior(self) -> float:
        """alpha, or the paper's 50 / K when it is null."""
        return 50.0 / self.n_topics if self.alpha is None else self.alpha

    @property
    def n_private(self) -> int:
        """Private topics per organisation, (K - K') / L."""
        return (self.n_topics - self.n_shared) // self.n_organisations


class IngestSyntheticConfig(ConfigModel):
    """``corpus: synthetic``: the generator that writes the organisations."""

    block: ClassVar[str] = "ingest_synthetic"

    generator: SyntheticGeneratorConfig = Field(default_factory=SyntheticGeneratorConfig)
