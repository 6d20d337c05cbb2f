"""Benchmark: a curious server's attacks (issue 19, a-c) against each defence, and what DP costs.

The server is honest but curious: it runs the protocol and reads only what reaches it (each
organisation's update of every round, its reported loss terms, the final model). A
``RecordingEngine`` (``core/audit/attacks.py``) keeps the first ``--attack-rounds`` rounds of
replies; the attacks read them. Ground truth (which words a client's batch held) is the
organisation's own seeded stream replayed here, never something the server has.

Attacks (rows):

* **(a) batch words**, ProdLDA (FedSGD): the encoder's first-layer gradient column of a word is
  exactly zero when the word is absent from the batch (guess: non-zero columns). ZeroShotTM
  (its encoder reads only the sentence embeddings): the decoder gradient's column norms, a
  ranking (guess: Otsu's upper group of the log norms). NMF (FedAvg of weights): the change of
  the MI critic's first layer (V columns on the bag of words: exactly zero for words in none
  of the organisation's documents) and, beside it, W's row change summed over topics
  (present words grow); truth there is the organisation's whole vocabulary (a round's local
  epochs read all its documents).
* **(b) Word2Vec rows**: the U rows of a SPARSE_ROWS update against the batch's centre words,
  and U and V rows together against the batch's words (centres and contexts).
* **(c) membership**: loss-threshold attack (Yeom et al. 2018) on the final model: per-word
  negative ELBO (ProdLDA, ZeroShotTM) or reconstruction error (NMF) of each organisation's
  training documents (members) against its held-out test documents (non-members), ROC AUC
  averaged over organisations; "adv." is TPR - FPR at the threshold the organisations
  themselves report every round (their mean training loss over the last rounds).

Defences (columns): ``none``; ``dp@clients`` (client-level DP, each organisation clips its
update to C and adds its share of the noise before sending); ``dp@server`` (the server clips
and adds the noise: it still sees every clipped update); ``dp@sample`` (sample-level DP-SGD in
each organisation: every document's gradient clipped to C_doc, the median per-document gradient
norm at the initial model, the noise sigma C_doc on their sum; ProdLDA only, the others refuse
it); ``secagg`` (emulated: the server's view is the example-weighted sum of a round's updates,
attacked against one organisation's truth; ``tests/flower/`` checks that the real SecAgg+ server
sees only that sum); ``median`` (a robust rule: no privacy effect expected); ``vocab_k`` (attack
d's defence: another benchmark's column, shown here as a hook). C is each family's median update norm in the
``none`` run (clipping bites about half of the updates); sigma ``--sigma``. Word2Vec takes no
defence (TrainConfig refuses it: the row indices are the leak; docs/privacy.md).

Quality: ProdLDA on the demo slice at noise multipliers ``--sigmas``, client-level DP (noise at
the clients, the same clip; epsilon for one organisation, every organisation every round) and
sample-level DP-SGD (C_doc; epsilon for one document of the smallest organisation, sampled at
batch / its documents per round), epsilon by the project's accountant, pooled NPMI (the
evaluator's exact counts: core/metrics) and SVM macro-F1 of the pooled test documents' topic
proportions; the PNG is ``docs/img/privacy_quality.png``. The seed's own metrics, DSS and TSS
against the generator's truth (gFedNTM sec. 4.1.2), on one point of its synthetic experiment
(:func:`seed_metric`) at ``--synthetic-sigmas``, both levels. Numbers to ``--json`` (default
``.cache/bench/privacy.json``).

    .venv/bin/python bench/bench_privacy.py            # ~20 minutes on 2 cores
    .venv/bin/python bench/bench_privacy.py --quick    # ~1 minute smoke
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

logger = logging.getLogger("bench_privacy")

DEFENCES = ("none", "dp@clients", "dp@server", "dp@sample", "secagg", "median", "vocab_k")
NOT_HERE = "attack (d) bench"  # the vocabulary defence's column belongs to attack d


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a ~1-minute smoke (smoke corpus, few rounds)")
    parser.add_argument("--families", nargs="+", default=["prodlda", "zeroshottm", "nmf", "word2vec"])
    parser.add_argument("--train-docs", type=int, default=300, help="training documents per organisation (cap)")
    parser.add_argument("--test-docs", type=int, default=100, help="test documents per organisation (cap)")
    parser.add_argument("--attack-rounds", type=int, default=5, help="rounds whose updates the server keeps")
    parser.add_argument("--train-rounds", type=int, default=300, help="rounds of every attacked run (membership)")
    parser.add_argument(
        "--nmf-rounds", type=int, default=20, help="NMF's rounds (each is a local epoch over all its documents)"
    )
    parser.add_argument("--quality-rounds", type=int, default=600, help="rounds of every DP quality run")
    parser.add_argument("--sigma", type=float, default=1.0, help="noise multiplier of the attack table's DP columns")
    parser.add_argument("--sigmas", type=float, nargs="+", default=[0.0, 0.5, 1.0, 2.0, 4.0])
    parser.add_argument("--quality-topics", type=int, default=20, help="the quality runs' topics (base: 20)")
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument(
        "--synthetic-steps", type=int, default=200, help="rounds of each run of gFedNTM's synthetic point (DSS, TSS)"
    )
    parser.add_argument("--synthetic-sigmas", type=float, nargs="+", default=[0.0, 1.0, 4.0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, default=ROOT / ".cache/bench/privacy.json")
    parser.add_argument("--png", type=Path, default=ROOT / "docs/img/privacy_quality.png")
    args = parser.parse_args()
    args.quality_model = {"n_topics": args.quality_topics, "hidden_sizes": [100, 100]}  # the base environment's
    if args.quick:
        args.quality_model = None
        if args.png == parser.get_default("png"):  # a smoke plot never replaces the documented figure
            args.png = ROOT / ".cache/bench/privacy_quality_quick.png"
        args.train_docs, args.test_docs, args.attack_rounds = 60, 30, 2
        args.train_rounds, args.quality_rounds, args.sigmas, args.nmf_rounds = 10, 10, [0.0, 1.0], 3
        args.synthetic_steps, args.synthetic_sigmas = 5, [1.0]
        if args.families == parser.get_default("families"):
            args.families = ["prodlda", "nmf", "word2vec"]
    return args


# -- data ---------------------------------------------------------------------------------------


class Demo:
    """The demo slice through the pipelines' site steps: vocabulary, each organisation's training
    and test bags of words with labels, training texts and token sequences (Word2Vec)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from common import demo_tables, project_config

        from fedtopic_pipelines.core.site import run_sites

        overrides = {"ingest_demo": {"max_documents": {"train": args.train_docs, "test": args.test_docs}}}
        self.params, self.project = project_config("smoke", overrides)
        self.tables = demo_tables(self.params)
        logging.getLogger("fedtopic_pipelines").setLevel(logging.WARNING)
        self.vocabulary, bows, texts = run_sites(
            self.tables, self.project.preprocess, self.project.consensus, texts="train"
        )
        self.terms = self.vocabulary["term"].tolist()
        self.orgs = list(bows)
        self.train = {o: b.subset("train") for o, b in bows.items()}
        self.test = {o: b.subset("test") for o, b in bows.items()}
        self.texts = texts

    @property
    def vocab_size(self) -> int:
        return len(self.terms)

    def matrices(self) -> dict[str, Any]:
        return {o: self.train[o].matrix for o in self.orgs}

    def sentences(self) -> dict[str, Any]:
        """Each organisation's training texts as ids of the common vocabulary (Word2Vec's data)."""
        import numpy as np

        from fedtopic_pipelines.core.families.word2vec import Sentences

        index = {t: i for i, t in enumerate(self.terms)}
        frequency = self.vocabulary["frequency"].to_numpy(dtype=float)
        out = {}
        for org in self.orgs:
            docs = [np.array([index[w] for w in t if w in index], dtype=np.int64) for t in self.texts[org]]
            docs = [d for d in docs if len(d) >= 2]
            out[org] = Sentences(
                np.concatenate(docs), np.concatenate([[0], np.cumsum([len(d) for d in docs])]), frequency
            )
        return out

    def embedded(self, split: str) -> dict[str, Any]:
        """Each organisation's bag of words of ``split`` with its documents' sentence embeddings
        (the offline all-MiniLM-L6-v2, computed here once per run)."""
        import numpy as np

        from fedtopic_pipelines.core.families.ctm import ContextualData
        from fedtopic_pipelines.core.site import texts_of
        from fedtopic_pipelines.core.text.embeddings import DEFAULT_MODEL, embed_texts

        bows = self.train if split == "train" else self.test
        out = {}
        for org in self.orgs:
            texts = texts_of(self.tables[org], bows[org].doc_ids, org)
            values = embed_texts(texts, DEFAULT_MODEL, batch_size=64, progress=False)
            out[org] = ContextualData(bows[org].matrix, np.asarray(values, dtype=np.float32))
        return out


