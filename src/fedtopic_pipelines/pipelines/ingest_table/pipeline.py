"""Wiring of ``ingest_table``."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.ingest_table.nodes import partition_table
from fedtopic_pipelines.pipelines.naming import ingestion_outputs


def create_pipeline(organisations: list[str]) -> Pipeline:
    return Pipeline(
        [
            Node(
                partition_table,
                inputs=["document_table", "params:organisations", "params:ingest_table"],
                outputs=ingestion_outputs(organisations, "table"),
                name="partition_table",
            )
        ]
    )
