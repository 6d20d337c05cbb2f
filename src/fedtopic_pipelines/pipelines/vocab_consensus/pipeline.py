"""Wiring of ``vocab_consensus``."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.naming import inside_each, private_of_each, sent_by_each
from fedtopic_pipelines.pipelines.reports import metric_series
from fedtopic_pipelines.pipelines.vocab_consensus.nodes import (
    merge_vocabulary,
    propose_vocabulary,
    request_vocabulary,
    reveal_vocabulary,
    score_vocabulary_attack,
    vectorize_documents,
)

PARAMS = {"consensus": "params:vocab_consensus", "privacy": "params:privacy"}


def create_pipeline(organisations: list[str]) -> Pipeline:
    """Only ``vocabulary_proposal__<org>`` (top-N terms, or keyed digests, and counts) and, keyed,
    ``vocabulary_reveal__<org>`` (the terms of the digests the server kept) cross to the server;
    the server sends back ``vocabulary_request`` (those digests) and the vocabulary. The server's
    ``consensus_report`` says what the floors and ``privacy.vocab_k`` removed, with attack (d)'s
    score on its view, added by an audit node that reads every organisation's counts (the truth)."""
    proposals = {name: name for name in sent_by_each(organisations, "vocabulary_proposal").values()}
    reveals = {name: name for name in sent_by_each(organisations, "vocabulary_reveal").values()}
    server = Pipeline(
        [
            Node(
                request_vocabulary,
                inputs={**PARAMS, **proposals},
                outputs="vocabulary_request",
                name="request_vocabulary",
            ),
            Node(
                merge_vocabulary,
                inputs={**PARAMS, **proposals, **reveals},
                outputs=["common_vocabulary", "consensus_server_report", "vocabulary_server_view"],
                name="merge_vocabulary",
            ),
            Node(
                score_vocabulary_attack,
                inputs={
                    "report": "consensus_server_report",
                    "view": "vocabulary_server_view",
                    "consensus": "params:vocab_consensus",
                    **private_of_each(organisations, "term_counts"),
                },
                outputs="consensus_report",
                name="score_vocabulary_attack",
            ),
            Node(metric_series, "consensus_report", "consensus_metrics_mlflow", name="log_consensus_metrics"),
        ]
    )
    sites = inside_each(
        organisations,
        _site(),
        inputs={"vocabulary": "common_vocabulary", "vocabulary_request": "vocabulary_request"},
        parameters={"vocab_consensus", "privacy"},
        sends=["vocabulary_proposal", "vocabulary_reveal", "vectorize_report"],
    )
    return server + sites


def _site() -> Pipeline:
    """Inside an organisation: its proposal from its own counts, the terms of the digests the
    server kept, and its bag of words over the common vocabulary."""
    return Pipeline(
        [
            Node(
                propose_vocabulary,
                inputs=["term_counts", "params:vocab_consensus", "params:privacy"],
                outputs="vocabulary_proposal",
                name="propose_vocabulary",
            ),
            Node(
                reveal_vocabulary,
                inputs=["term_counts", "vocabulary_request", "params:vocab_consensus", "params:privacy"],
                outputs="vocabulary_reveal",
                name="reveal_vocabulary",
            ),
            Node(
                vectorize_documents,
                inputs=["tokens", "vocabulary", "term_counts", "params:vocab_consensus"],
                outputs=["bow", "vectorize_report"],
                name="vectorize_documents",
            ),
        ]
    )
