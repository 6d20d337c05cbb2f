"""``compare``: which federated model for this corpus. Every topic family, federated, centralized
and per organisation, on the chain's common vocabulary and splits, scored by one evaluator."""

from fedtopic_pipelines.pipelines.compare.pipeline import create_pipeline

__all__ = ["create_pipeline"]
