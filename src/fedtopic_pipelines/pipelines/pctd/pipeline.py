"""Wiring of ``pctd``: per organisation its word sequences and its share of the evaluation;
training, the baselines, the sums and the figures at the server."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.naming import for_organisation, inside_each, private_of_each, sent_by_each
from fedtopic_pipelines.pipelines.pctd.nodes import (
    build_pctd_documents,
    evaluate_pctd,
    evaluate_pctd_organisation,
    pctd_figures,
    train_pctd,
    train_pctd_baselines,
    train_pctd_sweeps,
)


def _organisation_site(org: str) -> Pipeline:
    """Inside ``clients.<org>``: its documents as id sequences, then every model scored on them.
    Only the report's counts and the evaluation's sums (``pctd_evaluation__<org>``) leave."""
    return Pipeline(
        [
            Node(
                build_pctd_documents,
                inputs=["tokens", "vocabulary"],
                outputs=["pctd_train", "pctd_test", "pctd_report"],
                name="build_pctd_documents",
            ),
            Node(
                for_organisation(evaluate_pctd_organisation, org),
                inputs={
                    "train": "pctd_train",
                    "test": "pctd_test",
                    "models": "pctd_models",
                    "baselines": "pctd_baselines",
                    "figure_models": "pctd_figure_models",
                    "common_vocabulary": "vocabulary",
                    "params": "params:pctd",
                    "organisations": "params:organisations",
                },
                outputs="pctd_evaluation",
                name="evaluate_pctd_organisation",
            ),
        ]
    )


def create_pipeline(organisations: list[str]) -> Pipeline:
    """Reads what the default chain wrote up to ``vocab_consensus``: each organisation's tokens
    and the common vocabulary with its summed counts. Only the report's counts, in training
    noisy statistics, and the evaluation's sums leave an organisation; the server's training
    nodes simulate the federation in process (docs/pctd.md)."""
    sites = inside_each(
        organisations,
        _organisation_site,
        inputs={
            "vocabulary": "common_vocabulary",
            **{name: name for name in ("pctd_models", "pctd_baselines", "pctd_figure_models")},
        },
        parameters={"pctd", "organisations"},
        sends=["pctd_report", "pctd_evaluation"],
    )
    return sites + _training(organisations) + _summaries(organisations)


def _training(organisations: list[str]) -> Pipeline:
    """The server's training nodes (the boundary's allow-list: the in-process simulation and the
    baselines read the organisations' training documents)."""
    training = private_of_each(organisations, "pctd_train")
    run = {"params": "params:pctd", "organisations": "params:organisations"}
    return Pipeline(
        [
            Node(
                train_pctd,
                inputs={
                    **run,
                    "preprocess_params": "params:preprocess",
                    "consensus_params": "params:vocab_consensus",
                    "common_vocabulary": "common_vocabulary",
                    **training,
                },
                outputs=["pctd_models", "pctd_history", "pctd_training_mlflow"],
                name="train_pctd",
            ),
            Node(
                train_pctd_baselines, inputs={**run, **training}, outputs="pctd_baselines", name="train_pctd_baselines"
            ),
            Node(
                train_pctd_sweeps,
                inputs={**run, "common_vocabulary": "common_vocabulary", **training},
                outputs="pctd_figure_models",
                name="train_pctd_sweeps",
            ),
        ]
    )


def _summaries(organisations: list[str]) -> Pipeline:
    """The server's sums of what the organisations sent: the main models' metrics and the figures."""
    sent = {
        "params": "params:pctd",
        "organisations": "params:organisations",
        "common_vocabulary": "common_vocabulary",
        **sent_by_each(organisations, "pctd_evaluation"),
    }
    return Pipeline(
        [
            Node(
                evaluate_pctd,
                inputs={"models": "pctd_models", "baselines": "pctd_baselines", **sent},
                outputs=["pctd_metrics", "pctd_fig3", "pctd_metrics_mlflow"],
                name="evaluate_pctd",
            ),
            Node(
                pctd_figures,
                inputs={"figure_models": "pctd_figure_models", **sent},
                outputs=["pctd_sweeps", "pctd_figures", "pctd_sweeps_mlflow"],
                name="pctd_figures",
            ),
        ]
    )
