"""gFedNTM sec. 4.1: non-collaborative vs centralized vs federated ProdLDA on LDA data.

One *point* of a sweep: generate the organisations (``core.synthetic``), agree on a
vocabulary (the same consensus stage as real corpora), train the scenarios (each
organisation holds out ``train.validation_fraction`` of its training documents for early
stopping, 25 % in the paper), infer the
document-topic mixtures of every organisation's validation documents with every model,
and score them against the ground truth with DSS (eq. 5) and TSS (eq. 6).

Non-collaborative scores follow the authors' code (docs/synthetic.md): each
organisation's model infers *all* validation documents and is compared with *all* K
true topics; the reported value is the mean over organisations, the per-organisation
values are kept beside it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from pydantic import Field

from fedtopic_pipelines.core.compute import resolve_device
from fedtopic_pipelines.core.config import (
    ConfigError,
    ConfigModel,
    ConsensusConfig,
    NonNegativeInt,
    PositiveInt,
    Seed,
    SweepConfig,
    SyntheticGeneratorConfig,
    TrainConfig,
    from_mapping,
)
from fedtopic_pipelines.core.metrics.similarity import align_topics, dss, tss, tss_baseline
from fedtopic_pipelines.core.model_store import TrainedModel
from fedtopic_pipelines.core.seeds import derive_seed
from fedtopic_pipelines.core.site import Site
from fedtopic_pipelines.core.synthetic import SyntheticCorpus, generate
from fedtopic_pipelines.core.training import train_scenarios
from fedtopic_pipelines.core.vocab.consensus import agree_on_vocabulary

logger = logging.getLogger(__name__)

INFERENCE_CHUNK = 2048


class SyntheticExperimentConfig(ConfigModel):
    """The ``synthetic`` parameter block: generator, consensus, training, scoring, sweep."""

    generator: SyntheticGeneratorConfig = Field(default_factory=SyntheticGeneratorConfig)
    consensus: ConsensusConfig = Field(default_factory=lambda: ConsensusConfig(top_n=5000, min_count=0))
    train: TrainConfig = Field(default_factory=TrainConfig)
    sweep: SweepConfig = Field(default_factory=SweepConfig)
    inference_samples: NonNegativeInt = 20
    baseline_draws: PositiveInt = 10
    seed: Seed = 42

    @classmethod
    def from_params(cls, raw: Mapping[str, Any]) -> SyntheticExperimentConfig:
        """Parse the ``synthetic`` block; every sweep value is checked against the generator."""
        raw = dict(raw)
        sweep = parse_sweep(raw.pop("sweep", "A"), raw.pop("sweeps", None), raw.pop("repetitions", 10))
        config = from_mapping(cls, {**raw, "sweep": sweep}, "synthetic")
        for point in config.points():  # fail before any training, naming the sweep value
            point.generator_config(config)
        return config

    def points(self) -> list[SweepPoint]:
        """Every (value, repetition) of the sweep, in run order."""
        return [
            SweepPoint(self.sweep.parameter, value, rep)
            for value in self.sweep.values
            for rep in range(self.sweep.repetitions)
        ]


def parse_sweep(name: Any, sweeps: Mapping[str, Any] | None, repetitions: Any) -> SweepConfig:
    """``synthetic.sweep`` names one entry of ``synthetic.sweeps``; build it as a SweepConfig."""
    sweeps = dict(sweeps or {})
    if not sweeps:
        raise ConfigError("parameter 'synthetic.sweeps' is empty: define at least one sweep")
    if name not in sweeps:
        raise ConfigError(f"parameter 'synthetic.sweep' is {name!r}; expected one of {sorted(sweeps)}")
    if isinstance(repetitions, bool) or not isinstance(repetitions, int) or repetitions < 1:
        raise ConfigError(f"parameter 'synthetic.repetitions' must be an integer >= 1, got {repetitions!r}")
    block = sweeps[name]
    if block is not None and not isinstance(block, Mapping):
        raise ConfigError(f"parameter block 'synthetic.sweeps.{name}' must be a mapping, got {block!r}")
    block = dict(block or {})
    if "name" in block or "repetitions" in block:
        raise ConfigError(f"parameter 'synthetic.sweeps.{name}' takes only 'parameter', 'values' and 'scenarios'")
    block.update(name=str(name), repetitions=repetitions)
    return from_mapping(SweepConfig, block, f"synthetic.sweeps.{name}")


@dataclass(frozen=True)
class SweepPoint:
    """One run: a value of the swept parameter and a repetition number."""

    parameter: str
    value: float
    repetition: int

    def seed(self, config: SyntheticExperimentConfig) -> int:
        """Repetition r uses the same seed at every value, so points differ only by the value."""
        return config.seed + self.repetition

    def generator_config(self, config: SyntheticExperimentConfig) -> SyntheticGeneratorConfig:
        value: float | int = int(self.value) if self.parameter == "n_shared" else float(self.value)
        if self.parameter == "n_shared" and value != self.value:
            raise ConfigError(f"parameter 'synthetic.sweeps.*.values' has a non-integer K' = {self.value}")
        changes = {**dict(config.generator), self.parameter: value, "seed": self.seed(config)}
        try:
            return from_mapping(SyntheticGeneratorConfig, changes, "synthetic.generator")
        except ConfigError as exc:
            raise ConfigError(f"sweep value {self.parameter} = {self.value} is invalid: {exc}") from exc


@dataclass
class PointResult:
    """Scores of every scenario at one sweep point, plus what the run cost."""

    point: SweepPoint
    rows: list[dict[str, Any]]
    timings: dict[str, float]


def consensus_matrices(
    corpus: SyntheticCorpus, consensus: ConsensusConfig
) -> tuple[list[str], dict[str, sp.csr_matrix], dict[str, sp.csr_matrix]]:
    """Run the vocabulary-consensus stage on the generated organisations.

    Each organisation proposes term counts of its training documents; the merged
    vocabulary is re-indexed (most frequent first), so the learned topics must be aligned
    back to the generator's term order before TSS.
    """
    index = {t: i for i, t in enumerate(corpus.vocabulary)}
    counts = {}
    for name, org in corpus.organisations.items():
        totals = np.asarray(org.train.sum(axis=0)).ravel()
        counts[name] = {corpus.vocabulary[j]: int(totals[j]) for j in np.flatnonzero(totals)}
    proposals = {name: Site(name).propose(c, consensus) for name, c in counts.items()}
    vocabulary = agree_on_vocabulary(proposals, consensus).vocabulary["term"].tolist()
    columns = np.array([index[t] for t in vocabulary])
    train = {name: org.train[:, columns].tocsr() for name, org in corpus.organisations.items()}
    validation = {name: org.validation[:, columns].tocsr() for name, org in corpus.organisations.items()}
    return vocabulary, train, validation


def infer_theta(model: TrainedModel, bow: sp.csr_matrix, n_samples: int, seed: int) -> np.ndarray:
    """Document-topic mixtures of ``bow`` under ``model`` (chunked, seeded)."""
    device = resolve_device(model.config.device)
    module = model.to_model(device)
    generator = torch.Generator(device=device).manual_seed(seed)
    parts = []
    for start in range(0, bow.shape[0], INFERENCE_CHUNK):
        chunk = torch.from_numpy(bow[start : start + INFERENCE_CHUNK].toarray()).to(device)
        parts.append(module.sampled_doc_topic(chunk, n_samples, generator).double().cpu().numpy())
    return np.vstack(parts)


def run_point(config: SyntheticExperimentConfig, point: SweepPoint, progress: bool = True) -> PointResult:
    """Generate, train and score one sweep point; returns one row per scenario."""
    seed = point.seed(config)
    generator_config = point.generator_config(config)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    corpus = generate(generator_config)
    timings["generate_s"] = time.perf_counter() - start
    vocabulary, train, validation = consensus_matrices(corpus, config.consensus)
    train_config = config.train.replace(seed=seed, scenarios=config.sweep.scenarios or config.train.scenarios)
    start = time.perf_counter()
    models = train_scenarios(train, train_config, progress=progress)
    timings["train_s"] = time.perf_counter() - start

    start = time.perf_counter()
    orgs = list(corpus.organisations)
    all_validation = sp.vstack([validation[o] for o in orgs]).tocsr()
    theta_true = np.vstack([corpus.organisations[o].theta_validation for o in orgs])
    baseline_mean, baseline_std = tss_baseline(
        corpus.beta, generator_config.eta, config.baseline_draws, np.random.default_rng(derive_seed(seed, 4000))
    )
    rows = []
    for name, model in models.items():
        theta = infer_theta(model, all_validation, config.inference_samples, derive_seed(seed, 5000))
        beta = align_topics(model.to_model("cpu").topic_word().double().numpy(), vocabulary, corpus.vocabulary)
        rows.append(
            {
                "model": name,
                "scenario": model.scenario,
                "dss": dss(theta_true, theta),
                "tss": tss(corpus.beta, beta),
                "steps": len(model.history),
                "best_step": None if model.best_round is None else model.best_round + 1,
                "stopped_early": model.stopped_early,
                "final_validation_loss": next(
                    (r.validation_loss for r in reversed(model.history) if r.validation_loss is not None), None
                ),
            }
        )
    timings["score_s"] = time.perf_counter() - start
    common = {
        "parameter": point.parameter,
        "value": point.value,
        "repetition": point.repetition,
        "seed": seed,
        "n_shared": generator_config.n_shared,
        "eta": generator_config.eta,
        "alpha": generator_config.document_prior,
        "n_validation_documents": theta_true.shape[0],
        "vocabulary_size": len(vocabulary),
        "tss_baseline": baseline_mean,
        "tss_baseline_std": baseline_std,
    }
    rows = [{**common, **row} for row in rows]
    logger.info(
        "%s=%s rep %d: %s (baseline TSS %.2f)",
        point.parameter,
        point.value,
        point.repetition,
        ", ".join(f"{r['model']} DSS {r['dss']:.0f} TSS {r['tss']:.2f}" for r in rows),
        baseline_mean,
    )
    return PointResult(point, rows, timings)


def summarise_scenarios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (point, scenario): non-collaborative models averaged over organisations."""
    grouped: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault((row["parameter"], row["value"], row["repetition"], row["scenario"]), []).append(row)
    summary = []
    for (parameter, value, repetition, scenario), group in grouped.items():
        summary.append(
            {
                "parameter": parameter,
                "value": value,
                "repetition": repetition,
                "scenario": scenario,
                "dss": float(np.mean([r["dss"] for r in group])),
                "tss": float(np.mean([r["tss"] for r in group])),
                "tss_baseline": group[0]["tss_baseline"],
                "n_models": len(group),
            }
        )
    return summary
