"""Pipelines of the project, built for the organisations of the active configuration."""

from __future__ import annotations

import importlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from kedro.framework.project import settings
from kedro.pipeline import Pipeline

from fedtopic_pipelines.core.config import ConfigError
from fedtopic_pipelines.pipelines.boundary import check_boundary

CORPORA = ("demo", "wikipedia", "s2orc", "table", "archives", "synthetic")
DEFAULT_CHAIN = ("ingest", "preprocess", "vocab_consensus", "embed", "train", "evaluate", "privacy")

logger = logging.getLogger(__name__)


def project_parameters(
    project_path: Path | None = None, env: str | None = None, runtime_params: dict | None = None
) -> dict:
    """Parameters of the environment ``env`` (default: ``KEDRO_ENV``, else ``local``) over ``base``,
    with ``runtime_params`` (a nested dict: what ``kedro run --params`` passes) over both.

    Uses the project's settings (soft merge): inside a Kedro session, or after
    ``bootstrap_project`` in a script; otherwise Kedro's defaults replace whole blocks.
    """
    conf = (project_path or Path.cwd()) / settings.CONF_SOURCE
    loader = settings.CONFIG_LOADER_CLASS(
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
    reserved = {"params", "models", "vocabulary", "organisations", "secure_aggregate"}
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


class LazyPipelines(Mapping[str, Pipeline]):
    """The registry's pipelines, each built (and its node modules imported) on first access.

    Kedro looks up only the pipelines a run names, so ``kedro run --pipelines=ingest`` (what
    the DVC ``ingest`` stage runs) imports the ingestion modules and not torch, scikit-learn
    or matplotlib, which evaluation and training need: seconds on an idle machine, tens of
    seconds on a busy one. Iterating (``kedro registry list``, or the parameter validation
    of a ``__default__`` run, which inspects every pipeline) builds them all. A pipeline whose
    node reads an organisation's data from outside its namespace is refused when it is built
    (``pipelines/boundary.py``).
    """

    def __init__(self, builders: Mapping[str, Callable[[], Pipeline]]) -> None:
        self._builders = dict(builders)
        self._built: dict[str, Pipeline] = {}

    def __getitem__(self, name: str) -> Pipeline:
        if name not in self._built:
            builder = self._builders[name]  # KeyError: Kedro then suggests close names
            started = time.perf_counter()
            self._built[name] = pipeline = check_boundary(name, builder())
            logger.debug(
                "pipeline '%s' built: %d nodes in %.1f s", name, len(pipeline.nodes), time.perf_counter() - started
            )
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._builders)

    def __len__(self) -> int:
        return len(self._builders)


def _builder(name: str, organisations: list[str]) -> Callable[[], Pipeline]:
    """Pipeline ``name`` for ``organisations``, built on first use."""
    return lambda: _module(name).create_pipeline(organisations)


def _module(name: str):
    """``fedtopic_pipelines.pipelines.<name>``, imported when a pipeline is first built."""
    return importlib.import_module(f"fedtopic_pipelines.pipelines.{name}")


def register_pipelines() -> Mapping[str, Pipeline]:
    """``__default__`` chains ingestion of the configured corpus, preprocessing, consensus, embedding
    (a no-op unless the family reads sentence embeddings), training, evaluation.

    ``corpus`` (demo | wikipedia | s2orc | table | archives | synthetic) picks which ingestion feeds
    the chain (``ingest`` is its alias); every ``ingest_<corpus>`` also runs on its own.

    ``synthetic`` (gFedNTM Fig. 3) generates its own organisations and stands alone.
    ``word2vec`` (seed 003) reads the chain's tokens and common vocabulary: run the chain
    up to ``vocab_consensus`` first (``kedro run`` does). ``fednmf`` (seed 004) runs the chain
    up to ``vocab_consensus`` itself, then its sweep; so do ``pctd`` (seed 002) and ``compare``
    (every family side by side, one leaderboard).
    """
    params = project_parameters()
    corpus = params.get("corpus", "demo")
    if corpus not in CORPORA:
        raise ConfigError(f"parameter 'corpus' is {corpus!r}; expected one of {list(CORPORA)}")
    orgs = corpus_organisations(params, corpus)
    rules = {name: rule_organisations(params, f"ingest_{name}") for name in ("wikipedia", "s2orc")}
    builders: dict[str, Callable[[], Pipeline]] = {
        **{f"ingest_{name}": _builder(f"ingest_{name}", orgs) for name in ("demo", "table", "archives", "synthetic")},
        **{f"ingest_{name}": _builder(f"ingest_{name}", rules[name]) for name in ("wikipedia", "s2orc")},
        **{name: _builder(name, orgs) for name in (*DEFAULT_CHAIN[1:], "word2vec")},
        "synthetic": lambda: _module("synthetic").create_pipeline(),
    }

    def after_chain(stages: int, name: str) -> Callable[[], Pipeline]:
        """The default chain's first ``stages`` stages, then pipeline ``name`` (its own nodes)."""
        return lambda: (
            sum((pipelines[s] for s in DEFAULT_CHAIN[:stages]), Pipeline([])) + _module(name).create_pipeline(orgs)
        )

    pipelines = LazyPipelines(
        {
            **builders,
            "ingest": lambda: pipelines[f"ingest_{corpus}"],
            "__default__": lambda: sum((pipelines[name] for name in DEFAULT_CHAIN), Pipeline([])),
            "realdata": after_chain(4, "realdata"),  # gFedNTM Fig. 4: the chain up to the embeddings
            "fednmf": after_chain(3, "fednmf"),  # FedNMF+MI (seed 004): the chain up to the common vocabulary
            "pctd": after_chain(3, "pctd"),  # PC-TD (seed 002): the chain up to the common vocabulary
            "compare": after_chain(3, "compare"),  # every family, one evaluator: the chain up to the common vocabulary
        }
    )
    logger.info(
        "corpus '%s', %d organisations (%s): building the pipelines (their first use imports torch, scikit-learn...)",
        corpus,
        len(orgs),
        ", ".join(orgs),
    )
    return pipelines
