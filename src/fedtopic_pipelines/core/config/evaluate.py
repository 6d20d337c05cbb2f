"""How trained models are scored: topic models (``evaluate``) and word vectors (``word2vec.evaluate``)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from fedtopic_pipelines.core.config.base import ConfigModel, Name, OpenFraction, PositiveFloat, PositiveInt, Seed


class WordVectorsEvaluateConfig(ConfigModel):
    """How the ``word2vec`` pipeline scores each model's vectors (docs/word2vec.md).

    ``benchmarks_wheel``: the ``hyperhyper==0.3.0`` wheel that ``make install`` downloads
    (MEN, Rare Words, MTurk-287, MSR; read from the archive, never installed). ``probes``:
    words whose nearest ``neighbours`` are reported and highlighted in the PCA plot (sec.
    3.5) of at most ``plot_words`` of the most frequent words. ``analogy_restrict_vocab``:
    answers are searched among that many most frequent words (null: all).
    """

    block: ClassVar[str] = "word2vec.evaluate"

    benchmarks_wheel: Name = ".cache/benchmarks/hyperhyper-0.3.0-py3-none-any.whl"
    probes: tuple[Name, ...] = ("account", "market", "money", "bacteria", "mountain", "player", "island", "computer")
    neighbours: PositiveInt = 10
    plot_words: PositiveInt = 2000
    analogy_restrict_vocab: PositiveInt | None = None
    seed: Seed = 42


class EvaluateConfig(ConfigModel):
    """Evaluation settings (coherence, diversity, classification).

    ``top_words`` words of every topic are the coherence candidates each organisation counts.
    """

    block: ClassVar[str] = "evaluate"

    top_words: Annotated[int, Field(ge=2)] = 10
    diversity_top_words: PositiveInt = 25
    # Exact coherence on the virtual pooled corpus (summed per-organisation counts; docs/evaluation.md).
    coherence_measures: Annotated[tuple[Literal["c_npmi", "c_v", "u_mass", "c_uci"], ...], Field(min_length=1)] = (
        "c_npmi",
        "c_v",
        "u_mass",
    )
    svm_test_size: OpenFraction = 0.2
    svm_c: PositiveFloat = 1.0
    seed: Seed = 42
