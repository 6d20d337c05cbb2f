"""Kedro project settings."""

import warnings

from kedro.config import OmegaConfigLoader

from fedtopic_pipelines.hooks import (
    KilledRunsHook,
    ProjectLockHook,
    RunIdentityHook,
    StageTimingsHook,
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
)
CONF_SOURCE = "conf"
CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    "config_patterns": {"mlflow": ["mlflow*", "mlflow*/**"]},
    # An environment (conf/smoke, conf/<yours>) overrides only the keys it names.
    "merge_strategy": {"parameters": "soft", "catalog": "soft", "mlflow": "soft"},
}

# Each organisation's steps live in its namespace ``clients.<org>`` and the federated
# protocol alternates client and server steps, so that namespace is necessarily
# "interrupted" by server nodes; Kedro warns because it also uses namespaces to group
# nodes for deployment, which this project does not. Ingestion writes the
# organisations' private tables (``clients.<org>.raw_documents``) by name.
warnings.filterwarnings("ignore", message=r"Namespace '.*' is interrupted by nodes", category=UserWarning)
warnings.filterwarnings("ignore", message=r"One or more dataset names contain '\.'", category=UserWarning)
