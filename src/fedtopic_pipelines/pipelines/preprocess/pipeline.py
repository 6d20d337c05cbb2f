"""Wiring of ``preprocess``: a check of every organisation's size, then the template per organisation."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.naming import inside_each, sent_by_each
from fedtopic_pipelines.pipelines.preprocess.nodes import (
    PREFIX,
    check_document_counts,
    clean_documents,
    count_documents,
)

CHECK = "organisation_check"


def template() -> Pipeline:
    return Pipeline(
        [
            Node(count_documents, inputs="raw_documents", outputs="document_counts", name="count_documents"),
            Node(
                clean_documents,
                inputs=["raw_documents", "params:preprocess", CHECK],
                outputs=["tokens", "term_counts", "preprocess_report"],
                name="clean_documents",
            ),
        ]
    )


def create_pipeline(organisations: list[str]) -> Pipeline:
    """Tokens and full term counts stay in ``clients.<org>``; only the document counts (for the
    check that runs before any cleaning) and the report cross."""
    check = Pipeline(
        [
            Node(
                check_document_counts,
                inputs={
                    "preprocess": "params:preprocess",
                    "train": "params:train",
                    "evaluate": "params:evaluate",
                    **sent_by_each(organisations, "document_counts", PREFIX),
                },
                outputs=CHECK,
                name="check_document_counts",
            )
        ]
    )
    sites = inside_each(
        organisations,
        template(),
        inputs={CHECK},
        parameters={"preprocess"},
        sends=["document_counts", "preprocess_report"],
    )
    return check + sites
