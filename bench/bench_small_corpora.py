"""Vocabulary floors and training length on small corpora: what the defaults give, what works.

Reads each organisation's raw documents as ingested by a `kedro run --env=<env>` (the folders
of data/01_raw/organisations/, copied aside with ``--raw``), then goes through the same site
steps as the pipelines (preprocess, propose, the keyed vocabulary exchange under the
environment's ``privacy`` block, vectorise) with parameter overrides:

* ``vocab``: per setting, the common vocabulary's size, what the floors removed, the smallest
  organisation's vocabulary tokens; no training.
* ``curve``: per setting, trains the federated and centralized scenarios exactly as `kedro run`
  does (run_federation) and scores the model every ``--every`` pooled passes with
  ``core.metrics.scoring.PooledScorer`` (the evaluate pipeline's pooled NPMI from summed counts, here
  over the training texts; diversity, duplicate topic pairs, largest overlap, inverted RBO,
  macro-F1).

A setting is ``key=value`` pairs, comma-separated: ``min_df`` (an int or a share), ``max_df``,
``top_n``, ``min_count``, ``min_total_count``, ``min_organisations``, ``vocab_k``, ``batch``.

    python bench/make_small_corpora.py
    python bench/bench_small_corpora.py vocab --env news500 --raw runs/news500_raw \
        --settings "" "min_df=2,min_count=2,min_total_count=10"
    python bench/bench_small_corpora.py curve --env news500 --raw runs/news500_raw \
        --settings "min_df=2" --passes 320 --every 20
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from bench_learning_curve import Curve
from common import ROOT, corpus_tables, project_config

from fedtopic_pipelines.core.config import EvaluateConfig, from_mapping
from fedtopic_pipelines.core.metrics.scoring import PooledScorer

logger = logging.getLogger("bench.small_corpora")
KEYS = {
    "min_df": ("preprocess", "min_df"),
    "max_df": ("preprocess", "max_df"),
    "top_n": ("vocab_consensus", "top_n"),
    "min_count": ("vocab_consensus", "min_count"),
    "min_total_count": ("vocab_consensus", "min_total_count"),
    "min_organisations": ("vocab_consensus", "min_organisations"),
    "min_terms": ("vocab_consensus", "min_terms"),
    "vocab_k": ("privacy", "vocab_k"),
    "batch": ("train", "batch_size"),
}


def overrides(setting: str) -> dict[str, dict[str, Any]]:
    """``'min_df=2,top_n=500'`` -> ``{"preprocess": {"min_df": 2}, "vocab_consensus": {"top_n": 500}}``."""
    out: dict[str, dict[str, Any]] = {}
    for item in filter(None, setting.split(",")):
        key, value = item.split("=", 1)
        block, name = KEYS[key.strip()]
        out.setdefault(block, {})[name] = yaml.safe_load(value)
    return out


def site_steps(env: str, raw: Path | None, setting: str):
    """The chain's site steps with the setting's overrides: vocabulary, bags of words, texts, config."""
    from fedtopic_pipelines.core.site import run_sites

    params, project = project_config(env, overrides(setting))
    # without a folder, the demo's ingestion (the smoke environment): no kedro run needed first
    tables = corpus_tables(params, raw)
    logging.getLogger("fedtopic_pipelines").setLevel(logging.ERROR)
    vocabulary, bows, texts = run_sites(
        tables, project.preprocess, project.consensus, "train", project.blocks.get("privacy")
    )
    return vocabulary, bows, texts, params, project


def vocab_row(env: str, raw: Path | None, setting: str) -> dict[str, Any]:
    """The vocabulary a setting gives, and the training tokens it leaves each organisation."""
    try:
        vocabulary, bows, texts, _, _ = site_steps(env, raw, setting)
    except Exception as error:  # a stop is a result here: its message is recorded
        return {"setting": setting or "default", "error": f"{type(error).__name__}: {error}"[:600]}
    train = {org: bow.subset("train").matrix for org, bow in bows.items()}
    return {
        "setting": setting or "default",
        "terms": len(vocabulary),
        "training_docs": {org: m.shape[0] for org, m in train.items()},
        "vocab_tokens": {org: int(m.sum()) for org, m in train.items()},
        "all_tokens": {org: sum(len(t) for t in texts[org]) for org in texts},
    }


def curve(env: str, raw: Path | None, setting: str, scenario: str, passes: float, every: float) -> list[dict[str, Any]]:
    """Train one scenario for ``passes`` pooled passes and score it every ``every`` passes."""
    from fedtopic_pipelines.core.federated.engine import InProcessEngine
    from fedtopic_pipelines.core.federation import run_federation
    from fedtopic_pipelines.core.site import MemoryEndpoint, PooledEndpoint
    from fedtopic_pipelines.parameters import with_privacy

    vocabulary, bows, texts, params, _ = site_steps(env, raw, setting)
    matrices = {org: bow.subset("train").matrix for org, bow in bows.items()}
    orgs = list(matrices)
    pooled = sum(m.shape[0] for m in matrices.values())
    batch = overrides(setting).get("train", {}).get("batch_size", params["train"]["batch_size"])
    sizes = [m.shape[0] for m in matrices.values()]  # a federated batch is capped by the organisation's documents
    docs_per_round = sum(min(batch, n) for n in sizes) if scenario == "federated" else batch * len(orgs)
    total = max(1, round(passes * pooled / docs_per_round))
    train = {"max_steps": total, "max_epochs": None, "scenarios": [scenario]}
    _, config = project_config(env, {**overrides(setting), "train": {**overrides(setting).get("train", {}), **train}})
    evaluate = from_mapping(EvaluateConfig, params["evaluate"], "evaluate")
    tests = {org: bow.subset("test") for org, bow in bows.items()}
    scorer = PooledScorer(vocabulary["term"].tolist(), tests, texts, evaluate)  # the evaluate pipeline's scores
    scores = Curve(scorer, max(1, round(every * pooled / docs_per_round)), docs_per_round, total, pooled)
    if scenario == "federated":
        endpoints, ghosts = [MemoryEndpoint(org, matrices[org]) for org in orgs], None
    else:
        endpoints, ghosts = [PooledEndpoint("server", matrices)], len(orgs)
    train_config = with_privacy(config.train, config.blocks.get("privacy"), "train")  # as the pipeline trains
    run_federation(InProcessEngine(endpoints), [e.name for e in endpoints], train_config, vocabulary=vocabulary,
                   name=scenario, scenario=scenario, trained_on=orgs, ghosts=ghosts, on_round_end=scores,
                   progress=False)  # fmt: skip
    logger.info("%s %s: %d terms, %d pooled training documents, %d rounds", setting or "default", scenario,
                len(vocabulary), pooled, total)  # fmt: skip
    facts = {"setting": setting or "default", "scenario": scenario, "terms": len(vocabulary)}
    # the JSON lines keep this sweep's column name for the pairs
    renamed = ({"duplicate_pairs" if k == "duplicate_topic_pairs" else k: v for k, v in r.items()} for r in scores.rows)
    return [{**facts, **row} for row in renamed]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["vocab", "curve"])
    parser.add_argument("--env", default="smoke")
    parser.add_argument(
        "--raw", type=Path, default=None, help="folder of the organisations' raw Parquet folders (none: the demo's)"
    )
    parser.add_argument("--settings", nargs="+", default=[""])
    parser.add_argument("--scenarios", nargs="+", default=["federated", "centralized"])
    parser.add_argument("--passes", type=float, default=320)
    parser.add_argument("--every", type=float, default=20)
    parser.add_argument("--out", type=Path, default=None, help="JSON lines appended here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.set_num_threads(1)
    logging.getLogger("bench").setLevel(logging.INFO)  # kedro's bootstrap reconfigures logging
    out = args.out or ROOT / f"runs/bench_{args.env}_{args.mode}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    for setting in args.settings:
        if args.mode == "vocab":
            rows = [vocab_row(args.env, args.raw, setting)]
        else:
            rows = [r for s in args.scenarios for r in curve(args.env, args.raw, setting, s, args.passes, args.every)]
        with out.open("a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
                logger.info("%s", {k: v for k, v in row.items() if k != "topics"})


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
