"""Learning curves on the demo: pooled NPMI, diversity, topic redundancy and macro-F1 against training length.

Training defaults (`train.batch_size`, `train.max_epochs`, `train.max_steps`) are chosen from
these curves (docs/performance.md, "Training length"). Each setting trains the centralized
and/or the federated scenario once per seed, exactly as `kedro run` does (run_federation, the
project's parameters with overrides, torch's deterministic algorithms), and reads the model
every `--every` passes (or `--every-steps` steps) through run_federation's round observer.

Every point is scored by the evaluate pipeline's own functions and parameters (``evaluate``
block), so the point at ``train.max_steps`` with ``train.seed`` is the run's metrics.json:

* pooled NPMI: each organisation counts the top ``evaluate.top_words`` words' co-occurrences
  in all its preprocessed texts (both splits, as ``evaluate_organisation`` reads the tokens
  table), the counts are summed, and ``coherence_by_model`` turns them into gensim's c_npmi;
* topic diversity of the top ``evaluate.diversity_top_words`` words;
* redundancy (``core/metrics/topics.py`` ``redundancy``): duplicate pairs (topics sharing at
  least ``evaluate.duplicate_shared_words`` top words; which ones in ``duplicate_pairs_detail``),
  the largest overlap and inverted RBO;
* macro-F1: each organisation's SVM macro-F1 on its held-out documents' topic proportions,
  averaged over the organisations where it is defined (``_held_out_scores``).

``--variants`` compares ``train.model`` options (docs/batchnorm.md, section 6), or any other
``train`` option by its path (``aggregation.rule=fedavg``). ``--topics-out`` writes every
point's top words (JSON).

``--penalty FORM:WEIGHT[:SHARPNESS]`` adds a topic-decorrelation penalty to every batch's
loss, a function of the decoder's weights alone (so federated = centralized still holds), to
measure whether one removes duplicate topics and at what cost (docs/results.md). The project
does not ship one: none did on the demo. FORM is one of ``PENALTIES``: the mean over topic
pairs of the squared cosine between the rows of the decoder's weights centred over the words
(``correlation``), of the positive part of the cosine squared between rows centred over the
topics, a word's background removed (``deviation``), or of the squared cosine between the
topics' sharpened word distributions softmax(SHARPNESS z), z the row standardised over the
words (``top_words``, SHARPNESS 2 by default: the mass on each topic's top words).

    python bench/bench_learning_curve.py --batch-sizes 64 16 --passes 40 --every 4
    python bench/bench_learning_curve.py --batch-sizes 32 --steps 5600 --every-steps 1400 \
        --scenarios federated centralized --seeds 42 7 1234
    python bench/bench_learning_curve.py --batch-sizes 32 --variants "" "word_bias=true" "normalization=batch"
    python bench/bench_learning_curve.py --batch-sizes 32 --steps 2800 --every-steps 2800 \
        --scenarios federated --variants "" --penalty top_words:10
    python bench/bench_learning_curve.py --smoke
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import yaml
from common import ROOT, demo_tables, project_config
from tqdm.auto import tqdm

from fedtopic_pipelines.core.config import WEIGHT_RULES, EvaluateConfig, from_mapping
from fedtopic_pipelines.core.config.aggregation import participants_per_round
from fedtopic_pipelines.core.metrics.scoring import PooledScorer
from fedtopic_pipelines.core.models.prodlda import ProdLDA, decoder_weight

logger = logging.getLogger("bench.learning_curve")


def demo_data(params: dict, project) -> tuple[Any, dict[str, Any], dict[str, Any], dict[str, list[list[str]]]]:
    """The demo's common vocabulary, each organisation's training matrix, its held-out split
    (bag of words with labels) and all its preprocessed texts (both splits: what the evaluate
    pipeline counts coherence on), through the same site steps as the pipelines."""
    from fedtopic_pipelines.core.site import run_sites

    tables = demo_tables(params)
    logging.getLogger("fedtopic_pipelines").setLevel(logging.WARNING)
    vocabulary, bows, texts = run_sites(tables, project.preprocess, project.consensus, texts="all")
    train = {org: bow.subset("train").matrix for org, bow in bows.items()}
    return vocabulary, train, {org: bow.subset("test") for org, bow in bows.items()}, texts


class Curve:
    """Observer: every ``every`` rounds (and at the last), the model's scores (:class:`PooledScorer`)."""

    def __init__(self, scorer: PooledScorer, every: int, docs_per_round: int, total: int, pooled: int) -> None:
        self.scorer = scorer
        self.every, self.docs_per_round, self.total, self.pooled = every, docs_per_round, total, pooled
        self.rows: list[dict[str, Any]] = []
        self.train_seconds = 0.0
        self._last = time.perf_counter()

    def __call__(self, server) -> None:
        now = time.perf_counter()
        self.train_seconds += now - self._last
        done = server.next_round
        if done % self.every == 0 or done == self.total:
            scores = self.scorer(server.strategy.model)
            self.rows.append(
                {
                    "round": done,
                    "passes": done * self.docs_per_round / self.pooled,
                    **scores,
                    "loss": float(server.history[-1].loss),
                    "train_seconds": self.train_seconds,
                }
            )
        self._last = time.perf_counter()


