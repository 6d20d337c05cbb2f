"""Wiring of ``embed``."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.embed.nodes import embed_documents


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
    return sum(
        (Pipeline(template, namespace=f"clients.{org}", parameters={"train"}) for org in organisations),
        Pipeline([]),
    )
