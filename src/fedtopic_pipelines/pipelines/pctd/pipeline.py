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
    training = private_of_each(organisations, "pctd_train")
    evaluations = sent_by_each(organisations, "pctd_evaluation")
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
                    **training,
                },
                outputs=["pctd_models", "pctd_history", "pctd_training_mlflow"],
                name="train_pctd",
            ),
            Node(
                train_pctd_baselines,
                inputs={"params": "params:pctd", "organisations": "params:organisations", **training},
                outputs="pctd_baselines",
                name="train_pctd_baselines",
            ),
            Node(
                train_pctd_sweeps,
                inputs={
                    "params": "params:pctd",
                    "organisations": "params:organisations",
                    "common_vocabulary": "common_vocabulary",
                    **training,
                },
                outputs="pctd_figure_models",
                name="train_pctd_sweeps",
            ),
            Node(
                evaluate_pctd,
                inputs={
                    "models": "pctd_models",
                    "baselines": "pctd_baselines",
                    "params": "params:pctd",
                    "organisations": "params:organisations",
                    "common_vocabulary": "common_vocabulary",
                    **evaluations,
                },
                outputs=["pctd_metrics", "pctd_fig3", "pctd_metrics_mlflow"],
                name="evaluate_pctd",
            ),
            Node(
                pctd_figures,
                inputs={
                    "figure_models": "pctd_figure_models",
                    "params": "params:pctd",
                    "organisations": "params:organisations",
                    "common_vocabulary": "common_vocabulary",
                    **evaluations,
                },
                outputs=["pctd_sweeps", "pctd_figures", "pctd_sweeps_mlflow"],
                name="pctd_figures",
            ),
        ]
    )
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
    return sites + server
