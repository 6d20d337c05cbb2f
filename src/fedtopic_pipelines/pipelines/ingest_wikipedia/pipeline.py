"""Wiring of ``ingest_wikipedia``."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.ingest_wikipedia.nodes import ingest_dumps
from fedtopic_pipelines.pipelines.naming import ingestion_outputs


def create_pipeline(organisations: list[str]) -> Pipeline:
    """``organisations``: the names of the rules in the ``ingest_wikipedia`` block (see the registry)."""
    return Pipeline(
        [
            Node(
                ingest_dumps,
                inputs=["wikipedia_dumps", "wikipedia_work", "params:ingest_wikipedia"],
                outputs=ingestion_outputs(organisations, "wikipedia"),
                name="ingest_wikipedia_dumps",
            )
        ]
    )