# -- runs ---------------------------------------------------------------------------------------


def train_config(demo: Demo, family: str, rounds: int, privacy: dict | None = None, changes: dict | None = None):
    """The family's train block (the smoke environment's sizes, its model with ``changes``), ``rounds``
    FedSGD / FedAvg rounds, federated only."""
    from fedtopic_pipelines.core.config import PrivacyConfig, TrainConfig

    base = demo.project.train
    common = {"scenarios": ["federated"], "max_steps": rounds, "max_epochs": None, "device": "cpu", "threads": None}
    if family in ("prodlda", "zeroshottm", "combinedtm"):
        model = {**base.model.to_params(), "family": family}
        if family != "prodlda":
            model.update(embedding_size=384, normalization="batch")  # ZeroShotTM: BatchNorm only (docs/ctm.md)
        raw = {**base.to_params(), **common, "model": model}
    elif family == "nmf":
        raw = {
            **common,
            "model": {"family": "nmf", "n_topics": base.model.n_topics, "mi_weight": 0.1, "inference_epochs": 3},
            "optimizer": {"name": "adagrad", "lr": 0.1},
            "aggregation": {"rule": "fedavg", "local_epochs": 1},
            "batch_size": 32,
            "seed": base.seed,
        }
    else:  # word2vec
        raw = {**demo.project.blocks["word2vec"].train.to_params(), **common}
        raw["model"] = {**raw["model"], "dimension": 16}
        raw["validation_fraction"] = 0.0
    if changes:
        raw["model"] = {**raw["model"], **changes}
    config = TrainConfig.from_params(raw)
    if privacy:
        config = config.replace(privacy=PrivacyConfig.model_validate(privacy))
    return config


