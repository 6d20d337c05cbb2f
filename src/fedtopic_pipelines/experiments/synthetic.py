"""gFedNTM sec. 4.1: non-collaborative vs centralized vs federated ProdLDA on LDA data.

One *point* of a sweep: generate the organisations (``core.synthetic``), agree on a
vocabulary (the same consensus stage as real corpora), train the scenarios (each
organisation holds out ``train.validation_fraction`` of its training documents for early
stopping, 25 % in the paper), infer the
document-topic mixtures of every organisation's validation documents with every model,
and score them against the ground truth with DSS (eq. 5) and TSS (eq. 6). The ``synthetic``
block and its sweep points are parsed in ``experiments/config.py``.

Non-collaborative scores follow the authors' code (docs/synthetic.md): each
organisation's model infers *all* validation documents and is compared with *all* K
true topics; the reported value is the mean over organisations, the per-organisation
values are kept beside it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from fedtopic_pipelines.core.compute import resolve_device
from fedtopic_pipelines.core.config import ConsensusConfig
from fedtopic_pipelines.core.metrics.similarity import align_topics, dss, tss, tss_baseline
from fedtopic_pipelines.core.model_store import TrainedModel
from fedtopic_pipelines.core.seeds import derive_seed
from fedtopic_pipelines.core.site import Site
from fedtopic_pipelines.core.synthetic import SyntheticCorpus, generate
from fedtopic_pipelines.core.training import train_scenarios
from fedtopic_pipelines.core.vocab.consensus import agree_on_vocabulary
from fedtopic_pipelines.experiments.config import SweepPoint, SyntheticExperimentConfig

logger = logging.getLogger(__name__)

INFERENCE_CHUNK = 2048


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


def _score_model(
    name: str,
    model: TrainedModel,
    theta: np.ndarray,
    theta_true: np.ndarray,
    vocabulary: list[str],
    corpus: SyntheticCorpus,
) -> dict[str, Any]:
    """One model's row: DSS of its inferred mixtures, TSS of its topics (in the generator's term order), its run."""
    beta = align_topics(model.to_model("cpu").topic_word().double().numpy(), vocabulary, corpus.vocabulary)
    return {
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
        rows.append(_score_model(name, model, theta, theta_true, vocabulary, corpus))
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
