"""Project hooks."""

from __future__ import annotations

import logging

from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl

from fedtopic_pipelines.core.config import (
    ConfigError,
    ConsensusConfig,
    EvaluateConfig,
    IngestDemoConfig,
    IngestS2orcConfig,
    IngestTableConfig,
    IngestWikipediaConfig,
    PreprocessConfig,
    SyntheticGeneratorConfig,
    from_mapping,
)
from fedtopic_pipelines.core.synthetic_experiment import SyntheticExperimentConfig
from fedtopic_pipelines.pipeline_registry import project_parameters
from fedtopic_pipelines.pipelines.train.nodes import parse_train_params

logger = logging.getLogger(__name__)


class ValidateParametersHook:
    """Parse every parameter block before any node runs.

    ``corpus`` and ``organisations`` are checked by ``register_pipelines``, which needs
    them; here we only make sure ``--params`` did not change them behind the registry's back.

    A misspelt key or an unknown scenario, model or merge rule then stops the run at once,
    naming the parameter, instead of after ingestion and preprocessing.
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
        from_mapping(IngestDemoConfig, params.get("ingest_demo"), "ingest_demo")
        from_mapping(IngestTableConfig, params.get("ingest_table"), "ingest_table")
        from_mapping(IngestWikipediaConfig, params.get("ingest_wikipedia"), "ingest_wikipedia")
        from_mapping(IngestS2orcConfig, params.get("ingest_s2orc"), "ingest_s2orc")
        synthetic_corpus = dict(params.get("ingest_synthetic") or {})
        from_mapping(SyntheticGeneratorConfig, synthetic_corpus.pop("generator", None), "ingest_synthetic.generator")
        if synthetic_corpus:
            raise ConfigError(f"unknown parameter(s) {[f'ingest_synthetic.{k}' for k in synthetic_corpus]}")
        from_mapping(PreprocessConfig, params.get("preprocess"), "preprocess")
        from_mapping(ConsensusConfig, params.get("vocab_consensus"), "vocab_consensus")
        parse_train_params(params.get("train") or {})
        from_mapping(EvaluateConfig, params.get("evaluate"), "evaluate")
        SyntheticExperimentConfig.from_params(params.get("synthetic") or {})
        logger.debug("parameters validated")
