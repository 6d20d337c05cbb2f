"""Wiring of ``fednmf``: the sweep at the server, each organisation's scores of every model on
its own documents, then the tables, figures and MLflow runs."""

from functools import partial, update_wrapper

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.fednmf.nodes import evaluate_fednmf_organisation, run_fednmf, summarise_fednmf
from fedtopic_pipelines.pipelines.naming import client, shared


def _organisation_pipeline(org: str) -> Pipeline:
    """Inside ``clients.<org>``: every model scored on its own texts and documents; only the
    counts (``fednmf_evaluation__<org>``) leave."""
    evaluate = update_wrapper(partial(evaluate_fednmf_organisation, organisation=org), evaluate_fednmf_organisation)
    return Pipeline(
        [
            Node(
                evaluate,
                inputs={
                    "tokens": "tokens",
                    "bow": "bow",
                    "sweep": "fednmf_sweep",
                    "models": "fednmf_models",
                    "params": "params:fednmf",
                },
                outputs="fednmf_evaluation",
                name="evaluate_fednmf_organisation",
            )
        ],
        namespace=f"clients.{org}",
        inputs={"fednmf_sweep", "fednmf_models"},
        parameters={"fednmf"},
        outputs={"fednmf_evaluation": shared("fednmf_evaluation", org)},
    )


def create_pipeline(organisations: list[str]) -> Pipeline:
    """Reads what the default chain wrote up to ``vocab_consensus``: each organisation's bag of
    words and tokens, and the common vocabulary. The sweep node simulates the federation in
    process (it holds every bag of words, as the train node does); every model is then scored
    inside each organisation, and only counts (``fednmf_evaluation__<org>``) and, in training,
    weights leave one."""
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
                outputs=["fednmf_sweep", "fednmf_models"],
                name="run_fednmf",
            ),
            Node(
                summarise_fednmf,
                inputs={
                    "sweep": "fednmf_sweep",
                    "organisations": "params:organisations",
                    "params": "params:fednmf",
                    **{org: shared("fednmf_evaluation", org) for org in organisations},
                },
                outputs=["fednmf_metrics", "fednmf_tables", "fednmf_figures", "fednmf_mlflow_runs"],
                name="summarise_fednmf",
            ),
        ]
    )
    return sum((_organisation_pipeline(org) for org in organisations), server)
