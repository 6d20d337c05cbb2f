"""Screen normalisation options for federated = pooled training on non-IID organisations.

One synthetic point (``--env``, K' = ``--n-shared``, repetition ``--repetition``), several
trained models, each scored by DSS and TSS against the ground truth, plus collapse checks:
topic diversity (share of distinct terms among the top 25 of every learned topic), how many
of the K true topics are the best match of at least one learned topic, how many true topics
some learned topic matches with a Bhattacharyya coefficient >= 0.5, and the effective number
of topics in use (exp of the entropy of the mean inferred mixture over validation documents).

Variants, ``<scenario>:<normalization>``:

* ``federated:<n>`` and ``centralized:<n>``: the engine's scenarios (``core/training.py``),
  with ``train.model.normalization = <n>``;
* ``sync:batch``: what FedSGD with *synchronised* BatchNorm would compute. Every step takes
  each organisation's next batch from exactly the federated client's stream and normalises
  their concatenation as ONE batch; that is the function a federation that exchanges per-unit
  sums before each BatchNorm layer computes (docs/batchnorm.md), run without the exchange.

    .venv/bin/python bench/screen_normalisation.py --env reduced --repetition 0 federated:layer centralized:layer
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import numpy as np
import scipy.sparse as sp
from common import project_config, train_synchronised

from fedtopic_pipelines.core.metrics.similarity import align_topics, dss, tss
from fedtopic_pipelines.core.seeds import derive_seed
from fedtopic_pipelines.core.synthetic import generate
from fedtopic_pipelines.core.training import train_scenarios
from fedtopic_pipelines.experiments.config import SweepPoint
from fedtopic_pipelines.experiments.synthetic import consensus_matrices, infer_theta

logger = logging.getLogger("screen_normalisation")
RECOVERED = 0.5  # a true topic counts as recovered when some learned topic's Bhattacharyya coefficient reaches this


def topic_diversity(beta: np.ndarray, top: int = 25) -> float:
    """Share of distinct terms among the top ``top`` terms of every topic (1: no overlap)."""
    tops = np.argsort(-beta, axis=1)[:, :top]
    return len(np.unique(tops)) / tops.size


def effective_topics(theta: np.ndarray) -> float:
    """exp of the entropy of the mean mixture: how many topics the documents use, in effect."""
    usage = theta.mean(axis=0)
    return float(np.exp(-(usage * np.log(np.maximum(usage, 1e-300))).sum()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variants", nargs="+", help="<federated|centralized|sync>:<batch|layer|none>")
    parser.add_argument("--env", default="reduced")
    parser.add_argument("--n-shared", type=int, default=10)
    parser.add_argument("--repetition", type=int, default=0)
    parser.add_argument("--max-epochs", type=int, default=None, help="override train.max_epochs (screening)")
    parser.add_argument("--smoke", action="store_true", help="smoke environment, K' = 2")
    args = parser.parse_args()
    if args.smoke:
        args.env, args.n_shared = "smoke", 2
    project_config(args.env)  # bootstraps the project, which configures logging; then ours
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logging.getLogger("fedtopic_pipelines").setLevel(logging.WARNING)
    logger.info(
        "| repetition | variant | steps (best) | DSS | TSS | topic diversity | true topics matched "
        f"| true topics recovered (BC >= {RECOVERED}) | effective topics in use | train s |"
    )
    logger.info("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    truth_logged = False
    for variant in args.variants:
        scenario, normalization = variant.split(":")
        overrides = {"synthetic": {"train": {"model": {"normalization": normalization}}}}
        if args.max_epochs is not None:
            overrides["synthetic"]["train"]["max_epochs"] = args.max_epochs
        config = project_config(args.env, overrides)[1].synthetic
        point = SweepPoint("n_shared", args.n_shared, args.repetition)
        seed = point.seed(config)
        corpus = generate(point.generator_config(config))
        vocabulary, train, validation = consensus_matrices(corpus, config.consensus)
        start = time.perf_counter()
        if scenario == "sync":
            model = train_synchronised(train, config.train.replace(seed=seed), len(vocabulary))
        else:
            train_config = config.train.replace(seed=seed, scenarios=(scenario,))
            model = train_scenarios(train, train_config, progress=False)[scenario]
        seconds = time.perf_counter() - start
        orgs = list(corpus.organisations)
        theta_true = np.vstack([corpus.organisations[o].theta_validation for o in orgs])
        all_validation = sp.vstack([validation[o] for o in orgs]).tocsr()
        if not truth_logged:  # the yardstick for "effective topics in use"
            logger.info("| %d | ground truth | | | | | | | %.1f | |", args.repetition, effective_topics(theta_true))
            truth_logged = True
        theta = infer_theta(model, all_validation, config.inference_samples, derive_seed(seed, 5000))
        learned = align_topics(model.to_model("cpu").topic_word().double().numpy(), vocabulary, corpus.vocabulary)
        similarity = np.sqrt(learned) @ np.sqrt(corpus.beta).T  # learned x true Bhattacharyya coefficients
        matched = len(np.unique(similarity.argmax(axis=1)))
        recovered = int((similarity.max(axis=0) >= RECOVERED).sum())
        effective = effective_topics(theta)
        logger.info(
            "| %d | %s | %d (best %s) | %.1f | %.3f | %.3f | %d | %d | %.1f | %.0f |",
            args.repetition,
            variant,
            len(model.history),
            None if model.best_round is None else model.best_round + 1,
            dss(theta_true, theta),
            tss(corpus.beta, learned),
            topic_diversity(learned),
            matched,
            recovered,
            effective,
            seconds,
        )


if __name__ == "__main__":
    main()
