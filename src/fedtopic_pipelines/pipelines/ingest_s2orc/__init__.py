"""``ingest_s2orc``: stream S2ORC / Semantic Scholar JSONL shards into per-organisation Parquet shards."""

from fedtopic_pipelines.pipelines.ingest_s2orc.pipeline import create_pipeline

__all__ = ["create_pipeline"]
