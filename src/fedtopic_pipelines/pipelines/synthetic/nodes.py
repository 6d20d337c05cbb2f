"""Nodes of ``synthetic``: a sweep is a loop over points, so one node runs them all."""

from __future__ import annotations

import math
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from fedtopic_pipelines.experiments.config import SyntheticExperimentConfig
from fedtopic_pipelines.experiments.synthetic import run_point, summarise_scenarios

SCENARIO_STYLE = {
    "non_collaborative": ("non-collaborative (mean over organisations)", "tab:orange", "s"),
    "centralized": ("centralized", "tab:blue", "o"),
    "federated": ("federated", "tab:green", "^"),
}
AXIS_LABEL = {"n_shared": "K' (shared topics)", "eta": "eta (topic prior)"}


def run_sweep(params: dict[str, Any]) -> pd.DataFrame:
    """Every (value, repetition) of the configured sweep; one row per trained model."""
    config = SyntheticExperimentConfig.from_params(params)
    rows: list[dict[str, Any]] = []
    points = config.points()
    for point in tqdm(points, desc=f"synthetic sweep {config.sweep.name}", unit="point"):
        result = run_point(config, point)
        rows.extend({**row, **result.timings} for row in result.rows)
    runs = pd.DataFrame(rows)
    runs.insert(0, "sweep", config.sweep.name)
    return runs


def summary_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard deviation over repetitions per (value, scenario)."""
    per_run = pd.DataFrame(summarise_scenarios(runs.to_dict("records")))
    grouped = per_run.groupby(["value", "scenario"], sort=True)
    table = grouped.agg(
        dss_mean=("dss", "mean"),
        dss_std=("dss", "std"),
        tss_mean=("tss", "mean"),
        tss_std=("tss", "std"),
        tss_baseline_mean=("tss_baseline", "mean"),
        tss_baseline_std=("tss_baseline", "std"),
        repetitions=("repetition", "nunique"),
    )
    return table.reset_index().fillna({"dss_std": 0.0, "tss_std": 0.0, "tss_baseline_std": 0.0})


def sweep_figure(summary: pd.DataFrame, parameter: str, sweep: str) -> plt.Figure:
    """Fig. 3 for one sweep: DSS (left, lower is better) and TSS (right, K is perfect)."""
    values = sorted(summary["value"].unique())
    x = np.arange(len(values))
    fig, (ax_dss, ax_tss) = plt.subplots(1, 2, figsize=(11, 4.2))
    for scenario, (label, colour, marker) in SCENARIO_STYLE.items():
        part = summary[summary["scenario"] == scenario].set_index("value").reindex(values)
        if part["dss_mean"].isna().all():
            continue
        for ax, metric in ((ax_dss, "dss"), (ax_tss, "tss")):
            ax.errorbar(
                x,
                part[f"{metric}_mean"],
                yerr=part[f"{metric}_std"],
                label=label,
                color=colour,
                marker=marker,
                capsize=3,
            )
    baseline = summary.groupby("value")[["tss_baseline_mean", "tss_baseline_std"]].first().reindex(values)
    ax_tss.errorbar(
        x,
        baseline["tss_baseline_mean"],
        yerr=baseline["tss_baseline_std"],
        label="a-priori baseline",
        color="grey",
        linestyle="--",
        capsize=3,
    )
    reps = int(summary["repetitions"].min())
    for ax, title in ((ax_dss, "DSS (eq. 5), lower is better"), (ax_tss, "TSS (eq. 6), K is perfect")):
        ax.set_xticks(x, [f"{v:g}" for v in values])
        ax.set_xlabel(AXIS_LABEL.get(parameter, parameter))
        ax.set_title(title)
        ax.grid(alpha=0.3)
    ax_tss.legend(fontsize=8)
    fig.suptitle(f"Synthetic sweep {sweep}: mean +- std over {reps} repetition(s) (gFedNTM Fig. 3)")
    fig.tight_layout()
    return fig


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def report_sweep(
    runs: pd.DataFrame, params: dict[str, Any]
) -> tuple[dict[str, pd.DataFrame], dict[str, Any], dict[str, plt.Figure], dict[str, Any]]:
    """CSV tables, a DVC metrics file, the figure, and one nested MLflow run per point."""
    config = SyntheticExperimentConfig.from_params(params)
    sweep = config.sweep.name
    summary = summary_table(runs)
    figure = sweep_figure(summary, config.sweep.parameter, sweep)
    metrics = {
        "sweep": sweep,
        "parameter": config.sweep.parameter,
        "repetitions": config.sweep.repetitions,
        "points": {
            f"{value:g}": {
                row["scenario"]: {"dss": row["dss_mean"], "tss": row["tss_mean"]} for row in group.to_dict("records")
            }
            | {"tss_baseline": float(group["tss_baseline_mean"].iloc[0])}
            for value, group in summary.groupby("value")
        },
    }
    nested = []
    for (value, repetition), group in runs.groupby(["value", "repetition"], sort=True):
        first = group.iloc[0]
        run_metrics = {"tss_baseline": float(first["tss_baseline"])}
        for row in group.to_dict("records"):
            run_metrics[f"dss.{row['model']}"] = row["dss"]
            run_metrics[f"tss.{row['model']}"] = row["tss"]
            run_metrics[f"steps.{row['model']}"] = row["steps"]
        for row in summarise_scenarios(group.to_dict("records")):
            run_metrics[f"dss.scenario.{row['scenario']}"] = row["dss"]
            run_metrics[f"tss.scenario.{row['scenario']}"] = row["tss"]
        nested.append(
            {
                "name": f"sweep {sweep}: {config.sweep.parameter}={value:g} rep {repetition}",
                "params": {
                    "sweep": sweep,
                    "parameter": config.sweep.parameter,
                    "value": f"{value:g}",
                    "repetition": int(repetition),
                    "seed": int(first["seed"]),
                    "n_shared": int(first["n_shared"]),
                    "eta": float(first["eta"]),
                    "alpha": float(first["alpha"]),
                },
                "metrics": {k: float(v) for k, v in run_metrics.items() if _finite(v)},
            }
        )
    mlflow_record = {
        "runs": nested,
        "artifacts": {f"synthetic/runs_{sweep}.csv": runs, f"synthetic/summary_{sweep}.csv": summary},
        "figures": {f"synthetic/fig3_{sweep}.png": figure},
    }
    tables = {f"runs_{sweep}": runs, f"summary_{sweep}": summary}
    return tables, {f"metrics_{sweep}": metrics}, {f"fig3_{sweep}": figure}, mlflow_record
