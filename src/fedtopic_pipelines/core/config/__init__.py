"""Typed configuration for every parameter block, validated by pydantic in strict mode.

Kedro parameters (``conf/*/parameters_*.yml``) and the Flower job are parsed into these
models once, at the edge, so core functions never see raw dictionaries. Strict mode is
the point: a count must be an integer (not ``2.5``, ``true`` or ``"10"``), a float must be
finite (no ``.nan`` or ``.inf``), a list must be a list (``scenarios: federated`` is
refused, not read as ``'f'``), and an unknown key is an error. Every error names the
parameter by its full dotted path (``train.model.n_topics``) and the value given.

The ``train.model`` block is a discriminated union on ``family``: each model family
(``core/families/``) has its own config class (``prodlda.py``, ``word2vec.py``, ``nmf.py``,
``pctd.py``, ``lda.py`` here), and the registry (``registry.py``) builds the family from it. A block
without ``family`` is the default family, ProdLDA.

The package's modules, from the ground up: ``base`` (the model base, error messages,
constrained types, shared checks); the blocks that need only it (``ingest``, ``text``,
``aggregation``, ``hosting``, ``privacy``, ``evaluate``, ``synthetic``, ``family``); the
families' blocks; ``registry``; ``train``; ``runs``. Every public name is re-exported here.
"""

from __future__ import annotations

from fedtopic_pipelines.core.capabilities import WEIGHT_RULES, DataKind, FamilyCapabilities
from fedtopic_pipelines.core.config.aggregation import AggregationConfig, OptimizerConfig, Unit
from fedtopic_pipelines.core.config.base import (
    GLOVE_VECTORS,
    ConfigError,
    ConfigModel,
    CountOrShare,
    Fraction,
    MaxDocuments,
    Name,
    NonNegativeFloat,
    NonNegativeInt,
    OpenFraction,
    PositiveFloat,
    PositiveInt,
    Rules,
    Seed,
    Split,
    check_distinct,
    check_one_of,
    check_vectors,
    config_error,
    count_from,
    from_mapping,
    is_word2vec_file,
    pickle_refusal,
)
from fedtopic_pipelines.core.config.evaluate import EvaluateConfig, WordVectorsEvaluateConfig
from fedtopic_pipelines.core.config.family import FamilyConfig
from fedtopic_pipelines.core.config.hosting import EmbeddingsConfig, FlowerConfig
from fedtopic_pipelines.core.config.ingest import (
    ArchiveSourceConfig,
    ArchiveUnit,
    IngestArchivesConfig,
    IngestDemoConfig,
    IngestS2orcConfig,
    IngestTableConfig,
    IngestWikipediaConfig,
    LabelPartitionConfig,
    MultiMatch,
    OrganisationRules,
    Sha256,
    StreamingIngestConfig,
)
from fedtopic_pipelines.core.config.lda import LDAConfig
from fedtopic_pipelines.core.config.nmf import NMFConfig, NMFExactConfig
from fedtopic_pipelines.core.config.pctd import PCTDConfig
from fedtopic_pipelines.core.config.privacy import ROBUST_RULES, DPConfig, PrivacyConfig, SecAggConfig
from fedtopic_pipelines.core.config.prodlda import CombinedTMConfig, ProdLDAConfig, ZeroShotTMConfig
from fedtopic_pipelines.core.config.registry import (
    DEFAULT_FAMILY,
    MODEL_CONFIGS,
    ModelConfig,
    check_trained_by,
    register_model_config,
    trained_by,
    unregister_model_config,
)
from fedtopic_pipelines.core.config.runs import CompareConfig, RealDataConfig, Word2VecRunConfig
from fedtopic_pipelines.core.config.synthetic import IngestSyntheticConfig, SyntheticGeneratorConfig
from fedtopic_pipelines.core.config.text import ConsensusConfig, PreprocessConfig
from fedtopic_pipelines.core.config.train import SCENARIOS, Scenario, TrainConfig
from fedtopic_pipelines.core.config.word2vec import Word2VecConfig

__all__ = [
    "DEFAULT_FAMILY",
    "GLOVE_VECTORS",
    "MODEL_CONFIGS",
    "ROBUST_RULES",
    "SCENARIOS",
    "WEIGHT_RULES",
    "AggregationConfig",
    "ArchiveSourceConfig",
    "ArchiveUnit",
    "CombinedTMConfig",
    "CompareConfig",
    "ConfigError",
    "ConfigModel",
    "ConsensusConfig",
    "CountOrShare",
    "DPConfig",
    "DataKind",
    "EmbeddingsConfig",
    "EvaluateConfig",
    "FamilyCapabilities",
    "FamilyConfig",
    "FlowerConfig",
    "Fraction",
    "IngestArchivesConfig",
    "IngestDemoConfig",
    "IngestS2orcConfig",
    "IngestSyntheticConfig",
    "IngestTableConfig",
    "IngestWikipediaConfig",
    "LDAConfig",
    "LabelPartitionConfig",
    "MaxDocuments",
    "ModelConfig",
    "MultiMatch",
    "NMFConfig",
    "NMFExactConfig",
    "Name",
    "NonNegativeFloat",
    "NonNegativeInt",
    "OpenFraction",
    "OptimizerConfig",
    "OrganisationRules",
    "PCTDConfig",
    "PositiveFloat",
    "PositiveInt",
    "PreprocessConfig",
    "PrivacyConfig",
    "ProdLDAConfig",
    "RealDataConfig",
    "Rules",
    "Scenario",
    "SecAggConfig",
    "Seed",
    "Sha256",
    "Split",
    "StreamingIngestConfig",
    "SyntheticGeneratorConfig",
    "TrainConfig",
    "Unit",
    "Word2VecConfig",
    "Word2VecRunConfig",
    "WordVectorsEvaluateConfig",
    "ZeroShotTMConfig",
    "check_distinct",
    "check_one_of",
    "check_trained_by",
    "check_vectors",
    "config_error",
    "count_from",
    "from_mapping",
    "is_word2vec_file",
    "pickle_refusal",
    "register_model_config",
    "trained_by",
    "unregister_model_config",
]
