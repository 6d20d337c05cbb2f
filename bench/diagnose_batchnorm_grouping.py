"""Diagnostic: does BatchNorm grouping explain the federated / centralized gap on synthetic data?

The centralized trainer takes L x 64 pooled documents per step in L ghost batches of mixed
organisations. This script trains it a second time on exactly the same documents per step,
with each step's documents sorted by organisation before cutting the ghost batches. The
ghost batches are then (almost) organisation-pure, as a FedSGD client's batch is. Nothing
else changes: the same sampler, the same noise, the same steps. If the regrouped model
scores like the federated one, the gap comes from which documents share a BatchNorm batch.

``--smoke`` runs it on the smoke environment's tiny organisations.

    .venv/bin/python bench/diagnose_batchnorm_grouping.py [--env reduced] [--n-shared 10] [--repetitions 1] [--smoke]
"""

from __future__ import annotations

import argparse
import logging

import numpy as np
import scipy.sparse as sp
from common import project_config

from fedtopic_pipelines.core.compute import resolve_device
from fedtopic_pipelines.core.families import get_family
from fedtopic_pipelines.core.federated.client import FamilyClient
from fedtopic_pipelines.core.federated.engine import InProcessEngine
from fedtopic_pipelines.core.federated.server import FederatedServer
from fedtopic_pipelines.core.federation import stopping_rule
from fedtopic_pipelines.core.metrics.similarity import align_topics, dss, tss
from fedtopic_pipelines.core.model_store import TrainedModel
from fedtopic_pipelines.core.seeds import derive_seed, hold_out_one
from fedtopic_pipelines.core.site import POOLED_STREAM
from fedtopic_pipelines.core.synthetic import generate
from fedtopic_pipelines.experiments.config import SweepPoint
from fedtopic_pipelines.experiments.synthetic import consensus_matrices, infer_theta


class SortedByOrganisation:
    """Wraps a source's epoch sampler: the same rows per step, sorted by organisation, so the
    ghost-batch cut that follows gives (nearly) organisation-pure batches."""

    def __init__(self, sampler, organisation: np.ndarray) -> None:
        self.sampler = sampler
        self.organisation = organisation

    def next_indices(self) -> np.ndarray:
        rows = self.sampler.next_indices()
        return rows[np.argsort(self.organisation[rows], kind="stable")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="reduced")
    parser.add_argument("--n-shared", type=int, default=10)
    parser.add_argument("--repetitions", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="smoke environment, K' = 2")
    args = parser.parse_args()
    if args.smoke:
        args.env, args.n_shared = "smoke", 2
    logging.basicConfig(level=logging.WARNING)
    config = project_config(args.env)[1].synthetic
    print("| repetition | ghost batches | steps | DSS | TSS |")
    print("| --- | --- | --- | --- | --- |")
    for rep in range(args.repetitions):
        point = SweepPoint("n_shared", args.n_shared, rep)
        seed = point.seed(config)
        corpus = generate(point.generator_config(config))
        vocabulary, train, validation = consensus_matrices(corpus, config.consensus)
        train_config = config.train.replace(seed=seed)
        family = get_family(train_config.model.family)
        split = {
            o: hold_out_one(o, m, train_config.validation_fraction, seed, i) for i, (o, m) in enumerate(train.items())
        }
        fit, held = {o: s[0] for o, s in split.items()}, {o: s[1] for o, s in split.items()}
        orgs = list(fit)
        pooled = sp.vstack([fit[o] for o in orgs]).tocsr()
        organisation = np.concatenate([np.full(fit[o].shape[0], i) for i, o in enumerate(orgs)])
        pooled_held = sp.vstack([held[o] for o in orgs]).tocsr()
        device = resolve_device(train_config.device)
        bs, n = train_config.batch_size, len(orgs)
        theta_true = np.vstack([corpus.organisations[o].theta_validation for o in orgs])
        all_validation = sp.vstack([validation[o] for o in orgs]).tocsr()
        for label in ("mixed (as trained)", "sorted by organisation"):
            source = family.stream(pooled, train_config, derive_seed(seed, POOLED_STREAM), device, ghosts=n)
            if label.startswith("sorted"):
                source.sampler = SortedByOrganisation(source.sampler, organisation)
            model = family.create_model(pooled.shape[1], train_config, device)
            client = FamilyClient(
                "server",
                family,
                family.create_model(pooled.shape[1], train_config, device),
                source,
                pooled_held,
                derive_seed(seed, 2000, POOLED_STREAM),
            )
            rule = stopping_rule(train_config, int(np.ceil(pooled.shape[0] / (bs * n))), True)
            server = FederatedServer(family.strategy(model, train_config), rule, name=label)
            history = server.run(InProcessEngine([client]), progress=False)
            state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
            trained = TrainedModel(label, "centralized", orgs, pooled.shape[1], train_config, state, history)
            theta = infer_theta(trained, all_validation, config.inference_samples, derive_seed(seed, 5000))
            beta = align_topics(trained.to_model("cpu").topic_word().double().numpy(), vocabulary, corpus.vocabulary)
            print(f"| {rep} | {label} | {len(history)} | {dss(theta_true, theta):.1f} | {tss(corpus.beta, beta):.3f} |")


if __name__ == "__main__":
    main()
