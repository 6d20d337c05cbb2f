"""Benchmark: which vocabulary floors (``vocab_consensus.min_organisations`` k and
``vocab_consensus.min_total_count`` m) give the best centralized model on the demo.

The demo corpus goes through the pipelines' site steps once (ingest with the environment's
caps, preprocess, propose); then, for every floor setting, the server's consensus
(``agree_on_vocabulary``), each organisation's vectorisation, and a centralized ProdLDA
trained for a fixed number of steps per seed. Each model is scored by:

* pooled NPMI: gensim ``CoherenceModel`` ``c_npmi`` of the top 10 words on the pooled
  preprocessed training texts of every organisation (the virtual pooled corpus, the same
  texts for every setting, so the scores compare);
* topic diversity: unique share of the top-25 words (Dieng et al., 2020);
* near-duplicate topics: topics whose top 10 words share at least ``--overlap`` words with
  another topic's top 10;
* one-organisation top words: share of all topics' top-10 words that only one organisation
  proposed.

Prints a Markdown table (mean and standard deviation over seeds) for docs/vocabulary.md.
``--smoke`` runs the same code on the smoke environment for a few steps (``make test``).

    .venv/bin/python bench/bench_vocab_floors.py [--steps 1000] [--seeds 42 43] \
        [--floors 1:0 2:0 1:20 2:20 1:50 2:50] [--env ENV] [--threads 1] [--smoke]
"""

from __future__ import annotations

import argparse
import itertools
import logging
import platform
import statistics
import time

import torch
from common import DEMO_WHEEL, project_config

from fedtopic_pipelines.core.config import IngestDemoConfig, from_mapping
from fedtopic_pipelines.core.metrics.topics import top_words, topic_diversity
from fedtopic_pipelines.core.shards import iter_frames
from fedtopic_pipelines.core.site import Site
from fedtopic_pipelines.core.text.corpus import assign_by_label, partition_corpus
from fedtopic_pipelines.core.text.demo import read_demo_wheel
from fedtopic_pipelines.core.training import train_scenarios
from fedtopic_pipelines.core.vocab.consensus import agree_on_vocabulary, merge_vocabularies

logger = logging.getLogger("bench")


def prepare_sites(params: dict, project) -> tuple[dict, dict, dict]:
    """Each organisation's tokens (a ShardedTable), its proposal, and the pooled training texts."""
    demo = from_mapping(IngestDemoConfig, params["ingest_demo"], "ingest_demo")
    raw = read_demo_wheel(DEMO_WHEEL)
    orgs = list(params["organisations"])
    organisation = assign_by_label(raw.documents["label"], demo.organisations)
    tables, _ = partition_corpus(raw, organisation, orgs, "demo", demo.max_documents, demo.seed)
    tokens, proposals, texts = {}, {}, {}
    for org, table in tables.items():
        site = Site(org)
        result = site.preprocess(table, project.preprocess)
        tokens[org] = result.tokens
        proposals[org] = site.propose(result.term_counts, project.consensus)
        texts[org] = [
            t.split()
            for frame in iter_frames(result.tokens)
            for t, s in zip(frame["tokens"], frame["split"], strict=True)
            if s == "train"
        ]
    return tokens, proposals, texts


def near_duplicates(topics: list[list[str]], overlap: int) -> int:
    """Topics whose top words share at least ``overlap`` words with another topic's."""
    sets = [set(t) for t in topics]
    return sum(any(len(a & b) >= overlap for j, b in enumerate(sets) if j != i) for i, a in enumerate(sets))


def npmi(topics: list[list[str]], texts: list[list[str]], dictionary) -> float:
    from gensim.models.coherencemodel import CoherenceModel

    model = CoherenceModel(
        topics=topics, texts=texts, dictionary=dictionary, coherence="c_npmi", topn=len(topics[0]), processes=1
    )
    return float(model.get_coherence())


