"""Wiring of ``vocab_consensus``."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.naming import shared
from fedtopic_pipelines.pipelines.vocab_consensus.nodes import merge_vocabulary, vectorize_documents


def create_pipeline(organisations: list[str]) -> Pipeline:
    server = Pipeline(
        [
            Node(
                merge_vocabulary,
                inputs={"params": "params:vocab_consensus", **{o: shared("term_counts", o) for o in organisations}},
                outputs="common_vocabulary",
                name="merge_vocabulary",
            )
        ]
    )
    client = Pipeline(
        [
            Node(
                vectorize_documents,
                inputs=["tokens", "vocabulary"],
                outputs=["bow", "vectorize_report"],
                name="vectorize_documents",
            )
        ]
    )
    clients = [
        Pipeline(
            client,
            namespace=f"clients.{org}",
            inputs={"vocabulary": "common_vocabulary"},
            outputs={"vectorize_report": shared("vectorize_report", org)},
        )
        for org in organisations
    ]
    return sum(clients, server)
