"""``train``: federated, centralized and non-collaborative models of the configured family on the same data."""

from fedtopic_pipelines.pipelines.train.pipeline import create_pipeline

__all__ = ["create_pipeline"]
