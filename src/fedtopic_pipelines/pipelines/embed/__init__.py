"""``embed``: each organisation embeds its own documents, when the model family reads embeddings."""

from fedtopic_pipelines.pipelines.embed.pipeline import create_pipeline

__all__ = ["create_pipeline"]