def federate(vocabulary, data: dict, config, keep: int, keep_state: bool = False):
    """One federated run on ``data`` over the agreed ``vocabulary`` (a frame with its terms), the
    server's view recorded; returns (engine, trained model)."""
    from fedtopic_pipelines.core.audit.attacks import RecordingEngine
    from fedtopic_pipelines.core.federated.engine import InProcessEngine
    from fedtopic_pipelines.core.federation import run_federation
    from fedtopic_pipelines.core.site import MemoryEndpoint

    engine = RecordingEngine(InProcessEngine([MemoryEndpoint(o, d) for o, d in data.items()]), keep, keep_state)
    result = run_federation(engine, list(data), config, vocabulary=vocabulary, progress=False)
    return engine, result.model.to_model()


def document_clip(data: dict, config) -> float:
    """Sample-level DP's clip C_doc: the median norm of one document's gradient at the initial
    model, over each organisation's first batch."""
    import torch

    from fedtopic_pipelines.core.families import get_family
    from fedtopic_pipelines.core.privacy.dpsgd import document_norms

    family = get_family(config.model.family)
    cpu = torch.device("cpu")
    model = family.create_model(next(iter(data.values())).shape[1], config, cpu)
    names = family.shared_names(model)
    norms = [
        document_norms(model, batch, generator, names)
        for d in data.values()
        for batch, generator in family.stream(d, config, config.seed, cpu).next_batches()
    ]
    return float(torch.cat(norms).median())


def update_norm(update) -> float:
    return math.sqrt(sum(float(t.double().pow(2).sum()) for t in update.tensors.values()))


def median_norm(engine, state: bool = False) -> float:
    """The median update norm the server saw (weights: their change from the broadcast)."""
    import statistics

    norms = []
    for rec in engine.rounds:
        for update in rec.updates.values():
            if state:
                norms.append(
                    math.sqrt(sum(float((t - rec.state[k]).double().pow(2).sum()) for k, t in update.tensors.items()))
                )
            else:
                norms.append(update_norm(update))
    return statistics.median(norms)


def mean_view(rec):
    """Secure aggregation's view of a round as an update: the example-weighted mean of the updates."""
    import dataclasses

    from fedtopic_pipelines.core.audit.attacks import summed_view

    total = sum(u.num_examples for u in rec.updates.values())
    any_update = next(iter(rec.updates.values()))
    tensors = {k: (v / total).to(any_update.tensors[k].dtype) for k, v in summed_view(rec).items()}
    return dataclasses.replace(any_update, tensors=tensors)


# -- attacks ------------------------------------------------------------------------------------


