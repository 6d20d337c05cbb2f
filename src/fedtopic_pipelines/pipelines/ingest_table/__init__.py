"""``ingest_table``: a user's CSV / Parquet / JSONL table, one raw table per organisation."""

from fedtopic_pipelines.pipelines.ingest_table.pipeline import create_pipeline

__all__ = ["create_pipeline"]
