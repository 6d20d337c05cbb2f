"""Learning curves on the demo: pooled NPMI and topic diversity against document passes.

Training defaults (`train.batch_size`, `train.max_epochs`) are chosen from these curves
(docs/performance.md, "Training length"). Each setting trains the centralized and/or the
federated scenario once per seed, exactly as `kedro run` does (run_federation, the
project's parameters with overrides), and reads the model every `--every` passes through
run_federation's round observer. NPMI is gensim's c_npmi (top 10 words, sliding window
10) on the pooled preprocessed training texts: the figure the evaluate pipeline's exact
federated coherence gives. ``--variants`` compares ``train.model`` options (docs/batchnorm.md,
section 6).

    python bench/bench_learning_curve.py --batch-sizes 64 16 --passes 40 --every 4
    python bench/bench_learning_curve.py --batch-sizes 32 --variants "" "word_bias=true" "normalization=batch"
    python bench/bench_learning_curve.py --smoke
"""

from __future__ import annotations

import argparse
import csv
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from common import ROOT, demo_corpus, project_config
from gensim.corpora import Dictionary
from gensim.models.coherencemodel import CoherenceModel
from tqdm.auto import tqdm

logger = logging.getLogger("bench.learning_curve")


def demo_data(params: dict, project) -> tuple[Any, dict[str, Any], list[list[str]]]:
    """The demo's common vocabulary, each organisation's training matrix and the pooled
    training texts, through the same site steps as the pipelines (``demo_corpus``)."""
    vocabulary, bows, texts = demo_corpus(params, project)
    matrices = {org: bow.subset("train").matrix for org, bow in bows.items()}
    return vocabulary, matrices, [t for org in bows for t in texts[org]]


class Curve:
    """Observer: every ``every`` rounds, the model's pooled NPMI and topic diversity."""

    def __init__(
        self, terms: list[str], texts, dictionary, every: int, docs_per_round: int, total: int, pooled: int
    ) -> None:
        self.terms, self.texts, self.dictionary = terms, texts, dictionary
        self.every, self.docs_per_round, self.total, self.pooled = every, docs_per_round, total, pooled
        self.rows: list[dict[str, float]] = []
        self.train_seconds = 0.0
        self._last = time.perf_counter()

    def __call__(self, server) -> None:
        now = time.perf_counter()
        self.train_seconds += now - self._last
        done = server.next_round
        if done % self.every == 0 or done == self.total:
            model = server.strategy.model
            with torch.no_grad():
                beta = model.topic_word().cpu().numpy()
            order = np.argsort(-beta, axis=1, kind="stable")
            top10 = [[self.terms[j] for j in row[:10]] for row in order]
            top25 = {self.terms[j] for row in order for j in row[:25]}
            npmi = CoherenceModel(
                topics=top10, texts=self.texts, dictionary=self.dictionary, coherence="c_npmi", processes=1
            ).get_coherence()
            self.rows.append(
                {
                    "round": done,
                    "passes": done * self.docs_per_round / self.pooled,
                    "npmi": float(npmi),
                    "topic_diversity": len(top25) / (25 * len(order)),
                    "loss": float(server.history[-1].loss),
                    "train_seconds": self.train_seconds,
                }
            )
        self._last = time.perf_counter()


