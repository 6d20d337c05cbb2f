"""Run blocks of the library's own pipelines: federated Word2Vec (seed 003), gFedNTM's
real-data experiment (Fig. 4) and the comparison of families (``compare``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import Field, model_validator

from fedtopic_pipelines.core.config.aggregation import OptimizerConfig
from fedtopic_pipelines.core.config.base import (
    GLOVE_VECTORS,
    ConfigError,
    ConfigModel,
    PositiveInt,
    check_vectors,
    from_mapping,
)
from fedtopic_pipelines.core.config.evaluate import WordVectorsEvaluateConfig
from fedtopic_pipelines.core.config.registry import MODEL_CONFIGS, check_trained_by
from fedtopic_pipelines.core.config.train import SCENARIOS, Scenario, TrainConfig
from fedtopic_pipelines.core.config.word2vec import Word2VecConfig


class Word2VecRunConfig(ConfigModel):
    """The ``word2vec`` block: the training of every scenario (a ``train`` block whose model is
    ``family: word2vec``; ``batch_size`` counts skip-gram pairs) and the evaluation."""

    block: ClassVar[str] = "word2vec"

    # the thesis's sec. 4.1 (conf/base chooses settings that learn in a few passes: docs/word2vec.md)
    train: TrainConfig = Field(
        default_factory=lambda: TrainConfig(
            model=Word2VecConfig(), batch_size=2048, optimizer=OptimizerConfig(name="sgd", lr=0.1)
        )
    )
    evaluate: WordVectorsEvaluateConfig = Field(default_factory=WordVectorsEvaluateConfig)
    # gensim Word2Vec(sg=1) on the pooled sequences with the same settings, scored beside the scenarios
    reference: Literal["gensim", "none"] = "gensim"

    @model_validator(mode="after")
    def _word_family(self) -> Self:
        check_trained_by("word2vec", self.train.model)
        return self


# gFedNTM's real-data experiment (Fig. 4) ----------------------------------------------
class RealDataConfig(ConfigModel):
    """The ``realdata`` block: each organisation's own model at ``node_topics`` topics, a
    federated model at each of ``federated_topics``, all of the ``train`` block's family and
    settings otherwise; AMWMD over ``top_words`` words per topic with ``word_vectors``
    (``glove-6b-50d``, or a word2vec text / binary file; a gensim KeyedVectors file is a pickle,
    which can run code, and loads only with ``trust_pickle: true``)."""

    block: ClassVar[str] = "realdata"

    node_topics: Annotated[int, Field(ge=2)] = 10
    federated_topics: Annotated[tuple[Annotated[int, Field(ge=2)], ...], Field(min_length=1)] = (10, 25)
    word_vectors: Annotated[str, Field(min_length=1)] = GLOVE_VECTORS
    trust_pickle: bool = False
    top_words: PositiveInt = 10

    @model_validator(mode="after")
    def _safe_vectors(self) -> Self:
        check_vectors(self.word_vectors, self.trust_pickle, "realdata.word_vectors")
        return self


# Which family for my corpus: every family on one vocabulary, scored by one evaluator -------
class CompareConfig(ConfigModel):
    """The ``compare`` block: the families trained side by side, each in every one of
    ``scenarios``, on the chain's common vocabulary and splits, and how their topics are
    scored beyond the ``evaluate`` block (WE coherence over ``top_words`` words per topic with
    ``word_vectors``).

    ``families`` maps each family to what its training changes from the ``train`` block. Its
    block is the ``train`` block with each top-level key the entry gives replaced whole
    (``optimizer``, ``aggregation``, ``max_steps``...); ``model`` keeps the ``train.model`` keys
    the family's own config has (``n_topics`` always, ProdLDA's layers for CombinedTM) under the
    entry's ``model`` keys. Every family trains in process, with ``scenarios`` and under the
    top-level ``privacy`` block, as the default chain does."""

    block: ClassVar[str] = "compare"

    families: Annotated[dict[str, dict[str, Any]], Field(min_length=1)] = Field(default_factory=lambda: {"prodlda": {}})
    scenarios: Annotated[tuple[Scenario, ...], Field(min_length=1)] = SCENARIOS
    word_vectors: Annotated[str, Field(min_length=1)] = GLOVE_VECTORS
    trust_pickle: bool = False
    top_words: PositiveInt = 10

    @model_validator(mode="after")
    def _known(self) -> Self:
        check_vectors(self.word_vectors, self.trust_pickle, "compare.word_vectors")
        if len(set(self.scenarios)) != len(self.scenarios):
            raise ValueError(f"'compare.scenarios' repeats a scenario: {list(self.scenarios)}")
        return self

    def train_params(self, train: Mapping[str, Any] | None, family: str) -> dict[str, Any]:
        """``family``'s training block: ``train`` with the family's entry over it (see the class)."""
        if family not in MODEL_CONFIGS:
            raise ConfigError(
                f"parameter 'compare.families' names {family!r}; registered families: {sorted(MODEL_CONFIGS)}"
            )
        entry = dict(self.families[family] or {})
        own = MODEL_CONFIGS[family].model_fields
        model = {k: v for k, v in dict((train or {}).get("model") or {}).items() if k in own and k != "family"}
        model.update(dict(entry.pop("model", None) or {}))
        return {
            **dict(train or {}),
            **entry,
            "model": {**model, "family": family},
            "scenarios": list(self.scenarios),
            "engine": "in_process",
        }

    def train_configs(self, train: Mapping[str, Any] | None) -> dict[str, TrainConfig]:
        """Every family's :class:`TrainConfig`; an error names ``compare.families.<family>``. A
        family that only another pipeline trains (Word2Vec, PC-TD) is refused with that pipeline."""
        configs = {}
        for family in self.families:
            config = from_mapping(TrainConfig, self.train_params(train, family), f"compare.families.{family}")
            elsewhere = config.model.capabilities.trained_elsewhere()
            if elsewhere:
                raise ConfigError(f"parameter 'compare.families' names {family!r}, which scores otherwise: {elsewhere}")
            configs[family] = config
        return configs
