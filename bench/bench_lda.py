"""Benchmark: LDA (family ``lda``) through the federation engine, against gensim's batch ``LdaModel``
on the pooled documents: the topics' distance, held-out completion perplexity and wall time.

On one document-term matrix (``--corpus``: SMS Spam or Rotten Tomatoes, vectorised as
``bench_nmf.py`` does, split into ``--clients`` random shards; or the demo's organisations), with
20 % of each organisation's documents held out:

* **federated**: ``run_federation`` with the in-process engine, one endpoint per organisation
  (gensim's E-step at each, its M-step on the summed counts), every update validated;
* **one organisation**: the same engine with every document at one organisation (the family's
  centralized scenario);
* **gensim**: ``LdaModel(update_every=0, eval_every=None)`` on the pooled documents, the same
  seed, passes, iterations and priors (the baseline a user would otherwise run; without its
  default per-pass bound, which the family does not compute).

Printed: the largest difference of the topic-word probabilities to gensim's (and gensim's own
against a run whose E-steps start from other draws: the spread the federation is within),
completion perplexity (docs/evaluation.md) of each on the held-out documents, and seconds, timed
in alternated pairs (A B, then B A) with the median of the pairwise ratios. ``--threads`` BLAS
threads for all (threadpoolctl); the load average is printed before and after.

    .venv/bin/python bench/bench_lda.py --corpus spam
    .venv/bin/python bench/bench_lda.py --smoke
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))


def config(args):
    from fedtopic_pipelines.core.config import TrainConfig

    model = {"family": "lda", "n_topics": args.topics, "iterations": args.iterations}
    return TrainConfig.from_params(
        {"model": model, "max_steps": args.passes, "seed": args.seed, "device": "cpu", "scenarios": ["federated"]}
    )


def federated_fit(parts, args):
    """(seconds, the trained model) of one federation over ``parts`` through the engine."""
    import numpy as np
    import pandas as pd

    from fedtopic_pipelines.core.federated.engine import InProcessEngine
    from fedtopic_pipelines.core.federation import run_federation
    from fedtopic_pipelines.core.site import MemoryEndpoint

    names = [f"org{i}" for i in range(len(parts))]
    counts = np.asarray(sum(p.sum(axis=0) for p in parts)).ravel()
    words = pd.DataFrame({"term": [f"t{j}" for j in range(counts.size)], "frequency": counts})
    started = time.perf_counter()
    engine = InProcessEngine([MemoryEndpoint(n, p) for n, p in zip(names, parts, strict=True)])
    result = run_federation(engine, names, config(args), vocabulary=words, progress=False)
    return time.perf_counter() - started, result.model.to_model()


def gensim_fit(pooled, args, draws: int | None = None):
    """(seconds, model) of gensim's batch LDA on the pooled documents; ``draws``: its E-steps'
    starting gammas from another stream (the same initial topics)."""
    from gensim.models import LdaModel

    from fedtopic_pipelines.core.models.lda import as_corpus

    corpus = as_corpus(pooled)
    id2word = {j: f"t{j}" for j in range(pooled.shape[1])}
    # eval_every=None: gensim's default (10) also computes the variational bound on each pass's
    # last chunk, which the family does not; timed without it, the two do the same work
    settings = {"num_topics": args.topics, "iterations": args.iterations, "random_state": args.seed, "eval_every": None}
    started = time.perf_counter()
    if draws is None:
        model = LdaModel(corpus, id2word=id2word, passes=args.passes, update_every=0, **settings)
    else:
        import numpy as np

        model = LdaModel(id2word=id2word, **settings)
        model.random_state = np.random.RandomState(draws)
        model.update(corpus, passes=args.passes, update_every=0)
    return time.perf_counter() - started, model


def scored_as_family(model, args):
    """gensim's trained topics in the family's model, so that one completion-perplexity code and
    one inference (gensim's own, from the same starting draws) score all three."""
    import numpy as np
    import torch

    from fedtopic_pipelines.core.models.lda import LDAModel

    scored = LDAModel(model.num_terms, config(args).model, args.seed)
    with torch.no_grad():
        scored.lam.copy_(torch.from_numpy(np.asarray(model.state.get_lambda(), dtype=np.float32)))
    return scored


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=("demo", "spam", "rt"), default="spam")
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--iterations", type=int, default=50, help="gensim's per-document E-step bound")
    parser.add_argument("--clients", type=int, default=10, help="spam, rt: random equal shards")
    parser.add_argument("--seed", type=int, default=0, help="the run's seed (the initial topics)")
    parser.add_argument("--repeats", type=int, default=3, help="alternated timed fits of each")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--smoke", action="store_true", help="the demo's smoke corpus, 5 topics, 3 passes, 1 pair")
    args = parser.parse_args()
    if args.smoke:
        args.corpus, args.topics, args.passes, args.repeats = "demo", 5, 3, 1
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, str(args.threads))
    logging.basicConfig(level=logging.WARNING)
    import numpy as np
    import scipy.sparse as sp
    from threadpoolctl import threadpool_limits

    from bench.bench_nmf import load_corpus
    from fedtopic_pipelines.core.metrics.perplexity import completion_perplexity

    corpus = load_corpus(args.corpus, args.smoke, args.clients, 42)
    logging.getLogger("fedtopic_pipelines").setLevel(logging.WARNING)
    rng = np.random.default_rng(42)
    parts, tests = [], []
    for rows in corpus.organisations.values():
        rows = np.asarray(rows)
        held = rng.random(len(rows)) < 0.2
        parts.append(corpus.matrix[rows[~held]].tocsr())
        tests.append(corpus.matrix[rows[held]].tocsr())
    pooled, held_out = sp.vstack(parts).tocsr(), sp.vstack(tests).tocsr()
    print(f"corpus: {corpus.source}")
    print(
        f"matrix: {pooled.shape[0]} training and {held_out.shape[0]} held-out documents x {pooled.shape[1]} terms, "
        f"{args.topics} topics, {args.passes} passes, {len(parts)} organisations, {args.threads} BLAS thread(s)"
    )
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    out: dict = {"corpus": args.corpus, "shape": list(pooled.shape), "topics": args.topics, "passes": args.passes}
    with threadpool_limits(args.threads):
        seconds = {"federated": [], "one_organisation": [], "gensim": []}
        ratios = {"federated": [], "one_organisation": []}
        for i in range(args.repeats):
            order = ["federated", "one_organisation", "gensim"]
            if i % 2:
                order.reverse()
            pair, models = {}, {}
            for which in order:
                if which == "gensim":
                    pair[which], models[which] = gensim_fit(pooled, args)
                else:
                    pair[which], models[which] = federated_fit(parts if which == "federated" else [pooled], args)
            for which in seconds:
                seconds[which].append(pair[which])
            for which in ratios:
                ratios[which].append(pair[which] / pair["gensim"])
        reference = models["gensim"].get_topics().astype(np.float64)  # before it is scored as the family's
        distance = {
            which: float(np.abs(models[which].topic_word().double().numpy() - reference).max()) for which in ratios
        }
        spread = max(
            float(np.abs(gensim_fit(pooled, args, draws)[1].get_topics() - reference).max()) for draws in (99, 100)
        )
        models["gensim"] = scored_as_family(models["gensim"], args)
        perplexity = {which: completion_perplexity(models[which], held_out, 0) for which in models}
    print(
        f"topics against gensim's (max |d p(w|k)|): federated {distance['federated']:.2e}, one organisation "
        f"{distance['one_organisation']:.2e}; gensim with other E-step draws {spread:.2e}"
    )
    print("held-out completion perplexity: " + ", ".join(f"{which} {value:.1f}" for which, value in perplexity.items()))
    for which in ratios:
        print(
            f"seconds ({args.repeats} alternated sets): {which} {statistics.median(seconds[which]):.2f} s, gensim "
            f"{statistics.median(seconds['gensim']):.2f} s, ratio (median of pairs) "
            f"{statistics.median(ratios[which]):.2f}x [{min(ratios[which]):.2f}-{max(ratios[which]):.2f}]"
        )
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    out.update(distance=distance, spread=spread, perplexity=perplexity, seconds=seconds, ratios=ratios)
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
