"""``ingest_wikipedia``: stream pages-articles bz2 dumps into per-organisation Parquet shards."""

from fedtopic_pipelines.pipelines.ingest_wikipedia.pipeline import create_pipeline

__all__ = ["create_pipeline"]
