"""Wiring of ``realdata``: train the experiment's models, evaluate them as ``evaluate`` does
(under the namespace ``realdata``, in memory), then compare their topics."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines import evaluate
from fedtopic_pipelines.pipelines.naming import client, private_of_each
from fedtopic_pipelines.pipelines.realdata.nodes import compare_topics, train_experiment
from fedtopic_pipelines.pipelines.train.nodes import EMBEDDINGS


def create_pipeline(organisations: list[str]) -> Pipeline:
    train = Pipeline(
        [
            Node(
                train_experiment,
                inputs={
                    "train": "params:train",
                    "realdata": "params:realdata",
                    "organisations": "params:organisations",
                    "common_vocabulary": "common_vocabulary",
                    **private_of_each(organisations, "bow"),
                    **private_of_each(organisations, "embeddings", EMBEDDINGS),
                },
                outputs="realdata_models",
                name="train_realdata_models",
            )
        ]
    )
    own = {client(org, what) for org in organisations for what in ("tokens", "bow", "embeddings")}
    scored = Pipeline(
        evaluate.create_pipeline(organisations),
        namespace="realdata",
        inputs={"trained_models": "realdata_models", "common_vocabulary": "common_vocabulary", **{d: d for d in own}},
        outputs={"metrics": "realdata_metrics"},
        parameters={"params:evaluate": "params:evaluate", "params:organisations": "params:organisations"},
    )
    compare = Pipeline(
        [
            Node(
                compare_topics,
                inputs=[
                    "realdata_models",
                    "common_vocabulary",
                    "realdata_metrics",
                    "params:realdata",
                    "params:organisations",
                ],
                outputs=["realdata_amwmd", "realdata_figure", "realdata_metrics_mlflow"],
                name="compare_realdata_topics",
            )
        ]
    )
    return train + scored + compare