def attack_a(family: str, engine, truth, vocab_size: int, summed: bool) -> dict[str, Any]:
    """Attack (a) on every recorded update (or, ``summed``, on each round's secure-aggregation view)."""
    from fedtopic_pipelines.core.audit import attacks as A

    def view(rec, update):
        return mean_view(rec) if summed else update

    def first_layer(rec, update):
        score = A.first_layer_scores(view(rec, update).tensors[A.FIRST_LAYER], vocab_size)
        return score, A.relative_threshold(score)

    def decoder(rec, update):
        score = A.decoder_magnitude(view(rec, update).tensors)
        return score, A.two_group_threshold(score)

    def decoder_sign(rec, update):
        return A.decoder_scores(view(rec, update).tensors), 0.0

    def critic(rec, update):
        score = A.critic_delta_scores(view(rec, update).tensors, rec.state)
        return score, A.relative_threshold(score)

    def w_delta(rec, update):
        return A.weights_delta_scores(view(rec, update).tensors, rec.state), 0.0

    if family in ("prodlda", "combinedtm"):
        scorers = {
            "first layer (exact zeros)": first_layer,
            "decoder -sum grad (sign)": decoder_sign,
            "decoder |grad| (Otsu)": decoder,
        }
    elif family == "zeroshottm":
        scorers = {"decoder -sum grad (sign)": decoder_sign, "decoder |grad| (Otsu)": decoder}
    else:
        scorers = {"critic first layer (exact zeros)": critic, "W change (ranking)": w_delta}
    return {name: A.attack_rounds(engine.rounds, truth, fn).as_dict() for name, fn in scorers.items()}


def attack_b(engine, rows, vocab_size: int) -> dict[str, Any]:
    from fedtopic_pipelines.core.audit import attacks as A

    def guess(tables):
        def fn(rec, update):
            return sum(A.sparse_rows_guess(update, vocab_size, t) for t in tables), 0.5

        return fn

    centres = {o: [r.mask(("centres",), vocab_size) for r in rs] for o, rs in rows.items()}
    words = {o: [r.mask(("centres", "contexts"), vocab_size) for r in rs] for o, rs in rows.items()}
    return {
        "U rows = centre words": A.attack_rounds(engine.rounds, centres, guess(("input",))).as_dict(),
        "U+V rows vs batch words": A.attack_rounds(engine.rounds, words, guess(("input", "output"))).as_dict(),
    }


