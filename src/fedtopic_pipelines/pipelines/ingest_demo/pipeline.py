"""Wiring of ``ingest_demo``."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.ingest_demo.nodes import partition_demo
from fedtopic_pipelines.pipelines.naming import ingestion_outputs


def create_pipeline(organisations: list[str]) -> Pipeline:
    return Pipeline(
        [
            Node(
                partition_demo,
                inputs=["demo_corpus", "params:organisations", "params:ingest_demo"],
                outputs=ingestion_outputs(organisations, "demo"),
                name="partition_demo",
            )
        ]
    )
