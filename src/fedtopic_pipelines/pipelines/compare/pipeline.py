"""Wiring of ``compare``: each organisation embeds its documents if a compared family reads
embeddings; the simulation trains every family; ``evaluate``'s nodes score every model (inside
the organisations, summed at the server, under the namespace ``compare``); the leaderboard."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines import evaluate
from fedtopic_pipelines.pipelines.compare.nodes import embed_for_compare, leaderboard, train_compared_models
from fedtopic_pipelines.pipelines.naming import client, inside_each, private_of_each
from fedtopic_pipelines.pipelines.train.nodes import EMBEDDINGS


def create_pipeline(organisations: list[str]) -> Pipeline:
    embed = inside_each(
        organisations,
        Pipeline(
            [
                Node(
                    embed_for_compare,
                    inputs=["raw_documents", "bow", "params:train", "params:compare", "embedding_cache"],
                    outputs="compare_embeddings",
                    name="embed_for_compare",
                )
            ]
        ),
        parameters={"train", "compare"},
    )
    train = Pipeline(
        [
            Node(
                train_compared_models,
                inputs={
                    "train": "params:train",
                    "compare": "params:compare",
                    "privacy": "params:privacy",
                    "organisations": "params:organisations",
                    "common_vocabulary": "common_vocabulary",
                    **private_of_each(organisations, "bow"),
                    **private_of_each(organisations, "compare_embeddings", EMBEDDINGS),
                },
                outputs=["compare_models", "compare_training"],
                name="train_compared_models",
            )
        ]
    )
    own = {client(org, what): client(org, what) for org in organisations for what in ("tokens", "bow")}
    own |= {client(org, "embeddings"): client(org, "compare_embeddings") for org in organisations}
    scored = Pipeline(
        evaluate.create_pipeline(organisations),
        namespace="compare",
        inputs={"trained_models": "compare_models", "common_vocabulary": "common_vocabulary", **own},
        outputs={"metrics": "compare_metrics", "topics": "compare_topics"},
        parameters={"params:evaluate": "params:evaluate", "params:organisations": "params:organisations"},
    )
    board = Pipeline(
        [
            Node(
                leaderboard,
                inputs=[
                    "compare_metrics",
                    "compare_topics",
                    "compare_training",
                    "params:compare",
                    "params:evaluate",
                    "params:organisations",
                ],
                outputs=[
                    "compare_leaderboard",
                    "compare_leaderboard_markdown",
                    "compare_figure",
                    "compare_summary",
                    "compare_headline",
                    "compare_mlflow_runs",
                ],
                name="compare_leaderboard",
            )
        ]
    )
    return embed + train + scored + board