def model_overrides(variant: str) -> dict[str, Any]:
    """``'normalization=layer,word_bias=true'`` -> ``{"normalization": "layer", "word_bias": True}`` (YAML values)."""
    pairs = (item.split("=", 1) for item in variant.split(",") if item)
    return {key.strip(): yaml.safe_load(value) for key, value in pairs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 32, 16])
    parser.add_argument("--lrs", type=float, nargs="+", default=[None], help="learning rates (default: the project's)")
    parser.add_argument("--passes", type=float, default=40, help="document passes over the pooled training set")
    parser.add_argument("--every", type=float, default=4, help="evaluate every this many passes")
    parser.add_argument("--scenarios", nargs="+", default=["centralized"], choices=["centralized", "federated"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[42])
    parser.add_argument(
        "--variants",
        nargs="+",
        default=[""],
        help="train.model overrides, one per variant: 'normalization=layer,word_bias=true' ('' = as configured)",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--env", default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "data/08_reporting/bench_learning_curve.csv")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="tiny data and steps (seconds)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.smoke:
        args.env, args.batch_sizes, args.passes, args.every, args.scenarios = "smoke", [32], 2, 1, ["centralized"]
    torch.set_num_threads(args.threads)

    from fedtopic_pipelines.core.federated.engine import InProcessEngine
    from fedtopic_pipelines.core.federation import run_federation
    from fedtopic_pipelines.core.site import MemoryEndpoint, PooledEndpoint

    params, project = project_config(args.env)
    vocabulary, matrices, texts = demo_data(params, project)
    terms = vocabulary["term"].tolist()
    dictionary = Dictionary(texts)
    orgs = list(matrices)
    pooled = sum(m.shape[0] for m in matrices.values())
    logger.info("%d organisations, %d pooled training documents, %d terms", len(orgs), pooled, len(terms))
    rows: list[dict[str, Any]] = []
    settings = [
        (v, b, lr, s, seed)
        for v in args.variants
        for b in args.batch_sizes
        for lr in args.lrs
        for s in args.scenarios
        for seed in args.seeds
    ]
    for variant, batch, lr, scenario, seed in tqdm(settings, desc="settings"):
        docs_per_round = batch * len(orgs)  # federated: batch per organisation; centralized: L ghost batches
        total = max(1, round(args.passes * pooled / docs_per_round))
        every = max(1, round(args.every * pooled / docs_per_round))
        train = {"batch_size": batch, "max_steps": total, "max_epochs": None, "seed": seed, "scenarios": [scenario]}
        if lr is not None:
            train["optimizer"] = {"lr": lr}
        if variant:
            train["model"] = {**params["train"].get("model", {}), **model_overrides(variant)}
        _, config = project_config(args.env, {"train": train})
        curve = Curve(terms, texts, dictionary, every, docs_per_round, total, pooled)
        if scenario == "federated":
            endpoints, ghosts = [MemoryEndpoint(org, matrices[org]) for org in orgs], None
        else:
            endpoints, ghosts = [PooledEndpoint("server", matrices)], len(orgs)
        run_federation(
            InProcessEngine(endpoints),
            [e.name for e in endpoints],
            config.train,
            vocabulary=vocabulary,
            name=f"{scenario} b{batch}",
            scenario=scenario,
            trained_on=orgs,
            ghosts=ghosts,
            on_round_end=curve,
            progress=not args.no_progress,
        )
        for row in curve.rows:
            rows.append(
                {
                    "variant": variant or "configured",
                    "scenario": scenario,
                    "batch_size": batch,
                    "lr": lr or config.train.optimizer.lr,
                    "seed": seed,
                    **row,
                }
            )
        last = curve.rows[-1]
        logger.info(
            "%s %s batch %d lr %s seed %d: %d rounds, NPMI %.4f, TD %.3f, %.1f s training (%.0f documents/s)",
            variant or "configured",
            scenario,
            batch,
            lr,
            seed,
            total,
            last["npmi"],
            last["topic_diversity"],
            curve.train_seconds,
            total * docs_per_round / curve.train_seconds,
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    logger.info("wrote %s", args.out)
    for row in rows:
        logger.info(
            "%s %-11s b=%-3d lr=%.4f seed=%d passes=%5.1f NPMI=%.4f TD=%.3f loss=%.1f t=%.0fs",
            row["variant"], row["scenario"], row["batch_size"], row["lr"], row["seed"], row["passes"], row["npmi"],
            row["topic_diversity"], row["loss"], row["train_seconds"],
        )  # fmt: skip


if __name__ == "__main__":
    main()
