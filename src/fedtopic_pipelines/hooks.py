"""Project hooks: parameters checked before anything runs, MLflow runs a user can tell
apart, and an INFO line for each start-up phase that takes time."""

from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path
from typing import Any

from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl
from kedro.framework.project import settings
from kedro.pipeline import Pipeline

from fedtopic_pipelines.core.config import ConfigError
from fedtopic_pipelines.core.parameters import validate_parameters

logger = logging.getLogger(__name__)


class ValidateParametersHook:
    """Parse every parameter block before any node runs.

    ``corpus`` and ``organisations`` are checked by ``register_pipelines``, which needs
    them; here we only make sure ``--params`` did not change them behind the registry's back.

    A misspelt key or block, a value of the wrong type (``max_steps: 2.5``, a string for a
    count, ``.nan``), or an unknown scenario, family or merge rule then stops the run at
    once, naming the parameter, instead of after ingestion and preprocessing.
    """

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        # The project's pipelines (and through them torch) are imported here, not when Kedro
        # reads settings.py: ``kedro --help`` and ``kedro mlflow ui`` stay fast.
        from fedtopic_pipelines.pipeline_registry import project_parameters

        logger.info("MLflow tracking set up; checking every parameter block")

        # ``config_loader["parameters"]`` (with --params) rather than ``context.params``:
        # Kedro validates the latter against every registered pipeline, which would build
        # (import) all of them before Kedro knows which ones the run needs.
        params = context.config_loader["parameters"]
        configured = project_parameters(context.project_path, context.env)
        for key in ("corpus", "organisations"):
            if params.get(key) != configured.get(key):
                raise ConfigError(
                    f"parameter '{key}' cannot be changed with --params: it shapes the pipelines "
                    f"(one namespace per organisation); set it in conf/<env>/parameters.yml and use --env"
                )
        validate_parameters(params)
        logger.debug("parameters validated")


def default_env() -> str:
    """The environment of a run without ``--env`` or ``KEDRO_ENV`` (settings: ``local``)."""
    return settings.CONFIG_LOADER_ARGS.get("default_run_env") or "base"


def run_name(pipeline_names: list[str] | None, env: str) -> str:
    """``<pipeline>@<environment>``: ``all@local`` for ``kedro run``, ``train@s2orc`` for
    ``kedro run --pipeline=train --env=s2orc``; several pipelines joined by ``+``."""
    names = [("all" if name == "__default__" else name) for name in (pipeline_names or ["__default__"])]
    return f"{'+'.join(names)}@{env}"


def git_commit(project_path: Path) -> dict[str, str]:
    """The project's git commit and whether the work tree differs from it (empty outside git)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=project_path, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=project_path,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"mlflow.source.git.commit": commit, "git_dirty": str(bool(dirty)).lower()}


class RunIdentityHook:
    """Name each MLflow run by pipeline and environment and log what a user filters runs by.

    kedro-mlflow names every run after its pipeline (``__default__`` for ``kedro run``) and
    logs only the parameters that nodes read, so runs of different corpora looked alike.
    This adds params ``corpus``, ``kedro_env`` and ``organisations``, the same as tags, and
    the git commit (MLflow's ``mlflow.source.git.commit`` tag, shown in the UI) with
    ``git_dirty``. A run name set in ``mlflow.yml`` (``tracking.run.name``) is kept.
    """

    def __init__(self) -> None:
        self._context: KedroContext | None = None

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        self._context = context

    @hook_impl(trylast=True)  # after kedro-mlflow's own before_pipeline_run has started the run
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Pipeline, catalog: Any) -> None:
        import mlflow

        run = mlflow.active_run()
        if run is None or self._context is None:  # tracking disabled for this pipeline
            return
        params = self._context.config_loader["parameters"]
        names = run_params.get("pipeline_names") or ["__default__"]
        env = run_params.get("env") or self._context.env or default_env()
        identity: dict[str, Any] = {
            "corpus": params.get("corpus"),
            "kedro_env": env,
            # the same value (a list) kedro-mlflow logs when a node reads params:organisations
            "organisations": params.get("organisations"),
        }
        mlflow.log_params(identity)
        tags = {key: str(value) for key, value in identity.items()}
        tags.update(git_commit(self._context.project_path))
        if run.info.run_name == "+".join(names):  # kedro-mlflow's default: not set in mlflow.yml
            tags["mlflow.runName"] = run_name(names, env)
        mlflow.set_tags(tags)
        logger.info(
            "MLflow run '%s' (%s): corpus '%s', environment '%s'; %d nodes to run",
            tags.get("mlflow.runName", run.info.run_name),
            run.info.run_id,
            identity["corpus"],
            env,
            len(pipeline.nodes),
        )


class StartupPhasesHook:
    """Say what happens between ``kedro run`` and the first node (once 2 minutes of silence
    on a busy host): Kedro's own start, the MLflow store's set-up, building the pipelines."""

    def __init__(self) -> None:
        self._started = time.perf_counter()

    @hook_impl(tryfirst=True)
    def after_context_created(self, context: KedroContext) -> None:
        self._started = time.perf_counter()
        logger.info("environment '%s': setting up MLflow tracking", context.env or default_env())

    @hook_impl
    def after_catalog_created(self, catalog: Any) -> None:
        logger.info(
            "pipelines built and data catalog created (%d datasets), %.1f s after the MLflow set-up began",
            len(list(catalog.keys())),
            time.perf_counter() - self._started,
        )
