"""Wiring of ``evaluate``."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.evaluate.nodes import evaluate_organisation, select_coherence_candidates, summarise
from fedtopic_pipelines.pipelines.naming import inside_each, sent_by_each


def create_pipeline(organisations: list[str]) -> Pipeline:
    candidates = Pipeline(
        [
            Node(
                select_coherence_candidates,
                inputs=["trained_models", "common_vocabulary", "params:evaluate"],
                outputs="coherence_candidates",
                name="select_coherence_candidates",
            )
        ]
    )
    template = Pipeline(
        [
            Node(
                evaluate_organisation,
                inputs=["trained_models", "tokens", "bow", "embeddings", "coherence_candidates", "params:evaluate"],
                outputs="evaluation",
                name="evaluate_organisation",
            )
        ]
    )
    clients = inside_each(
        organisations,
        template,
        inputs={"trained_models", "coherence_candidates"},
        parameters={"evaluate"},
        sends=["evaluation"],
    )
    server = Pipeline(
        [
            Node(
                summarise,
                inputs={
                    "models": "trained_models",
                    "vocabulary": "common_vocabulary",
                    "organisations": "params:organisations",
                    "candidates": "coherence_candidates",
                    "params": "params:evaluate",
                    **sent_by_each(organisations, "evaluation"),
                },
                outputs=["metrics", "headline_metrics", "topics", "scenario_comparison", "evaluation_metrics_mlflow"],
                name="summarise_evaluation",
            )
        ]
    )
    return candidates + clients + server
