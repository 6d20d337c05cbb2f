"""Wiring of ``ingest_s2orc``."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.ingest_s2orc.nodes import ingest_records
from fedtopic_pipelines.pipelines.naming import ingestion_outputs


def create_pipeline(organisations: list[str]) -> Pipeline:
    """``organisations``: the names of the rules in the ``ingest_s2orc`` block (see the registry)."""
    return Pipeline(
        [
            Node(
                ingest_records,
                inputs=[
                    "s2orc_records",
                    "s2orc_pdf_parses",
                    "s2orc_work",
                    "params:ingest_s2orc",
                ],
                outputs=ingestion_outputs(organisations, "s2orc"),
                name="ingest_s2orc_records",
            )
        ]
    )
