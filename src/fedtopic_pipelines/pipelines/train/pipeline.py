"""Wiring of ``train``."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.naming import private_of_each
from fedtopic_pipelines.pipelines.train.nodes import EMBEDDINGS, train_models


def create_pipeline(organisations: list[str]) -> Pipeline:
    return Pipeline(
        [
            Node(
                train_models,
                inputs={
                    "params": "params:train",
                    "privacy": "params:privacy",
                    "organisations": "params:organisations",
                    "preprocess_params": "params:preprocess",
                    "consensus_params": "params:vocab_consensus",
                    "common_vocabulary": "common_vocabulary",
                    **private_of_each(organisations, "bow"),
                    **private_of_each(organisations, "embeddings", EMBEDDINGS),
                },
                outputs=["trained_models", "training_history", "training_metrics_mlflow"],
                name="train_models",
            )
        ]
    )
