"""``ingest_synthetic``: LDA-generated organisations (gFedNTM sec. 4.1.1) as raw documents."""

from fedtopic_pipelines.pipelines.ingest_synthetic.pipeline import create_pipeline

__all__ = ["create_pipeline"]
