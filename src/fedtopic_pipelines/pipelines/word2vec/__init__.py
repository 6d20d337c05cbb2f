"""``word2vec``: federated, centralized and non-collaborative skip-gram Word2Vec (seed 003)."""

from fedtopic_pipelines.pipelines.word2vec.pipeline import create_pipeline

__all__ = ["create_pipeline"]
