"""Wiring of ``privacy``: after ``evaluate``, one audit node over the trained models."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.naming import private_of_each
from fedtopic_pipelines.pipelines.privacy.nodes import report_privacy


def create_pipeline(organisations: list[str]) -> Pipeline:
    return Pipeline(
        [
            Node(
                report_privacy,
                inputs={
                    "models": "trained_models",
                    "metrics": "metrics",
                    "consensus_report": "consensus_report",
                    "params": "params:privacy",
                    **private_of_each(organisations, "bow"),
                },
                outputs=["privacy_report", "privacy_metrics_mlflow"],
                name="report_privacy",
            )
        ]
    )
