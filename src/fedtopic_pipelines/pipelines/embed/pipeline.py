"""Wiring of ``embed``."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.embed.nodes import embed_documents
from fedtopic_pipelines.pipelines.naming import inside_each


def create_pipeline(organisations: list[str]) -> Pipeline:
    """One node per organisation, inside its namespace: nothing crosses to the server."""
    template = Pipeline(
        [
            Node(
                embed_documents,
                inputs=["raw_documents", "bow", "params:train", "embedding_cache"],
                outputs="embeddings",
                name="embed_documents",
            )
        ]
    )
    return inside_each(organisations, template, parameters={"train"})
