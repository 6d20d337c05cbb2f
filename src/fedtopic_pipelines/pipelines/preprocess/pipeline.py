"""Wiring of ``preprocess``: the template instantiated once per organisation."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.naming import shared
from fedtopic_pipelines.pipelines.preprocess.nodes import clean_documents


def template() -> Pipeline:
    return Pipeline(
        [
            Node(
                clean_documents,
                inputs=["raw_documents", "params:preprocess"],
                outputs=["tokens", "term_counts", "preprocess_report"],
                name="clean_documents",
            )
        ]
    )


def create_pipeline(organisations: list[str]) -> Pipeline:
    """Tokens and full term counts stay in ``clients.<org>``; only the report crosses."""
    return sum(
        (
            Pipeline(
                template(),
                namespace=f"clients.{org}",
                parameters={"preprocess"},
                outputs={"preprocess_report": shared("preprocess_report", org)},
            )
            for org in organisations
        ),
        Pipeline([]),
    )
