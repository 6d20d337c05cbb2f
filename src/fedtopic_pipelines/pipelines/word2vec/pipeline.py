"""Wiring of ``word2vec``: per organisation its token sequences, then training and evaluation at the server."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.naming import inside_each, private_of_each
from fedtopic_pipelines.pipelines.word2vec.nodes import (
    build_sentences,
    evaluate_word_vectors,
    train_reference,
    train_word2vec,
)


def create_pipeline(organisations: list[str]) -> Pipeline:
    """Reads what the default chain wrote: each organisation's tokens (``preprocess``) and the
    common vocabulary with its summed counts (``vocab_consensus``); each organisation's bag of
    words for its lineage only (both checked to be of one run). Only the report's counts
    (``word2vec_report__<org>``) and, in training, sparse gradient rows leave an organisation."""
    site = Pipeline(
        [
            Node(
                build_sentences,
                inputs=["tokens", "vocabulary", "bow"],
                outputs=["sentences", "word2vec_report"],
                name="build_sentences",
            )
        ]
    )
    clients = inside_each(organisations, site, inputs={"vocabulary": "common_vocabulary"}, sends=["word2vec_report"])
    server = Pipeline(
        [
            Node(
                train_word2vec,
                inputs={
                    "params": "params:word2vec",
                    "organisations": "params:organisations",
                    "preprocess_params": "params:preprocess",
                    "consensus_params": "params:vocab_consensus",
                    "common_vocabulary": "common_vocabulary",
                    **private_of_each(organisations, "sentences"),
                },
                outputs=["word2vec_models", "word2vec_history", "word2vec_training_mlflow"],
                name="train_word2vec",
            ),
            Node(
                train_reference,
                inputs={
                    "params": "params:word2vec",
                    "organisations": "params:organisations",
                    "common_vocabulary": "common_vocabulary",
                    **private_of_each(organisations, "sentences"),
                },
                outputs="word2vec_reference",
                name="train_word2vec_reference",
            ),
            Node(
                evaluate_word_vectors,
                inputs=["word2vec_models", "common_vocabulary", "params:word2vec", "word2vec_reference"],
                outputs=["word2vec_scores", "word2vec_vectors", "word2vec_figures", "word2vec_metrics_mlflow"],
                name="evaluate_word_vectors",
            ),
        ]
    )
    return clients + server
