"""Wiring of ``fednmf``: the sweep at the server, each organisation's scores of every model on
its own documents, then the tables, figures and MLflow runs."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.fednmf.nodes import evaluate_fednmf_organisation, run_fednmf, summarise_fednmf
from fedtopic_pipelines.pipelines.naming import for_organisation, inside_each, private_of_each, sent_by_each


def _organisation_site(org: str) -> Pipeline:
    """Inside ``clients.<org>``: every model scored on its own texts and documents; only the
    counts (``fednmf_evaluation__<org>``) leave."""
    return Pipeline(
        [
            Node(
                for_organisation(evaluate_fednmf_organisation, org),
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
        ]
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
                    **private_of_each(organisations, "bow"),
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
                    **sent_by_each(organisations, "fednmf_evaluation"),
                },
                outputs=["fednmf_metrics", "fednmf_tables", "fednmf_figures", "fednmf_mlflow_runs"],
                name="summarise_fednmf",
            ),
        ]
    )
    sites = inside_each(
        organisations,
        _organisation_site,
        inputs={"fednmf_sweep", "fednmf_models"},
        parameters={"fednmf"},
        sends=["fednmf_evaluation"],
    )
    return server + sites
