"""Wiring of ``ingest_archives``."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.ingest_archives.nodes import read_archives
from fedtopic_pipelines.pipelines.naming import ingestion_outputs


def create_pipeline(organisations: list[str]) -> Pipeline:
    return Pipeline(
        [
            Node(
                read_archives,
                inputs=["text_archives", "params:organisations", "params:ingest_archives"],
                outputs=ingestion_outputs(organisations, "archives"),
                name="read_archives",
            )
        ]
    )
