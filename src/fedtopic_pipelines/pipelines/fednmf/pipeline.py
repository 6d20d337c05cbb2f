"""Wiring of ``fednmf``: the sweep at the server, each organisation's co-occurrence counts of
the models' top words, then the tables, figures and MLflow runs."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.fednmf.nodes import count_top_words, run_fednmf, summarise_fednmf
from fedtopic_pipelines.pipelines.naming import client, shared


def create_pipeline(organisations: list[str]) -> Pipeline:
    """Reads what the default chain wrote up to ``vocab_consensus``: each organisation's bag of
    words and tokens, and the common vocabulary. Only co-occurrence counts of the candidate
    words (``fednmf_counts__<org>``) and, in training, weights leave an organisation."""
    server = Pipeline(
        [
            Node(
                run_fednmf,
                inputs={
                    "params": "params:fednmf",
                    "organisations": "params:organisations",
                    "privacy": "params:privacy",
                    "common_vocabulary": "common_vocabulary",
                    **{org: client(org, "bow") for org in organisations},
                },
                outputs="fednmf_sweep",
                name="run_fednmf",
            ),
            Node(
                summarise_fednmf,
                inputs={
                    "sweep": "fednmf_sweep",
                    "organisations": "params:organisations",
                    "params": "params:fednmf",
                    **{org: shared("fednmf_counts", org) for org in organisations},
                },
                outputs=["fednmf_metrics", "fednmf_tables", "fednmf_figures", "fednmf_mlflow_runs"],
                name="summarise_fednmf",
            ),
        ]
    )
    clients = [
        Pipeline(
            [
                Node(
                    count_top_words,
                    inputs=["tokens", "fednmf_sweep"],
                    outputs="fednmf_counts",
                    name="count_fednmf_top_words",
                )
            ],
            namespace=f"clients.{org}",
            inputs={"fednmf_sweep": "fednmf_sweep"},
            outputs={"fednmf_counts": shared("fednmf_counts", org)},
        )
        for org in organisations
    ]
    return sum(clients, server)
