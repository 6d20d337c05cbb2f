"""Pipelines of the project, built for the organisations of the active configuration."""

from __future__ import annotations

import os
from pathlib import Path

from kedro.config import OmegaConfigLoader
from kedro.framework.project import settings
from kedro.pipeline import Pipeline

from fedtopic_pipelines.core.config import ConfigError
from fedtopic_pipelines.pipelines import (
    evaluate,
    ingest_demo,
    ingest_s2orc,
    ingest_synthetic,
    ingest_table,
    ingest_wikipedia,
    preprocess,
    synthetic,
    train,
    vocab_consensus,
)

CORPORA = ("demo", "wikipedia", "s2orc", "table", "synthetic")


def project_parameters(
    project_path: Path | None = None, env: str | None = None, runtime_params: dict | None = None
) -> dict:
    """Parameters of the environment ``env`` (default: ``KEDRO_ENV``, else ``local``) over ``base``,
    with ``runtime_params`` (a nested dict: what ``kedro run --params`` passes) over both.

    Uses the project's settings (soft merge): inside a Kedro session, or after
    ``bootstrap_project`` in a script; otherwise Kedro's defaults replace whole blocks.
    """
    conf = (project_path or Path.cwd()) / settings.CONF_SOURCE
    loader = OmegaConfigLoader(
        str(conf), env=env or os.getenv("KEDRO_ENV"), runtime_params=runtime_params, **settings.CONFIG_LOADER_ARGS
    )
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


def rule_organisations(params: dict, block: str) -> list[str]:
    """The organisations an ingestion's rules define (the keys of ``<block>.organisations``)."""
    rules = (params.get(block) or {}).get("organisations") or {}
    if not isinstance(rules, dict) or not rules:
        raise ConfigError(f"parameter '{block}.organisations' must map each organisation to its rules")
    return organisations_of({"organisations": list(rules)})


def corpus_organisations(params: dict, corpus: str) -> list[str]:
    """``organisations``, checked against what the corpus's ingestion produces."""
    orgs = organisations_of(params)
    if corpus in ("wikipedia", "s2orc"):
        produced = rule_organisations(params, f"ingest_{corpus}")
        if produced != orgs:
            raise ConfigError(
                f"parameter 'organisations' {orgs} must equal the organisations of "
                f"'ingest_{corpus}.organisations' {produced} (same names, same order) for corpus '{corpus}'"
            )
    return orgs


def register_pipelines() -> dict[str, Pipeline]:
    """``__default__`` chains ingestion of the configured corpus, preprocessing, consensus, training, evaluation.

    ``corpus`` (demo | wikipedia | s2orc | table | synthetic) picks which ingestion feeds
    the chain (``ingest`` is its alias); every ``ingest_<corpus>`` also runs on its own.

    ``synthetic`` (gFedNTM Fig. 3) generates its own organisations and stands alone.
    """
    params = project_parameters()
    corpus = params.get("corpus", "demo")
    if corpus not in CORPORA:
        raise ConfigError(f"parameter 'corpus' is {corpus!r}; expected one of {list(CORPORA)}")
    orgs = corpus_organisations(params, corpus)
    pipelines = {
        "ingest_demo": ingest_demo.create_pipeline(orgs),
        "ingest_table": ingest_table.create_pipeline(orgs),
        "ingest_wikipedia": ingest_wikipedia.create_pipeline(rule_organisations(params, "ingest_wikipedia")),
        "ingest_s2orc": ingest_s2orc.create_pipeline(rule_organisations(params, "ingest_s2orc")),
        "ingest_synthetic": ingest_synthetic.create_pipeline(orgs),
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