def mean_sd(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000, help="centralized optimizer steps per model")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43])
    parser.add_argument("--floors", nargs="+", default=["1:0", "2:0", "1:20", "2:20", "1:50", "2:50"], help="k:m")
    parser.add_argument("--overlap", type=int, default=5, help="shared top-10 words that make a near-duplicate")
    parser.add_argument("--env", default=None, help="Kedro environment (default: base)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steady on a shared machine)")
    parser.add_argument("--smoke", action="store_true", help="smoke environment, 3 steps, one seed, two settings")
    args = parser.parse_args()
    if args.smoke:
        args.env, args.steps, args.seeds, args.floors = "smoke", 3, [42], ["1:0", "2:5"]
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    params, project = project_config(args.env)
    from gensim.corpora import Dictionary

    start = time.perf_counter()
    tokens, proposals, texts = prepare_sites(params, project)
    pooled = [doc for org in texts for doc in texts[org]]
    dictionary = Dictionary(pooled)
    single = set(merge_vocabularies(proposals, project.consensus.merge).query("n_organisations == 1")["term"])
    logger.warning("prepared %d organisations in %.0f s", len(tokens), time.perf_counter() - start)
    rows = []
    for floor in args.floors:
        k, m = (int(x) for x in floor.split(":"))
        consensus = agree_on_vocabulary(proposals, project.consensus.replace(min_organisations=k, min_total_count=m))
        terms = consensus.vocabulary["term"].tolist()
        matrices = {org: Site(org).vectorise(tokens[org], terms)[0].subset("train").matrix for org in tokens}
        train_tokens = sum(int(mx.sum()) for mx in matrices.values())
        scores: dict[str, list[float]] = {"npmi": [], "diversity": [], "duplicates": [], "single": [], "seconds": []}
        example: list[list[str]] = []
        for seed in args.seeds:
            config = project.train.replace(scenarios=("centralized",), max_steps=args.steps, max_epochs=None, seed=seed)
            begin = time.perf_counter()
            model = train_scenarios(matrices, config, progress=False, vocabulary=consensus.vocabulary)["centralized"]
            scores["seconds"].append(time.perf_counter() - begin)
            beta = model.to_model().topic_word().numpy()
            top10, top25 = top_words(beta, terms, 10), top_words(beta, terms, 25)
            scores["npmi"].append(npmi(top10, pooled, dictionary))
            scores["diversity"].append(topic_diversity(top25))
            scores["duplicates"].append(near_duplicates(top10, args.overlap))
            scores["single"].append(sum(w in single for w in itertools.chain(*top10)) / sum(map(len, top10)))
            example = example or top10
            logger.warning(
                "k=%d m=%d seed %d: npmi %.3f (%.0f s)", k, m, seed, scores["npmi"][-1], scores["seconds"][-1]
            )
        removed = consensus.report["removed_by_floors"]
        rows.append((k, m, len(terms), removed, train_tokens, scores))
        for topic in example:
            logger.warning("  k=%d m=%d: %s", k, m, " ".join(topic))
    print(
        f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} thread(s); "
        f"centralized ProdLDA, {args.steps} steps of {len(tokens)} x {project.train.batch_size} documents, "
        f"seeds {args.seeds}; near-duplicate = >= {args.overlap} shared top-10 words; "
        f"{len(pooled)} pooled training texts"
    )
    print()
    print(
        "| k (min_organisations) | m (min_total_count) | terms | removed by k | removed by m | training tokens "
        "| pooled NPMI | diversity (top 25) | near-duplicate topics | one-organisation top words | s per model |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for k, m, size, removed, train_tokens, s in rows:
        print(
            f"| {k} | {m} | {size} | {removed['min_organisations']['terms']} | {removed['min_total_count']['terms']} "
            f"| {train_tokens} | {mean_sd(s['npmi'])} | {mean_sd(s['diversity'])} | {mean_sd(s['duplicates'])} "
            f"| {mean_sd(s['single'])} | {statistics.mean(s['seconds']):.0f} |"
        )
    for table in tokens.values():
        table.discard()


if __name__ == "__main__":
    main()
