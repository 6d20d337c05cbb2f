"""Wiring of ``ingest_synthetic``."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.ingest_synthetic.nodes import generate_organisations
from fedtopic_pipelines.pipelines.naming import ingestion_outputs


def create_pipeline(organisations: list[str]) -> Pipeline:
    return Pipeline(
        [
            Node(
                generate_organisations,
                inputs=["params:organisations", "params:ingest_synthetic"],
                outputs=ingestion_outputs(organisations, "synthetic"),
                name="generate_synthetic_organisations",
            )
        ]
    )
