"""Run blocks of the library's own pipelines: federated Word2Vec (seed 003) and gFedNTM's
real-data experiment (Fig. 4)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Self

from pydantic import Field, model_validator

from fedtopic_pipelines.core.config.aggregation import OptimizerConfig
from fedtopic_pipelines.core.config.base import GLOVE_VECTORS, ConfigModel, PositiveInt, check_vectors
from fedtopic_pipelines.core.config.evaluate import WordVectorsEvaluateConfig
from fedtopic_pipelines.core.config.registry import check_trained_by
from fedtopic_pipelines.core.config.train import TrainConfig
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