def documents_per_round(train, matrices: dict[str, Any]) -> float:
    """Training documents a round reads, over every organisation: one batch each under FedSGD (the
    centralized scenario's ghost batches alike); under a weights rule ``local_steps`` batches or
    ``local_epochs`` epochs of each sampled organisation (``client_fraction`` of them on average)."""
    if train.rule not in WEIGHT_RULES:
        return train.batch_size * len(matrices)
    aggregation = train.aggregation
    per_org = [
        aggregation.local_steps * train.batch_size if aggregation.local_steps else aggregation.local_epochs * m.shape[0]
        for m in matrices.values()
    ]
    return sum(per_org) * participants_per_round(len(matrices), aggregation.client_fraction) / len(matrices)


def overrides(variant: str, train: dict[str, Any], configured: dict[str, Any]) -> dict[str, Any]:
    """``train`` with a variant's settings over the ``configured`` blocks: ``'normalization=layer,
    word_bias=true'`` sets ``train.model`` options, a dotted key (``aggregation.rule=fedavg``)
    any ``train`` option; values are YAML."""
    train = {**train, "model": {**configured.get("model", {}), **train.get("model", {})}}
    for item in filter(None, variant.split(",")):
        key, value = (part.strip() for part in item.split("=", 1))
        *blocks, leaf = key.split(".") if "." in key else ["model", key]
        node, source = train, configured
        for block in blocks:
            source = (source or {}).get(block) or {}
            node[block] = {**source, **(node.get(block) or {})}
            node = node[block]
        node[leaf] = yaml.safe_load(value)
    return train


def _correlation(weight: torch.Tensor, sharpness: float) -> torch.Tensor:
    centred = weight - weight.mean(dim=1, keepdim=True)
    return _cosines(centred).pow(2).mean()


def _deviation(weight: torch.Tensor, sharpness: float) -> torch.Tensor:
    return _cosines(weight - weight.mean(dim=0, keepdim=True)).clamp(min=0).pow(2).mean()


def _top_words(weight: torch.Tensor, sharpness: float) -> torch.Tensor:
    z = (weight - weight.mean(dim=1, keepdim=True)) / weight.std(dim=1, keepdim=True)
    return _cosines(F.softmax(sharpness * z, dim=1)).pow(2).mean()


def _cosines(rows: torch.Tensor) -> torch.Tensor:
    """The cosines between every two rows (off the diagonal)."""
    unit = F.normalize(rows, dim=1)
    k = unit.shape[0]
    return (unit @ unit.t())[~torch.eye(k, dtype=torch.bool, device=unit.device)]


PENALTIES = {"correlation": _correlation, "deviation": _deviation, "top_words": _top_words}


