"""Wiring of ``evaluate``."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.evaluate.nodes import evaluate_organisation, select_coherence_candidates, summarise
from fedtopic_pipelines.pipelines.naming import shared


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
    clients = [
        Pipeline(
            template,
            namespace=f"clients.{org}",
            parameters={"evaluate"},
            inputs={"trained_models", "coherence_candidates"},
            outputs={"evaluation": shared("evaluation", org)},
        )
        for org in organisations
    ]
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
                    **{org: shared("evaluation", org) for org in organisations},
                },
                outputs=["metrics", "headline_metrics", "topics", "scenario_comparison", "evaluation_metrics_mlflow"],
                name="summarise_evaluation",
            )
        ]
    )
    return sum(clients, candidates + server)
