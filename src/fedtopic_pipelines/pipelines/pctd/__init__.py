"""``pctd``: PC-TD (seed 002), federated EM with differential privacy, its baselines and figures."""

from fedtopic_pipelines.pipelines.pctd.pipeline import create_pipeline

__all__ = ["create_pipeline"]
