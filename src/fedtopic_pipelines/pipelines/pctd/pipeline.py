"""Wiring of ``pctd``: per organisation its word sequences, then training, evaluation and figures at the server."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.naming import client, shared
from fedtopic_pipelines.pipelines.pctd.nodes import TEST, build_pctd_documents, evaluate_pctd, pctd_figures, train_pctd


def create_pipeline(organisations: list[str]) -> Pipeline:
    """Reads what the default chain wrote up to ``vocab_consensus``: each organisation's tokens
    and the common vocabulary with its summed counts. Only the report's counts
    (``pctd_report__<org>``) and, in training, noisy statistics leave an organisation; the
    evaluation's sweeps read the organisations' documents as fednmf's do (docs/pctd.md)."""
    clients = [
        Pipeline(
            [
                Node(
                    build_pctd_documents,
                    inputs=["tokens", "vocabulary"],
                    outputs=["pctd_train", "pctd_test", "pctd_report"],
                    name="build_pctd_documents",
                )
            ],
            namespace=f"clients.{org}",
            inputs={"vocabulary": "common_vocabulary"},
            outputs={"pctd_report": shared("pctd_report", org)},
        )
        for org in organisations
    ]
    documents = {
        **{org: client(org, "pctd_train") for org in organisations},
        **{org + TEST: client(org, "pctd_test") for org in organisations},
    }
    server = Pipeline(
        [
            Node(
                train_pctd,
                inputs={
                    "params": "params:pctd",
                    "organisations": "params:organisations",
                    "preprocess_params": "params:preprocess",
                    "consensus_params": "params:vocab_consensus",
                    "common_vocabulary": "common_vocabulary",
                    **{org: client(org, "pctd_train") for org in organisations},
                },
                outputs=["pctd_models", "pctd_history", "pctd_training_mlflow"],
                name="train_pctd",
            ),
            Node(
                evaluate_pctd,
                inputs={
                    "models": "pctd_models",
                    "params": "params:pctd",
                    "organisations": "params:organisations",
                    "common_vocabulary": "common_vocabulary",
                    **documents,
                },
                outputs=["pctd_metrics", "pctd_fig3", "pctd_metrics_mlflow"],
                name="evaluate_pctd",
            ),
            Node(
                pctd_figures,
                inputs={
                    "params": "params:pctd",
                    "organisations": "params:organisations",
                    "common_vocabulary": "common_vocabulary",
                    **documents,
                },
                outputs=["pctd_sweeps", "pctd_figures", "pctd_sweeps_mlflow"],
                name="pctd_figures",
            ),
        ]
    )
    return sum(clients, server)
