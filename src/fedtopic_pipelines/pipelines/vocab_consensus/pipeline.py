"""Wiring of ``vocab_consensus``."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.naming import shared
from fedtopic_pipelines.pipelines.vocab_consensus.nodes import merge_vocabulary, propose_vocabulary, vectorize_documents


def create_pipeline(organisations: list[str]) -> Pipeline:
    """Only ``vocabulary_proposal__<org>`` (top-N terms and counts) crosses to the server; the server's
    ``consensus_report`` says what the floors removed."""
    server = Pipeline(
        [
            Node(
                merge_vocabulary,
                inputs={
                    "params": "params:vocab_consensus",
                    **{o: shared("vocabulary_proposal", o) for o in organisations},
                },
                outputs=["common_vocabulary", "consensus_report"],
                name="merge_vocabulary",
            )
        ]
    )
    client = Pipeline(
        [
            Node(
                propose_vocabulary,
                inputs=["term_counts", "params:vocab_consensus"],
                outputs="vocabulary_proposal",
                name="propose_vocabulary",
            ),
            Node(
                vectorize_documents,
                inputs=["tokens", "vocabulary", "vocabulary_proposal"],
                outputs=["bow", "vectorize_report"],
                name="vectorize_documents",
            ),
        ]
    )
    clients = [
        Pipeline(
            client,
            namespace=f"clients.{org}",
            parameters={"vocab_consensus"},
            inputs={"vocabulary": "common_vocabulary"},
            outputs={
                "vocabulary_proposal": shared("vocabulary_proposal", org),
                "vectorize_report": shared("vectorize_report", org),
            },
        )
        for org in organisations
    ]
    return sum(clients, server)
