"""Kedro project settings."""

import warnings
from typing import Any

from kedro.config import OmegaConfigLoader

from fedtopic_pipelines.hooks import (
    KilledRunsHook,
    ProjectLockHook,
    RunIdentityHook,
    StageTimingsHook,
    StaleReportsHook,
    StartupPhasesHook,
    ValidateParametersHook,
)

HOOKS = (
    StartupPhasesHook(),
    ValidateParametersHook(),
    ProjectLockHook(),
    RunIdentityHook(),
    KilledRunsHook(),
    StageTimingsHook(),
    StaleReportsHook(),
)
CONF_SOURCE = "conf"
DEFAULT_RUN_ENV = "local"
SHARED_ROOT_ENVS = frozenset({"base", DEFAULT_RUN_ENV})


def data_root(env: str | None) -> str:
    """Where a run of ``env`` writes when no globals.yml sets ``data_root``: the default
    environment into data/, any other into data/<env>/, so that trying two corpora never
    overwrites the first one's vocabulary, models or reports (docs/data.md)."""
    return "data" if not env or env in SHARED_ROOT_ENVS else f"data/{env}"


class ProjectConfigLoader(OmegaConfigLoader):
    """Kedro's loader with ``globals.data_root`` defaulting to :func:`data_root` of the run's
    environment; a ``data_root`` in the environment's globals.yml wins (smoke shares data/)."""

    def __init__(self, conf_source: str, env: str | None = None, **kwargs) -> None:
        super().__init__(conf_source, env=env, **kwargs)
        run_env = self.env or self.default_run_env  # the environment Kedro reads, as it decides it
        self["globals"] = {"data_root": data_root(run_env), **self._globals}

    def __getitem__(self, key: str) -> Any:
        # OmegaConf's ``globals`` resolver is process-wide and each loader registers its own on
        # creation: the last one created (the registry's, a hook's of base) would otherwise
        # resolve this loader's catalog with its environment's root.
        self._register_globals_resolver()
        return super().__getitem__(key)


CONFIG_LOADER_CLASS = ProjectConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": DEFAULT_RUN_ENV,
    "config_patterns": {"mlflow": ["mlflow*", "mlflow*/**"]},
    # An environment (conf/smoke, conf/<yours>) overrides only the keys it names.
    "merge_strategy": {"parameters": "soft", "catalog": "soft", "mlflow": "soft", "globals": "soft"},
}

# Each organisation's steps live in its namespace ``clients.<org>`` and the federated
# protocol alternates client and server steps, so that namespace is necessarily
# "interrupted" by server nodes; Kedro warns because it also uses namespaces to group
# nodes for deployment, which this project does not. Ingestion writes the
# organisations' private tables (``clients.<org>.raw_documents``) by name.
warnings.filterwarnings("ignore", message=r"Namespace '.*' is interrupted by nodes", category=UserWarning)
warnings.filterwarnings("ignore", message=r"One or more dataset names contain '\.'", category=UserWarning)
