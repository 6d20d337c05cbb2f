"""Project hooks."""

from __future__ import annotations

import logging

from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl

from fedtopic_pipelines.core.config import ConsensusConfig, EvaluateConfig, PreprocessConfig, choice, from_mapping
from fedtopic_pipelines.pipeline_registry import CORPORA, organisations_of
from fedtopic_pipelines.pipelines.train.nodes import parse_train_params

logger = logging.getLogger(__name__)


class ValidateParametersHook:
    """Parse every parameter block before any node runs.

    A misspelt key or an unknown scenario, model or merge rule then stops the run at once,
    naming the parameter, instead of after ingestion and preprocessing.
    """

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        params = context.params
        organisations_of(params)
        choice("corpus", str(params.get("corpus", "demo")), CORPORA)
        from_mapping(PreprocessConfig, params.get("preprocess"), "preprocess")
        from_mapping(ConsensusConfig, params.get("vocab_consensus"), "vocab_consensus")
        parse_train_params(params.get("train") or {})
        from_mapping(EvaluateConfig, params.get("evaluate"), "evaluate")
        logger.debug("parameters validated")
