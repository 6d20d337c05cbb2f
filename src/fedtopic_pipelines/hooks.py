"""Project hooks."""

from __future__ import annotations

import logging

from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl

from fedtopic_pipelines.core.config import ConfigError
from fedtopic_pipelines.core.parameters import validate_parameters
from fedtopic_pipelines.pipeline_registry import project_parameters

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
        params = context.params
        configured = project_parameters(context.project_path, context.env)
        for key in ("corpus", "organisations"):
            if params.get(key) != configured.get(key):
                raise ConfigError(
                    f"parameter '{key}' cannot be changed with --params: it shapes the pipelines "
                    f"(one namespace per organisation); set it in conf/<env>/parameters.yml and use --env"
                )
        validate_parameters(params)
        logger.debug("parameters validated")
