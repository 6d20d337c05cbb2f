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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fedtopic_pipelines.core.compute import missing_device
from fedtopic_pipelines.core.config import (
    CompareConfig,
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
from fedtopic_pipelines.core.config.aggregation import participants_per_round
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
    "compare": CompareConfig,
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


@dataclass(frozen=True)
class Trained:
    """One ``train`` block a run trains: its parameter path, the block under ``privacy``, and the
    number of organisations of each federation it trains (empty: no federated scenario)."""

    where: str
    train: TrainConfig
    federations: tuple[int, ...]


def trained_blocks(config: ProjectConfig, pipelines: Sequence[str] | None) -> list[Trained]:
    """The ``train`` blocks the named pipelines train (``__default__`` when none is named), each
    under the top-level ``privacy`` where that applies; :class:`ConfigError` when it cannot."""
    privacy = config.blocks.get("privacy")
    names = set(pipelines or ["__default__"])
    organisations = len(config.organisations)
    blocks: list[Trained] = []
    if names & set(TRAINS_MAIN):
        train = with_privacy(config.train, privacy, "train")
        blocks.append(Trained("train", train, _federated(train, organisations)))
    for name in TRAINED:
        if name in names and name in config.blocks:
            block = config.blocks[name]
            train = with_privacy(block.train, privacy, f"{name}.train")
            sizes = (
                block.federation_sizes(organisations)
                if isinstance(block, FedNMFRunConfig)
                else _federated(train, organisations)
            )
            blocks.append(Trained(f"{name}.train", train, sizes))
    if "compare" in names:  # every family it compares, each under the top-level privacy
        compare = config.blocks.get("compare") or CompareConfig()
        for family, train in compare.train_configs(config.train.to_params()).items():
            where = f"compare.families.{family}"
            train = with_privacy(train, privacy, where)
            blocks.append(Trained(where, train, _federated(train, organisations)))
    if SYNTHETIC in names and config.synthetic is not None:  # its own organisations, its own train.privacy
        synthetic = config.synthetic
        scenarios = synthetic.sweep.scenarios or synthetic.train.scenarios
        sizes = (synthetic.generator.n_organisations,) if "federated" in scenarios else ()
        blocks.append(Trained("synthetic.train", synthetic.train, sizes))
    return blocks


def _federated(train: TrainConfig, organisations: int) -> tuple[int, ...]:
    return (organisations,) if "federated" in train.scenarios else ()


def check_run(config: ProjectConfig, pipelines: Sequence[str] | None) -> None:
    """Everything about the named pipelines that the parameters and this machine can answer,
    checked before the first node (the hook's ``before_pipeline_run``), each refusal naming the
    parameter: ``privacy`` against each family trained, the organisations per round against
    client sampling and the robust rule, and the device each block asks for."""
    for block in trained_blocks(config, pipelines):
        for organisations in block.federations:
            check_robust(block.train, organisations, block.where)
        check_device(block.train.device, f"{block.where}.device")


def check_robust(train: TrainConfig, organisations: int, where: str) -> None:
    """``train.privacy``'s robust rule against the n updates a round of ``where`` aggregates (floor(C K)
    of its K ``organisations``): Krum needs n - f - 2 > 0 and keeps at most n - f; a trimmed mean
    that cuts int(fraction x n) = 0 from each end is the plain mean it was chosen not to be."""
    privacy, fraction = train.privacy, train.aggregation.client_fraction
    rule, f, keep, trim = privacy.robust_rule, privacy.krum_byzantine, privacy.krum_keep, privacy.trim_fraction
    n = participants_per_round(organisations, fraction, where)
    if n < 1 or rule in ("mean", "median"):
        return
    how = f"its {organisations} organisations"
    if n < organisations:
        how = f"floor({fraction} x {organisations}) of {how}, '{where}.aggregation.client_fraction'"
    rounds = f"'{where}' aggregates n = {n} updates per round ({how})"
    if rule == "trimmed_mean" and trim > 0 and int(trim * n) == 0:
        advice = f"set it to at least {math.ceil(1000 / n) / 1000:g}" if n > 2 else f"no fraction < 0.5 cuts one of {n}"
        raise ConfigError(
            f"parameter 'privacy.trim_fraction' is {trim}, but {rounds}: int({trim} x {n}) = 0 cut from each end "
            f"leaves an unweighted mean that keeps no attacker out; {advice}, or use median"
        )
    if rule == "krum" and n - f - 2 <= 0:
        advice = f"set it to at most {n - 3}" if n >= 3 else "no f >= 0 allows that with n < 3; use median"
        raise ConfigError(
            f"parameter 'privacy.krum_byzantine' is {f}, but {rounds}: Krum scores each update by its n - f - 2 "
            f"nearest others and needs n - f - 2 > 0; {advice}"
        )
    if rule == "krum" and keep > n - f:
        raise ConfigError(
            f"parameter 'privacy.krum_keep' is {keep}, but {rounds}, of which 'privacy.krum_byzantine' = {f} may be "
            f"Byzantine: at most n - f = {n - f} can be kept"
        )


def check_device(device: str, parameter: str) -> None:
    """A device this machine lacks (``cuda`` on a CPU host) stops the run before ingestion, not
    at the training node; torch is imported only when a block names such a device."""
    if device in ("auto", "cpu"):
        return
    missing = missing_device(device)
    if missing:
        raise ConfigError(f"parameter '{parameter}' is {device!r}, but {missing}; use 'auto' or 'cpu'")


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
