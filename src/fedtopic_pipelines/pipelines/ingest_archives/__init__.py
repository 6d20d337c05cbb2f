"""``ingest_archives``: real text inside pinned registry archives, one or more sources per organisation."""

from fedtopic_pipelines.pipelines.ingest_archives.pipeline import create_pipeline

__all__ = ["create_pipeline"]