def attack_c(demo: Demo, family: str, model, engine, test_data: dict | None, rounds: int) -> dict[str, Any]:
    """Membership per organisation (members: up to 200 of its training documents; non-members: its
    test documents), averaged; the threshold each organisation's reported losses give."""
    import numpy as np

    from fedtopic_pipelines.core.audit import attacks as A
    from fedtopic_pipelines.core.families import get_family

    fam = get_family(family)
    aucs, advantages = [], []
    last = max(1, min(10, rounds // 4))
    for org in demo.orgs:
        members = fam.select(train_data_of(demo, family, org), np.arange(min(200, demo.train[org].matrix.shape[0])))
        non_members = test_data[org] if test_data is not None else demo.test[org].matrix
        if family == "nmf":
            losses = A.nmf_document_losses(model, members), A.nmf_document_losses(model, non_members)
            per_word = (
                A.nmf_document_losses(model, members, per_word=True),
                A.nmf_document_losses(model, non_members, per_word=True),
            )
        else:
            losses = A.prodlda_document_losses(model, members), A.prodlda_document_losses(model, non_members)
            per_word = (
                A.prodlda_document_losses(model, members, per_word=True),
                A.prodlda_document_losses(model, non_members, per_word=True),
            )
        aucs.append(A.membership(*per_word).auc)
        threshold = A.reported_training_loss(engine.losses, org, last)
        if family == "nmf":
            threshold = math.nan  # NMF reports eq. 3's batch mean with the MI term: not a per-document loss
        advantages.append(A.membership(*losses, threshold).advantage)
    kept = [a for a in advantages if not math.isnan(a)]
    return {"auc": float(np.mean(aucs)), "advantage": float(np.mean(kept)) if kept else math.nan}


_TRAIN_CACHE: dict[tuple[str, str], Any] = {}


def train_data_of(demo: Demo, family: str, org: str):
    return _TRAIN_CACHE[(family, org)]


def family_data(demo: Demo, family: str) -> tuple[dict, dict | None]:
    if family == "word2vec":
        return demo.sentences(), None
    if family in ("zeroshottm", "combinedtm"):
        return demo.embedded("train"), demo.embedded("test")
    return demo.matrices(), None


def truth_of(demo: Demo, family: str, data: dict, config, rounds: int):
    import numpy as np

    from fedtopic_pipelines.core.audit import attacks as A
    from fedtopic_pipelines.core.families import get_family

    fam = get_family(family)
    if family == "word2vec":
        return {o: A.replay_pair_rows(fam, d, config, i, rounds) for i, (o, d) in enumerate(data.items())}
    if family == "nmf":  # a round's local epochs read every document of the organisation
        return {o: [np.asarray(d.sum(axis=0)).ravel() > 0] * rounds for o, d in data.items()}
    return {
        o: A.replay_batch_words(fam, d, config, i, rounds, demo.vocab_size) for i, (o, d) in enumerate(data.items())
    }


def run_family(demo: Demo, family: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every defence's column for one family."""
    started = time.perf_counter()
    data, test_data = family_data(demo, family)
    for org, d in data.items():
        _TRAIN_CACHE[(family, org)] = d
    weights = family == "nmf"
    keep = args.attack_rounds
    rounds = args.nmf_rounds if weights else args.train_rounds
    columns: dict[str, Any] = {}
    config = train_config(demo, family, rounds)
    engine, model = federate(demo.vocabulary, data, config, keep, keep_state=weights)
    truth = truth_of(demo, family, data, config, keep)
    clip = median_norm(engine, state=weights)

    def measure(engine, model, summed: bool = False) -> dict[str, Any]:
        if family == "word2vec":
            return {"b": attack_b(engine, truth, demo.vocab_size)}
        out = {"a": attack_a(family, engine, truth, demo.vocab_size, summed)}
        out["c"] = attack_c(demo, family, model, engine, test_data, rounds)
        return out

    columns["none"] = measure(engine, model)
    if family == "word2vec":
        reason = "refused by TrainConfig: the row indices are the leak (docs/privacy.md)"
        columns.update({d: {"skipped": reason} for d in DEFENCES[1:-1]})
    else:
        columns["secagg"] = measure(engine, model, summed=True)  # the same run: only the server's view differs
        dp = {"level": "client", "clip": clip, "noise_multiplier": args.sigma, "delta": args.delta}
        settings = {
            "dp@clients": {"dp": {**dp, "noise_at": "clients"}},
            "dp@server": {"dp": {**dp, "noise_at": "server"}},
            "dp@sample": {"dp": {**dp, "level": "sample"}},
            "median": {"robust_rule": "median"},
        }
        for name, privacy in settings.items():
            try:
                config = train_config(demo, family, rounds, privacy)
                if name == "dp@sample":
                    doc_clip = document_clip(data, config)
                    config = train_config(demo, family, rounds, {"dp": {**privacy["dp"], "clip": doc_clip}})
                    logger.info("%s / dp@sample: C_doc = %.4g", family, doc_clip)
                engine, model = federate(demo.vocabulary, data, config, keep, keep_state=weights)
            except Exception as exc:  # a defence the engine does not honour yet is reported, not hidden
                logger.warning("%s / %s: not run: %s", family, name, exc)
                columns[name] = {"skipped": f"{type(exc).__name__}: {exc}"}
                continue
            columns[name] = measure(engine, model)
    columns["vocab_k"] = {"skipped": NOT_HERE}
    seconds = time.perf_counter() - started
    logger.info("%s: every defence in %.1f s (clip C = %.4g)", family, seconds, clip)
    return {"columns": columns, "clip": clip, "rounds": rounds, "seconds": seconds}


# -- quality ------------------------------------------------------------------------------------


def dp_settings(sigmas: list[float]) -> list[tuple[str, str, float | None]]:
    """(name, level, sigma): no DP, then client level and sample level at each sigma."""
    return [
        ("off", "off", None),
        *((f"client, sigma {s:g}", "client", s) for s in sigmas),
        *((f"sample, sigma {s:g}", "sample", s) for s in sigmas),
    ]


def spent(
    name: str, level: str, sigma: float | None, clips: tuple[float, float], sampled: float, rounds: int, delta: float
) -> dict[str, Any]:
    """A sweep row's DP part: the clip of its level (C, C_doc) and epsilon by the project's
    accountant, every organisation every round at client level, at sample level each document
    sampled at ``sampled`` (batch / the smallest organisation's documents)."""
    from fedtopic_pipelines.core.privacy.accountant import gaussian_privacy

    sampling = 1.0 if level != "sample" else min(1.0, sampled)
    epsilon = math.inf if sigma is None else gaussian_privacy(sigma, rounds, delta, 1.0, sampling).epsilon_rdp
    clip = None if sigma is None else clips[0 if level == "client" else 1]
    return {"setting": name, "level": level, "sigma": sigma, "clip": clip, "sampling": sampling, "epsilon_rdp": epsilon}


def quality(demo: Demo, args: argparse.Namespace) -> tuple[list[dict[str, Any]], float, float]:
    """ProdLDA at each level and noise multiplier: epsilon, pooled NPMI, SVM macro-F1; the clip C
    (the median update norm of the run without DP, its first ``--attack-rounds`` rounds) and C_doc."""
    import numpy as np
    import scipy.sparse as sp
    import torch

    from fedtopic_pipelines.core.config import EvaluateConfig, from_mapping
    from fedtopic_pipelines.core.metrics.classification import svm_macro_f1
    from fedtopic_pipelines.core.metrics.coherence import (
        CoherenceCandidates,
        coherence_by_model,
        context_of,
        count_cooccurrences,
    )
    from fedtopic_pipelines.core.metrics.topics import top_words

    evaluate = from_mapping(EvaluateConfig, demo.params["evaluate"], "evaluate")
    texts = [t for org in demo.orgs for t in demo.texts[org]]
    test = sp.vstack([demo.test[o].matrix for o in demo.orgs]).tocsr()
    labels = np.concatenate([demo.test[o].labels for o in demo.orgs])
    rows = []
    clip = doc_clip = math.nan
    data = demo.matrices()
    for name, level, sigma in dp_settings(args.sigmas):
        privacy = None
        if sigma is not None:
            bound = clip if level == "client" else doc_clip
            privacy = {"dp": {"level": level, "clip": bound, "noise_multiplier": sigma, "delta": args.delta}}
        config = train_config(demo, "prodlda", args.quality_rounds, privacy, args.quality_model)
        started = time.perf_counter()
        try:
            engine, model = federate(demo.vocabulary, data, config, args.attack_rounds if sigma is None else 0)
        except Exception as exc:
            logger.warning("quality %s: not run: %s", name, exc)
            rows.append({"setting": name, "level": level, "sigma": sigma, "skipped": f"{type(exc).__name__}: {exc}"})
            continue
        if sigma is None:
            clip = median_norm(engine)
            doc_clip = document_clip(data, config)
        topics = top_words(model.topic_word().numpy(), demo.terms, evaluate.top_words)
        candidates = CoherenceCandidates.from_topics(topics)
        counts = count_cooccurrences(texts, candidates, [context_of("c_npmi")])
        npmi = coherence_by_model({"m": topics}, candidates, counts, "c_npmi")["m"].mean
        theta = model.doc_topic(torch.from_numpy(test.toarray().astype(np.float32))).numpy()
        f1 = svm_macro_f1(theta, labels, evaluate.svm_test_size, evaluate.svm_c, evaluate.seed)
        sampled = config.batch_size / min(m.shape[0] for m in data.values())
        row = spent(name, level, sigma, (clip, doc_clip), sampled, args.quality_rounds, args.delta)
        epsilon = row["epsilon_rdp"]
        rows.append(
            {
                **row,
                "rounds": args.quality_rounds,
                "delta": args.delta,
                "npmi": npmi,
                "macro_f1": f1,
                "seconds": time.perf_counter() - started,
            }
        )
        logger.info("quality %s: epsilon %.4g, NPMI %s, macro-F1 %s", name, epsilon, npmi, f1)
    return rows, clip, doc_clip


def seed_metric(args: argparse.Namespace) -> list[dict[str, Any]]:
    """gFedNTM's own metrics, DSS and TSS against the generator's truth, at each DP level and sigma:
    one point of the synthetic experiment (the ``reduced`` environment's generator: L 5, V 5000,
    K 50, K' 10, 1,000 training and 200 validation documents per organisation; ``--quick``: the
    smoke environment's tiny one), federated ProdLDA with LayerNorm (DP refuses BatchNorm) for
    ``--synthetic-steps`` rounds without validation (DP refuses it), C the median update norm of
    the run without DP, C_doc the median per-document gradient norm at the initial model."""
    import pandas as pd
    from common import project_config

    from fedtopic_pipelines.core.config import PrivacyConfig
    from fedtopic_pipelines.core.synthetic import generate
    from fedtopic_pipelines.experiments.synthetic import consensus_matrices, run_point

    _, project = project_config("smoke" if args.quick else "reduced")
    synthetic = project.synthetic
    point = synthetic.points()[0]
    if not args.quick:
        point = type(point)("n_shared", 10.0, 0)
    model = {**synthetic.train.model.to_params(), "normalization": "layer"}
    train = synthetic.train.replace(
        scenarios=("federated",), max_steps=args.synthetic_steps, max_epochs=None, validation_fraction=0.0
    )
    train = train.replace(model=type(train.model).model_validate(model), device="cpu", threads=None)
    corpus = generate(point.generator_config(synthetic))
    terms, matrices, _ = consensus_matrices(corpus, synthetic.consensus)

    seeded = train.replace(seed=point.seed(synthetic))  # run_point's seed: the same initial model and batches
    engine, _ = federate(pd.DataFrame({"term": terms}), matrices, seeded, args.attack_rounds)
    clip, doc_clip = median_norm(engine), document_clip(matrices, seeded)
    logger.info("synthetic: C = %.4g, C_doc = %.4g", clip, doc_clip)
    rows = []
    documents = min(m.shape[0] for m in matrices.values())
    for name, level, sigma in dp_settings(args.synthetic_sigmas):
        privacy = PrivacyConfig()
        if sigma is not None:
            bound = clip if level == "client" else doc_clip
            privacy = PrivacyConfig.model_validate(
                {"dp": {"level": level, "clip": bound, "noise_multiplier": sigma, "delta": args.delta}}
            )
        config = synthetic.model_copy(update={"train": train.replace(privacy=privacy)})
        started = time.perf_counter()
        result = run_point(config, point, progress=False)
        (row,) = result.rows
        dp = spent(name, level, sigma, (clip, doc_clip), train.batch_size / documents, args.synthetic_steps, args.delta)
        epsilon = dp["epsilon_rdp"]
        rows.append(
            {
                **dp,
                "dss": row["dss"],
                "tss": row["tss"],
                "tss_baseline": row["tss_baseline"],
                "seconds": time.perf_counter() - started,
            }
        )
        logger.info("synthetic %s: epsilon %.4g, DSS %.1f, TSS %.3f", name, epsilon, row["dss"], row["tss"])
    return rows


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if "skipped" not in r]
    off = next((r for r in done if r["sigma"] is None), None)
    levels = (("client", "client-level DP (noise at the clients)", (3, 4)), ("sample", "sample-level DP-SGD", (3, -10)))
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in ((axes[0], "npmi", "pooled NPMI"), (axes[1], "macro_f1", "SVM macro-F1")):
        for level, legend, offset in levels:
            dp = [r for r in done if r["sigma"] is not None and r.get("level", "client") == level]
            xs = [r["sigma"] for r in dp]
            ys = [r[key] if r[key] is not None else math.nan for r in dp]
            ax.plot(xs, ys, "o-" if level == "client" else "s--", label=legend)
            for r, y in zip(dp, ys, strict=True):
                eps = r["epsilon_rdp"]
                ax.annotate(
                    "ε=∞" if math.isinf(eps) else f"ε={eps:.3g}",
                    (r["sigma"], y),
                    fontsize=7,
                    xytext=offset,
                    textcoords="offset points",
                )
        if off is not None and off[key] is not None:
            ax.axhline(off[key], color="grey", ls="--", label="no DP")
        ax.set_xlabel("noise multiplier σ (ε at δ, RDP, annotated)")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- table --------------------------------------------------------------------------------------


def _cell(value: dict[str, Any] | None, keys=("precision", "recall", "auc")) -> str:
    if value is None:
        return ""
    return " / ".join("nan" if value[k] is None or math.isnan(value[k]) else f"{value[k]:.2f}" for k in keys)


def table(results: dict[str, Any]) -> list[str]:
    lines = [
        "| family | attack | " + " | ".join(DEFENCES) + " |",
        "| --- | --- | " + " | ".join("---" for _ in DEFENCES) + " |",
    ]
    for family, result in results.items():
        columns = result["columns"]
        rows: dict[str, dict[str, str]] = {}
        for defence in DEFENCES:
            col = columns.get(defence, {})
            if "skipped" in col:
                for row in rows or {"(all)": {}}:
                    rows.setdefault(row, {})[defence] = "n/a" if col["skipped"] == NOT_HERE else "refused"
                continue
            for attack in ("a", "b"):
                for name, value in col.get(attack, {}).items():
                    rows.setdefault(f"({attack}) {name}: P / R / AUC", {})[defence] = _cell(value)
            if "c" in col:
                rows.setdefault("(c) membership: AUC / adv.", {})[defence] = _cell(col["c"], ("auc", "advantage"))
        for row, cells in rows.items():
            if row == "(all)":
                continue
            for defence in DEFENCES:
                skipped = columns.get(defence, {}).get("skipped")
                if skipped and defence not in cells:
                    cells[defence] = "n/a" if skipped == NOT_HERE else "refused"
            lines.append(f"| {family} | {row} | " + " | ".join(cells.get(d, "") for d in DEFENCES) + " |")
    return lines


def main() -> None:
    args = _args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(args.threads))
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    for noisy in ("gensim", "absl", "fedtopic_pipelines", "sentence_transformers"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    import torch

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    demo = Demo(args)
    logger.info(
        "demo slice: %d organisations, %d training / %d test documents, V = %d",
        len(demo.orgs),
        sum(demo.train[o].matrix.shape[0] for o in demo.orgs),
        sum(demo.test[o].matrix.shape[0] for o in demo.orgs),
        demo.vocab_size,
    )
    results: dict[str, Any] = {}
    for family in args.families:
        try:
            results[family] = run_family(demo, family, args)
        except Exception as exc:
            logger.warning("%s: SKIPPED: %s: %s", family, type(exc).__name__, exc)
            results[family] = {"columns": {}, "skipped": f"{type(exc).__name__}: {exc}"}
    rows, clip, doc_clip = quality(demo, args)
    synthetic_rows = seed_metric(args)
    title = (
        f"ProdLDA, demo slice ({len(demo.orgs)} organisations, {args.train_docs} train docs each at most), "
        f"{args.quality_rounds} rounds, K = {args.quality_topics if args.quality_model else 'smoke'}, "
        f"clip C = {clip:.3g}, C_doc = {doc_clip:.3g}"
    )
    plot(rows, args.png, title)
    seconds = time.perf_counter() - started

    print(
        "\nAttacks of an honest-but-curious server (rounds kept: "
        f"{args.attack_rounds}; runs of {args.train_rounds} rounds, NMF {args.nmf_rounds}; DP sigma {args.sigma}, "
        "C = each family's median update norm without defence; dp@sample: C_doc, the median per-document "
        "gradient norm at the initial model)\n"
    )
    for line in table(results):
        print(line)
    print(
        "\nsecagg: emulated in process as the example-weighted sum of a round's updates, attacked against one "
        "organisation's truth; the Flower SecAgg+ test checks that the real server sees only that sum."
    )
    print("vocab_k: the vocabulary defence is attack (d)'s benchmark; its column is a hook here.")
    for family, result in results.items():
        if "skipped" in result:
            print(f"{family}: skipped: {result['skipped']}")
        for defence, col in result["columns"].items():
            if "skipped" in col and col["skipped"] != NOT_HERE:
                print(f"{family} / {defence}: {col['skipped']}")
    print(
        f"\nQuality cost of DP (ProdLDA): client level (noise at the clients, C = {clip:.4g}, epsilon for one "
        f"organisation) and sample level (DP-SGD, C_doc = {doc_clip:.4g}, epsilon for one document)\n"
    )
    print("| setting | sigma | sampling | epsilon (RDP) | pooled NPMI | SVM macro-F1 | seconds |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        if "skipped" in r:
            print(f"| {r['setting']} | | | | skipped | | |")
            continue
        eps = "inf" if math.isinf(r["epsilon_rdp"]) else f"{r['epsilon_rdp']:.4g}"
        npmi = "n/a" if r["npmi"] is None else f"{r['npmi']:.4f}"
        f1 = "n/a" if r["macro_f1"] is None else f"{r['macro_f1']:.4f}"
        sigma = "" if r["sigma"] is None else f"{r['sigma']:g}"
        sampling = "" if r["sigma"] is None else f"{r['sampling']:.3g}"
        print(f"| {r['setting']} | {sigma} | {sampling} | {eps} | {npmi} | {f1} | {r['seconds']:.1f} |")
    print(
        f"\ngFedNTM's own metrics on its synthetic data ({args.synthetic_steps} rounds, federated ProdLDA with "
        "LayerNorm; DSS: lower is better, TSS: higher is better, out of K; the a-priori TSS baseline beside)\n"
    )
    print("| setting | sigma | sampling | epsilon (RDP) | DSS | TSS | TSS baseline | seconds |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in synthetic_rows:
        eps = "inf" if math.isinf(r["epsilon_rdp"]) else f"{r['epsilon_rdp']:.4g}"
        sigma = "" if r["sigma"] is None else f"{r['sigma']:g}"
        sampling = "" if r["sigma"] is None else f"{r['sampling']:.3g}"
        print(
            f"| {r['setting']} | {sigma} | {sampling} | {eps} | {r['dss']:.1f} | {r['tss']:.3f} | "
            f"{r['tss_baseline']:.3f} | {r['seconds']:.1f} |"
        )
    print(f"\nPNG: {args.png}\nJSON: {args.json}\ntotal: {seconds:.1f} s")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    out = {
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "attacks": results,
        "quality": rows,
        "synthetic": synthetic_rows,
        "seconds": seconds,
    }
    args.json.write_text(json.dumps(out, indent=1, default=lambda x: None if x is None else float(x)))


if __name__ == "__main__":
    main()
