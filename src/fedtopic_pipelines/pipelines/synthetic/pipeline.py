"""Wiring of ``synthetic``: run every point of the sweep, then report it."""

from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.pipelines.synthetic.nodes import report_sweep, run_sweep


def create_pipeline() -> Pipeline:
    return Pipeline(
        [
            Node(run_sweep, inputs="params:synthetic", outputs="synthetic_runs", name="run_synthetic_sweep"),
            Node(
                report_sweep,
                inputs=["synthetic_runs", "params:synthetic"],
                outputs=["synthetic_tables", "synthetic_metrics", "synthetic_figures", "synthetic_mlflow_runs"],
                name="report_synthetic_sweep",
            ),
        ]
    )
