"""How trained models are scored: topic models (``evaluate``) and word vectors (``word2vec.evaluate``)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Self

from pydantic import Field, model_validator

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

    ``top_words`` words of every topic are the coherence candidates each organisation counts,
    and the lists redundancy is judged on: two topics sharing ``duplicate_shared_words`` or more
    of them are a duplicate pair; ``rbo_weight`` is inverted RBO's persistence (OCTIS's 0.9).
    ``threads``: torch's threads while an organisation infers its held-out documents (null:
    torch's default); 1, as ``train.threads``, is the fastest on a shared host
    (docs/performance.md, "Thread policy on a busy host").
    """

    block: ClassVar[str] = "evaluate"

    top_words: Annotated[int, Field(ge=2)] = 10
    diversity_top_words: PositiveInt = 25
    duplicate_shared_words: PositiveInt = 5
    rbo_weight: OpenFraction = 0.9
    # Exact coherence on the virtual pooled corpus (summed per-organisation counts; docs/evaluation.md).
    coherence_measures: Annotated[tuple[Literal["c_npmi", "c_v", "u_mass", "c_uci"], ...], Field(min_length=1)] = (
        "c_npmi",
        "c_v",
        "u_mass",
    )
    svm_test_size: OpenFraction = 0.2
    svm_c: PositiveFloat = 1.0
    seed: Seed = 42
    threads: PositiveInt | None = 1

    @model_validator(mode="after")
    def _duplicates_within_top_words(self) -> Self:
        if self.duplicate_shared_words > self.top_words:
            raise ValueError(
                f"'duplicate_shared_words' = {self.duplicate_shared_words} is more than 'top_words' = "
                f"{self.top_words}: no pair of topics could share that many; set it to at most {self.top_words}"
            )
        return self
