"""Text processing inside each organisation (``preprocess``) and the vocabulary consensus
(``vocab_consensus``)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from fedtopic_pipelines.core.config.base import ConfigModel, CountOrShare, CountShareOrOff, NonNegativeInt, PositiveInt


class PreprocessConfig(ConfigModel):
    """Per-organisation text cleaning (runs inside each organisation)."""

    block: ClassVar[str] = "preprocess"

    tokenizer: Literal["regexp", "wordpunct", "toktok", "whitespace"] = "regexp"
    min_token_length: PositiveInt = 3
    stopwords: Literal["sklearn", "gensim", "both", "none"] = "sklearn"
    # min_df as in scikit-learn: an integer is a number of an organisation's training documents,
    # a float in (0, 1) a share of them (rounded up, at least 1), so the floor scales with the
    # organisation's size (docs/vocabulary.md). max_df is always a share.
    min_df: CountOrShare = 2
    max_df: Annotated[float, Field(gt=0.0, le=1.0)] = 0.5
    alphabetic_only: bool = True
    processes: PositiveInt | None = None
    chunk_documents: PositiveInt = 2000
    # A longer document is truncated at the last whitespace before this many characters and
    # counted in the report; null: no limit (docs/ingestion.md#long-documents).
    max_document_chars: PositiveInt | None = 1_000_000
    # Boilerplate controls (docs/vocabulary.md#boilerplate), off by default: a corpus's own
    # stopwords (added to ``stopwords``), and lines repeated across documents: a line found in
    # at least this many of the organisation's training documents (an integer; a float: this
    # share of them, rounded up, at least 2) is removed from all its documents before tokenising.
    extra_stopwords: tuple[str, ...] = ()
    repeated_lines: CountOrShare | None = None


class ConsensusConfig(ConfigModel):
    """Vocabulary consensus (seed 003 sec. 3.1.4; seed 001 sec. 3.1)."""

    block: ClassVar[str] = "vocab_consensus"

    top_n: PositiveInt = 2000
    min_count: NonNegativeInt = 5
    merge: Literal["union", "intersection"] = "union"
    # Floors on the merged terms (docs/vocabulary.md): a term must meet both. 1 and 0 turn them
    # off (the defaults here, so a job or experiment written before them is unchanged);
    # conf/base sets the values measured on the demo.
    min_organisations: PositiveInt = 1
    min_total_count: CountShareOrOff = 0  # a count, or a share of the summed proposed counts (0: off)
    # The summed-count floor is lowered (never raised) to the largest value that still keeps this
    # many terms, so that a small corpus is not cut to a few dozen generic words (0: off).
    min_terms: NonNegativeInt = 0
