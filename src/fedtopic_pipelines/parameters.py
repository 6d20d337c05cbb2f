"""All of a project's parameters, validated at once: what ``kedro run`` checks before any node runs.

The Kedro hook, the benchmarks and the Flower CLI build their configuration here, from
the same parameter dictionary ``kedro run`` sees (an environment over ``base``, plus
``--params``), so a benchmark cannot drift from the pipelines. An unknown top-level block
(``trian.max_steps=5``) is refused with its name, as is every bad value inside a block.

It stands above both ``core/`` (the library's blocks) and ``experiments/`` (the papers' blocks
``fednmf``, ``pctd`` and ``synthetic``), so it can name every block while neither of them
imports it; like them it imports no kedro, flwr or mlflow (docs/architecture.md, "Layers").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fedtopic_pipelines.core.config import (
    ConfigError,
    ConfigModel,
    ConsensusConfig,
    EvaluateConfig,
    IngestArchivesConfig,
    IngestDemoConfig,
    IngestS2orcConfig,
    IngestSyntheticConfig,
    IngestTableConfig,
    IngestWikipediaConfig,
    PreprocessConfig,
    PrivacyConfig,
    RealDataConfig,
    TrainConfig,
    Word2VecRunConfig,
    from_mapping,
)
from fedtopic_pipelines.experiments.config import FedNMFRunConfig, PCTDRunConfig, SyntheticExperimentConfig

BLOCKS: dict[str, type[ConfigModel]] = {
    "ingest_demo": IngestDemoConfig,
    "ingest_table": IngestTableConfig,
    "ingest_archives": IngestArchivesConfig,
    "ingest_wikipedia": IngestWikipediaConfig,
    "ingest_s2orc": IngestS2orcConfig,
    "ingest_synthetic": IngestSyntheticConfig,
    "preprocess": PreprocessConfig,
    "vocab_consensus": ConsensusConfig,
    "train": TrainConfig,
    "evaluate": EvaluateConfig,
    "realdata": RealDataConfig,
    "word2vec": Word2VecRunConfig,
    "fednmf": FedNMFRunConfig,
    "pctd": PCTDRunConfig,
    "privacy": PrivacyConfig,
}
# pipelines whose own block's ``train`` the top-level ``privacy`` applies to; every other
# pipeline that trains (the default chain, ``train``, ``realdata``) trains the ``train`` block
TRAINED = ("word2vec", "fednmf", "pctd")
TRAINS_MAIN = ("__default__", "train", "realdata")
SCALARS = ("corpus", "organisations")
SYNTHETIC = "synthetic"
KNOWN = (*SCALARS, *BLOCKS, SYNTHETIC)


@dataclass(frozen=True)
class ProjectConfig:
    """Every parameter block present, validated (blocks absent from the parameters are left out)."""

    corpus: str | None
    organisations: list[str]
    blocks: dict[str, ConfigModel] = field(default_factory=dict)
    synthetic: SyntheticExperimentConfig | None = None

    @property
    def train(self) -> TrainConfig:
        return self.blocks.get("train") or TrainConfig()

    @property
    def preprocess(self) -> PreprocessConfig:
        return self.blocks.get("preprocess") or PreprocessConfig()

    @property
    def consensus(self) -> ConsensusConfig:
        return self.blocks.get("vocab_consensus") or ConsensusConfig()

    @property
    def evaluate(self) -> EvaluateConfig:
        return self.blocks.get("evaluate") or EvaluateConfig()


def validate_parameters(params: Mapping[str, Any]) -> ProjectConfig:
    """Parse every block of ``params``; :class:`ConfigError` naming each bad parameter."""
    unknown = sorted(set(params) - set(KNOWN))
    if unknown:
        raise ConfigError(f"unknown parameter block(s) {unknown}; known: {sorted(KNOWN)}")
    organisations = params.get("organisations") or []
    if not isinstance(organisations, list | tuple) or not all(isinstance(o, str) for o in organisations):
        raise ConfigError(f"parameter 'organisations' must be a list of names, got {organisations!r}")
    blocks = {name: from_mapping(cls, params[name], name) for name, cls in BLOCKS.items() if name in params}
    synthetic = None
    if SYNTHETIC in params:
        synthetic = SyntheticExperimentConfig.from_params(params[SYNTHETIC] or {})
    corpus = params.get("corpus")
    return ProjectConfig(None if corpus is None else str(corpus), list(organisations), blocks, synthetic)


def check_privacy(config: ProjectConfig, pipelines: Sequence[str] | None) -> None:
    """The ``privacy`` switch against the family each pipeline of the run trains (before any node
    runs): ``kedro run --pipeline=word2vec`` with DP set is refused there, and the same DP on the
    default chain's ProdLDA is not held against word2vec's block, which that run never reads."""
    privacy = config.blocks.get("privacy")
    if privacy is None:
        return
    names = set(pipelines or ["__default__"])
    if names & set(TRAINS_MAIN):
        with_privacy(config.train, privacy, "train")
    for name in TRAINED:
        if name in names and name in config.blocks:
            with_privacy(config.blocks[name].train, privacy, f"{name}.train")


def with_privacy(
    train: TrainConfig, privacy: PrivacyConfig | Mapping[str, Any] | None, where: str = "train"
) -> TrainConfig:
    """``train`` under the top-level ``privacy`` block (one switch for whichever family is trained);
    a combination the family cannot honour raises :class:`ConfigError` naming both blocks."""
    if privacy is None:
        return train
    if not isinstance(privacy, PrivacyConfig):
        privacy = from_mapping(PrivacyConfig, privacy, "privacy")
    try:
        return train.replace(privacy=privacy)
    except ConfigError as exc:
        raise ConfigError(f"'privacy' does not fit '{where}' ({train.model.family}): {exc}") from None
