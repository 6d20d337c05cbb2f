"""Pipelines of the project, built for the organisations of the active configuration."""

from __future__ import annotations

import os
from pathlib import Path

from kedro.config import OmegaConfigLoader
from kedro.framework.project import settings
from kedro.pipeline import Pipeline

from fedtopic_pipelines.core.config import ConfigError, choice
from fedtopic_pipelines.pipelines import (
    evaluate,
    ingest_demo,
    ingest_table,
    preprocess,
    synthetic,
    train,
    vocab_consensus,
)

CORPORA = ("demo", "table")


def project_parameters(project_path: Path | None = None, env: str | None = None) -> dict:
    """Parameters of the environment ``env`` (default: ``KEDRO_ENV``, else ``local``) over ``base``.

    Uses the project's settings (soft merge): inside a Kedro session, or after
    ``bootstrap_project`` in a script; otherwise Kedro's defaults replace whole blocks.
    """
    conf = (project_path or Path.cwd()) / settings.CONF_SOURCE
    loader = OmegaConfigLoader(str(conf), env=env or os.getenv("KEDRO_ENV"), **settings.CONFIG_LOADER_ARGS)
    return loader["parameters"]


def organisations_of(params: dict) -> list[str]:
    """The configured organisation names, validated for use as namespaces."""
    orgs = list(params.get("organisations") or [])
    if not orgs:
        raise ConfigError("parameter 'organisations' is empty: list the organisations of the corpus")
    for org in orgs:
        if not str(org).isidentifier():
            raise ConfigError(f"parameter 'organisations': {org!r} is not a valid name (letters, digits, _)")
    reserved = {"params", "models", "vocabulary", "organisations"}
    if reserved & set(orgs):
        raise ConfigError(f"parameter 'organisations': {sorted(reserved & set(orgs))} are reserved names")
    if len(set(orgs)) != len(orgs):
        raise ConfigError(f"parameter 'organisations' repeats a name: {orgs}")
    return orgs


def register_pipelines() -> dict[str, Pipeline]:
    """``__default__`` chains ingestion of the configured corpus, preprocessing, consensus, training, evaluation.

    ``synthetic`` (gFedNTM Fig. 3) generates its own organisations and stands alone.
    """
    params = project_parameters()
    orgs = organisations_of(params)
    corpus = choice("corpus", str(params.get("corpus", "demo")), CORPORA)
    pipelines = {
        "ingest_demo": ingest_demo.create_pipeline(orgs),
        "ingest_table": ingest_table.create_pipeline(orgs),
        "preprocess": preprocess.create_pipeline(orgs),
        "vocab_consensus": vocab_consensus.create_pipeline(orgs),
        "train": train.create_pipeline(orgs),
        "evaluate": evaluate.create_pipeline(orgs),
        "synthetic": synthetic.create_pipeline(),
    }
    pipelines["ingest"] = pipelines[f"ingest_{corpus}"]
    pipelines["__default__"] = (
        pipelines["ingest"]
        + pipelines["preprocess"]
        + pipelines["vocab_consensus"]
        + pipelines["train"]
        + pipelines["evaluate"]
    )
    return pipelines