def add_penalty(spec: str) -> None:
    """Every ProdLDA batch loss from here on carries WEIGHT x the penalty (see the module docstring)."""
    form, weight, *rest = spec.split(":")
    penalty, weight, sharpness = PENALTIES[form], float(weight), float(rest[0]) if rest else 2.0
    plain = ProdLDA._batch_loss

    def penalised(self, batch, draws, stats):
        loss = plain(self, batch, draws, stats)
        loss.loss = loss.loss + weight * penalty(decoder_weight(self.beta, self.config.decoder), sharpness)
        return loss

    ProdLDA._batch_loss = penalised


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 32, 16])
    parser.add_argument("--lrs", type=float, nargs="+", default=[None], help="learning rates (default: the project's)")
    parser.add_argument("--passes", type=float, default=40, help="document passes over the pooled training set")
    parser.add_argument("--every", type=float, default=4, help="evaluate every this many passes")
    parser.add_argument("--steps", type=int, default=None, help="train this many steps (instead of --passes)")
    parser.add_argument("--every-steps", type=int, default=None, help="evaluate every this many steps")
    parser.add_argument("--scenarios", nargs="+", default=["centralized"], choices=["centralized", "federated"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[42])
    parser.add_argument(
        "--variants",
        nargs="+",
        default=[""],
        help="overrides, one per variant: 'normalization=layer,word_bias=true' (train.model), "
        "'aggregation.rule=fedavg' (train); '' = as configured",
    )
    parser.add_argument(
        "--penalty", default=None, help=f"FORM:WEIGHT[:SHARPNESS], FORM one of {', '.join(PENALTIES)} (docstring)"
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--env", default=None)
    parser.add_argument("--out", type=Path, default=ROOT / "data/08_reporting/bench_learning_curve.csv")
    parser.add_argument("--topics-out", type=Path, default=None, help="every point's top words (JSON)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="tiny data and steps (seconds)")
    args = parser.parse_args()
    if args.smoke:
        args.env, args.batch_sizes, args.passes, args.every, args.scenarios = "smoke", [32], 2, 1, ["centralized"]
    return args


def run_setting(setting: tuple, args, params: dict, data: tuple, scorer: PooledScorer) -> list[dict]:
    """Train one (variant, batch, lr, scenario, seed) as ``train_scenarios`` does, scored along the way."""
    from fedtopic_pipelines.core.compute import deterministic_algorithms
    from fedtopic_pipelines.core.federated.engine import InProcessEngine
    from fedtopic_pipelines.core.federation import run_federation
    from fedtopic_pipelines.core.site import MemoryEndpoint, PooledEndpoint

    variant, batch, lr, scenario, seed = setting
    vocabulary, matrices = data
    orgs, pooled = list(matrices), sum(m.shape[0] for m in matrices.values())
    train = {"batch_size": batch, "max_steps": 1, "max_epochs": None, "seed": seed, "scenarios": [scenario]}
    if lr is not None:
        train["optimizer"] = {"lr": lr}
    if variant:
        train = overrides(variant, train, params["train"])
    configured = project_config(args.env, {"train": train})[1].train
    docs_per_round = documents_per_round(configured, matrices)
    total = args.steps or max(1, round(args.passes * pooled / docs_per_round))
    every = args.every_steps or max(1, round(args.every * pooled / docs_per_round))
    config = configured.replace(max_steps=total)
    curve = Curve(scorer, every, docs_per_round, total, pooled)
    if scenario == "federated":
        endpoints, ghosts = [MemoryEndpoint(org, matrices[org]) for org in orgs], None
    else:
        endpoints, ghosts = [PooledEndpoint("server", matrices)], len(orgs)
    with deterministic_algorithms():
        run_federation(
            InProcessEngine(endpoints),
            [e.name for e in endpoints],
            config,
            vocabulary=vocabulary,
            name=f"{scenario} b{batch}",
            scenario=scenario,
            trained_on=orgs,
            ghosts=ghosts,
            on_round_end=curve,
            progress=not args.no_progress,
        )
    facts = {"variant": variant or "configured", "scenario": scenario, "batch_size": batch}
    facts |= {"lr": lr or config.optimizer.lr, "seed": seed}
    last = curve.rows[-1]
    logger.info(
        "%s %s batch %d lr %s seed %d: %d rounds, NPMI %.4f, TD %.3f, %d duplicate pairs, %.1f s training",
        facts["variant"], scenario, batch, lr, seed, total, last["npmi"], last["topic_diversity"],
        last["duplicate_topic_pairs"], curve.train_seconds,
    )  # fmt: skip
    return [{**facts, **row} for row in curve.rows]


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(args.threads)
    if args.penalty:
        add_penalty(args.penalty)
    params, project = project_config(args.env)
    logger.setLevel(logging.INFO)  # Kedro's logging configuration (loaded above) leaves unnamed loggers at WARNING
    vocabulary, matrices, tests, texts = demo_data(params, project)
    scorer = PooledScorer(
        vocabulary["term"].tolist(), tests, texts, from_mapping(EvaluateConfig, params["evaluate"], "evaluate")
    )
    pooled = sum(m.shape[0] for m in matrices.values())
    logger.info("%d organisations, %d pooled training documents, %d terms", len(matrices), pooled, len(vocabulary))
    settings = [
        (v, b, lr, s, seed)
        for v in args.variants
        for b in args.batch_sizes
        for lr in args.lrs
        for s in args.scenarios
        for seed in args.seeds
    ]
    rows: list[dict[str, Any]] = []
    for setting in tqdm(settings, desc="settings"):
        rows += run_setting(setting, args, params, (vocabulary, matrices), scorer)
        write(rows, args)  # after every setting: a long sweep cut short keeps what finished
    for row in rows:
        logger.info(
            "%s %-11s b=%-3d lr=%.4f seed=%d round=%5d passes=%5.1f NPMI=%.4f TD=%.3f dup=%d overlap=%d "
            "iRBO=%.3f F1=%.3f loss=%.1f t=%.0fs %s",
            row["variant"], row["scenario"], row["batch_size"], row["lr"], row["seed"], row["round"], row["passes"],
            row["npmi"], row["topic_diversity"], row["duplicate_topic_pairs"], row["largest_topic_overlap"],
            row["inverted_rbo"], row["macro_f1"], row["loss"], row["train_seconds"], row["duplicate_pairs_detail"],
        )  # fmt: skip


def write(rows: list[dict[str, Any]], args) -> None:
    """The CSV (one row per point, without the top words) and, when asked, the top words as JSON."""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[k for k in rows[0] if k != "topics"])
        writer.writeheader()
        writer.writerows({k: v for k, v in row.items() if k != "topics"} for row in rows)
    logger.info("wrote %s", args.out)
    if args.topics_out is not None:
        args.topics_out.parent.mkdir(parents=True, exist_ok=True)
        args.topics_out.write_text(json.dumps(rows, indent=1))
        logger.info("wrote %s", args.topics_out)


if __name__ == "__main__":
    main()
