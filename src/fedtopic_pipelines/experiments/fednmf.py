"""Seed 004's experiments: FedNMF+MI against NMF, LDA and FedLDA on one corpus's organisations.

Every method of ``fednmf.methods`` is trained at every number of topics of ``fednmf.topics``
on the organisations' training documents and scored as the paper scores it (sec. IV-B):
word-embedding coherence of each topic's top words (eq. 4) at the server (it needs only
the topics), and inside each organisation (:func:`organisation_scores`) a linear SVM on its
own documents' topic weights (a stratified 80/20 split of its documents) whose test
confusion counts, summed at the server, give macro-F1 and accuracy (:func:`pooled_scores`),
and the co-occurrence counts of the models' top words, whose sum gives the pooled NPMI
(``core/metrics/coherence.py``). The paper's own protocol, one SVM on every organisation's
topic weights pooled ("we aggregate the topic weight vectors of all documents"), stays
beside it for the main sweep, named ``paper_pooled_*``: it needs the documents at the server.

The methods (Tables III-IV's rows):

* ``lda``: gensim ``LdaModel`` on the pooled documents (batch passes); ``fedlda``: the same
  model trained by gensim's distributed scheme, each organisation's E-step and the summed
  statistics (``core/models/fedlda.py``), equal to ``lda`` on the concatenated documents;
* ``nmf``: scikit-learn's ``NMF`` (coordinate descent) on the pooled documents;
* ``nmf_sgd`` / ``nmf_sgd_mi``: NMF by projected SGD on the pooled documents (one trusted
  server holding them all: the centralized scenario of the engine);
* ``fed<rule>`` / ``fed<rule>_mi``: FedNMF(+MI) with FedAvg / FedAdagrad / FedYogi / FedAdam,
  client fraction C and local epochs E of ``fednmf.train.aggregation``;
* ``fedexact``: FedNMF exact (family ``nmf_exact``): scikit-learn's coordinate descent from the
  organisations' summed statistics, every organisation every round, ``sklearn_max_iter`` rounds
  at most, stopped by ``sklearn_tol`` as scikit-learn stops.

A topic model's document weights: NMF's from the trained W (and critic) by
``NMFModel.doc_topic``; scikit-learn's ``transform``; LDA's normalised variational gammas.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
from tqdm.auto import tqdm

from fedtopic_pipelines.core.config import WEIGHT_RULES, AggregationConfig, NMFExactConfig, TrainConfig
from fedtopic_pipelines.core.federated.engine import InProcessEngine
from fedtopic_pipelines.core.federated.participation import participation
from fedtopic_pipelines.core.federated.server import FederatedServer
from fedtopic_pipelines.core.federation import run_federation
from fedtopic_pipelines.core.ingest.partition import dirichlet_label_partition
from fedtopic_pipelines.core.metrics.classification import svm_confusion, svm_scores
from fedtopic_pipelines.core.metrics.topics import redundancy, top_words
from fedtopic_pipelines.core.metrics.we_coherence import we_coherence
from fedtopic_pipelines.core.seeds import derive_seed
from fedtopic_pipelines.core.site import MemoryEndpoint, PooledEndpoint
from fedtopic_pipelines.core.vocab.consensus import BowCorpus
from fedtopic_pipelines.experiments.config import ENGINE_FEDERATED_NMF_METHODS, EXACT_NMF_METHOD, FedNMFRunConfig

logger = logging.getLogger(__name__)

POOLED = "server"


def rule_of(method: str) -> str | None:
    """The weights rule of a federated NMF method (``fedyogi_mi`` -> ``fedyogi``), else None."""
    base = method.removesuffix("_mi")
    return base if base in WEIGHT_RULES else None


def trained_federated(method: str) -> bool:
    """Whether the engine trains ``method`` over the organisations (a weights rule, or FedNMF exact)."""
    return method in ENGINE_FEDERATED_NMF_METHODS


def method_config(run: FedNMFRunConfig, method: str, topics: int) -> TrainConfig:
    """The training block of one NMF method at ``topics`` topics: its rule, its MI weight; the
    centralized ones one pooled client for ``centralized_rounds`` rounds."""
    train = run.train
    if method == EXACT_NMF_METHOD:
        return train.replace(
            model=NMFExactConfig(n_topics=topics),
            aggregation=AggregationConfig(),
            max_steps=run.sklearn_max_iter,
            max_epochs=None,
            tolerance=run.sklearn_tol,
        )
    mi = run.mi_weight if method.endswith("_mi") else 0.0
    model = train.model.replace(n_topics=topics, mi_weight=mi)
    rule = rule_of(method)
    if rule is not None:
        return train.replace(model=model, aggregation=train.aggregation.replace(rule=rule))
    rounds = run.centralized_rounds or max(1, round(train.max_steps * train.aggregation.client_fraction))
    aggregation = train.aggregation.replace(rule="fedavg", client_fraction=1.0)
    return train.replace(model=model, aggregation=aggregation, max_steps=rounds, max_epochs=None)


def check_methods(run: FedNMFRunConfig) -> None:
    """Build every method's training block once, so that a method the run's settings cannot train
    (FedNMF exact under DP, say) is refused before the first model, naming the method."""
    for method in run.methods:
        try:
            method_config(run, method, run.topics[0])
        except ValueError as error:
            raise ValueError(f"'fednmf.methods' has {method!r}, which cannot train here: {error}") from None


@dataclass
class Evaluation:
    """The documents every model is scored on: their counts and labels (all organisations'
    documents, or a seeded sample of ``max_documents``)."""

    matrix: sp.csr_matrix
    labels: np.ndarray

    @classmethod
    def of(cls, organisations: Mapping[str, BowCorpus], max_documents: int | None, seed: int) -> Evaluation:
        matrix = sp.vstack([bow.matrix for bow in organisations.values()]).tocsr()
        labels = np.concatenate([np.asarray(bow.labels, dtype=object) for bow in organisations.values()])
        labels = np.array(["" if label is None else str(label) for label in labels], dtype=object)
        if max_documents is not None and matrix.shape[0] > max_documents:
            keep = np.sort(np.random.default_rng(derive_seed(seed, 8000)).choice(matrix.shape[0], max_documents, False))
            matrix, labels = matrix[keep], labels[keep]
        return cls(matrix.astype(np.float32), labels)


@dataclass
class MethodResult:
    """One method at one number of topics: its scores, cost, Fig. 3's points and models."""

    method: str
    topics: int
    scores: dict[str, float | None]
    seconds: float
    rounds: int
    bytes: float  # bytes uploaded and downloaded in all (0 for a centralized method)
    curve: list[dict[str, float]] = field(default_factory=list)  # Fig. 3's points: key, round, bytes
    models: dict[str, Fitted] = field(default_factory=dict)  # the model and its curve's snapshots, by key
    participation: dict[str, Any] | None = None  # a federated method's: who took part in each round, who not, why
    repeat: int = 0  # which of ``fednmf.repeats`` (its training seeds moved by it)

    @property
    def key(self) -> str:
        return model_key(self.method, self.topics, self.repeat)

    def row(self) -> dict[str, Any]:
        """The flat row of the sweep's tables; ``left_out``: organisation-rounds left out (federated methods)."""
        left_out = None
        if self.participation is not None:
            left_out = sum(n for why, n in self.participation["totals"].items() if why != "took_part")
        return {
            "method": self.method,
            "topics": self.topics,
            "repeat": self.repeat,
            **self.scores,
            "seconds": self.seconds,
            "rounds": self.rounds,
            "bytes": self.bytes,
            "left_out": left_out,
        }


@dataclass
class Fitted:
    """A trained model as the organisations receive it: its topics and the way it infers
    documents' topic weights (NMF by SGD: the trained W and critic; scikit-learn's NMF: its
    ``transform``; LDA: gensim's variational inference)."""

    kind: str  # nmf_sgd | sklearn | lda
    model: Any
    topic_word: np.ndarray

    def doc_topics(self, matrix: sp.csr_matrix, seed: int | None = None) -> np.ndarray:
        """Topic weights of ``matrix``'s documents. With ``seed``, LDA's inference draws its
        starting gammas from a copy of the model seeded with it (an organisation's documents
        get the same weights whatever was evaluated before); without, from the model's own
        generator (the paper's pooled protocol, as it always did)."""
        if self.kind == "lda" and seed is None:
            return lda_topics(self.model, matrix)
        if self.kind == "lda":
            lda = copy.copy(self.model)
            lda.random_state = np.random.RandomState(seed % 2**32)
            return lda_topics(lda, matrix)
        if self.kind == "sklearn":
            return self.model.transform(matrix.astype(np.float64))
        return self.model.doc_topic(matrix).numpy()


def score(
    topic_word: np.ndarray,
    doc_topics: np.ndarray | None,
    labels: np.ndarray,
    terms: list[str],
    vectors: Any,
    run: FedNMFRunConfig,
) -> dict[str, float | None]:
    """Eq. 4's coherence of the top words (with its coverage) and, given the pooled documents'
    topic weights, the paper's own pooled SVM (``paper_pooled_*``)."""
    config = run.evaluate
    words = top_words(topic_word, terms, config.top_words)
    coherence = we_coherence(words, vectors)
    scores: dict[str, float | None] = {
        "we_coherence": None if math.isnan(coherence.mean) else coherence.mean,
        "we_coverage": coherence.coverage,
        "we_undefined_topics": float(coherence.undefined_topics),
    }
    found = redundancy(words)
    scores |= {"largest_topic_overlap": float(found.largest_overlap), "inverted_rbo": found.inverted_rbo}
    if doc_topics is not None:
        svm = svm_scores(doc_topics, labels, config.svm_test_size, config.svm_c, run.seed)
        scores["paper_pooled_macro_f1"] = None if svm is None else svm["macro_f1"]
        scores["paper_pooled_accuracy"] = None if svm is None else svm["accuracy"]
    return scores


def organisation_documents(
    bow: BowCorpus, share: int | None, seed: int, index: int
) -> tuple[sp.csr_matrix, np.ndarray]:
    """One organisation's documents and labels for the classifier: all of them, or a seeded
    sample of ``share`` (its part of ``fednmf.evaluate.max_documents``)."""
    matrix = bow.matrix.tocsr()
    labels = np.array(["" if label is None else str(label) for label in bow.labels], dtype=object)
    if share is not None and matrix.shape[0] > share:
        keep = np.sort(np.random.default_rng(derive_seed(seed, 8000, index)).choice(matrix.shape[0], share, False))
        matrix, labels = matrix[keep], labels[keep]
    return matrix.astype(np.float32), labels


def organisation_scores(
    models: Mapping[str, Fitted], bow: BowCorpus, share: int | None, index: int, run: FedNMFRunConfig
) -> dict[str, Any]:
    """Inside organisation number ``index``: each model's topic weights of its own documents, a
    linear SVM trained on a stratified 80 % of them and its confusion counts on the other 20 %
    (None where the organisation cannot train one: fewer than two classes or too few
    documents). Only these counts leave the organisation."""
    matrix, labels = organisation_documents(bow, share, run.seed, index)
    config = run.evaluate
    out = {}
    for key, fitted in tqdm(models.items(), desc="fednmf evaluation", leave=False):
        h = fitted.doc_topics(matrix, derive_seed(run.seed, 9100, index))
        out[key] = svm_confusion(h, labels, config.svm_test_size, config.svm_c, run.seed)
    return out


def _model_bytes(state: Mapping[str, Any]) -> int:
    """The bytes of the global model's state: what one broadcast carries (H is not in it)."""
    return sum(int(t.numel()) * t.element_size() for t in state.values())


def _communicated(history: list, model_bytes: int, organisations: int) -> list[float]:
    """Cumulative bytes after each round: the updates sent plus the weights broadcast to the
    organisations asked (all of them without client sampling)."""
    total, out = 0.0, []
    for record in history:
        asked = len(record.sampled) or organisations
        total += sum(record.client_bytes.values()) + asked * model_bytes
        out.append(total)
    return out


def train_nmf(
    method: str,
    run: FedNMFRunConfig,
    topics: int,
    train: Mapping[str, sp.csr_matrix],
    vocabulary: pd.DataFrame,
    curve: bool = False,
    progress: bool = True,
) -> tuple[Any, dict[str, Any]]:
    """One NMF-by-SGD method through the engine: the global model (with its inference settings),
    and its rounds, bytes and (with ``curve``, federated methods) a copy of the global model at
    ``curve_points`` rounds with the bytes communicated so far (Fig. 3, scored by the
    organisations afterwards)."""
    config = method_config(run, method, topics)
    orgs = list(train)
    federated = trained_federated(method)
    if federated:
        endpoints: list[Any] = [MemoryEndpoint(org, m) for org, m in train.items()]
    else:
        endpoints = [PooledEndpoint(POOLED, dict(train))]
    names = [e.name for e in endpoints]
    snapshots: list[dict[str, Any]] = []
    observe: Callable[[FederatedServer], None] | None = None
    if curve and federated:
        points = max(1, run.evaluate.curve_points)
        marks = {max(1, round(config.max_steps * (i + 1) / points)) for i in range(points)}

        def observe(server: FederatedServer) -> None:
            if server.next_round not in marks:
                return
            model = server.strategy.model
            sent = _communicated(server.history, _model_bytes(model.state_dict()), len(orgs))[-1]
            snapshots.append({"round": float(server.next_round), "bytes": sent, "model": copy.deepcopy(model)})

    result = run_federation(
        InProcessEngine(endpoints),
        names,
        config,
        vocabulary=vocabulary,
        name=f"{method}-{topics}",
        scenario="federated" if federated else "centralized",
        trained_on=orgs,
        ghosts=None if federated else len(orgs),
        progress=progress,
        on_round_end=observe,
    )
    model = result.model.to_model()
    history = result.model.history
    sent = _communicated(history, _model_bytes(result.model.state), len(orgs)) if federated else [0.0]
    who = participation(history, orgs) if federated else None
    if curve and federated and (not snapshots or snapshots[-1]["round"] != len(history)):
        # a run stopped by its tolerance (FedNMF exact) before the last mark: its curve ends where it stopped
        snapshots.append({"round": float(len(history)), "bytes": sent[-1], "model": copy.deepcopy(model)})
    return model, {"rounds": len(history), "bytes": sent[-1], "curve": snapshots, "participation": who}


def _gensim_corpus(matrix: sp.csr_matrix) -> list[list[tuple[int, float]]]:
    """Documents (rows) as gensim bags of words, by gensim's own converter."""
    from gensim.matutils import Sparse2Corpus

    return list(Sparse2Corpus(matrix, documents_columns=False))


def train_lda(
    method: str, run: FedNMFRunConfig, topics: int, train: Mapping[str, sp.csr_matrix], terms: list[str]
) -> tuple[Any, dict[str, Any]]:
    """LDA on the pooled documents, or FedLDA (gensim's E-step at each organisation, summed
    statistics, gensim's M-step); the bytes are the statistics sent and the topics broadcast."""
    from fedtopic_pipelines.core.models.fedlda import federated_lda

    id2word = dict(enumerate(terms))
    if method == "lda":
        corpora = {POOLED: _gensim_corpus(sp.vstack(list(train.values())).tocsr())}
    else:
        corpora = {org: _gensim_corpus(m) for org, m in train.items()}
    lda = run.lda
    model, history = federated_lda(
        corpora, id2word, topics, lda.passes, run.seed, lda.chunksize, lda.iterations, progress=False
    )
    sent = 0.0
    if method == "fedlda":
        broadcast = int(model.state.sstats.nbytes)
        sent = float(sum(sum(h["bytes"].values()) + broadcast * len(corpora) for h in history))
    return model, {"rounds": lda.passes, "bytes": sent, "curve": []}


def lda_topics(model: Any, matrix: sp.csr_matrix) -> np.ndarray:
    """Documents' topic proportions: gensim's variational gammas, normalised."""
    gamma, _ = model.inference(_gensim_corpus(matrix))
    return gamma / np.maximum(gamma.sum(axis=1, keepdims=True), 1e-30)


def train_sklearn(run: FedNMFRunConfig, topics: int, train: Mapping[str, sp.csr_matrix]) -> tuple[Any, dict[str, Any]]:
    """scikit-learn's ``NMF`` (coordinate descent, Frobenius loss) on the pooled documents."""
    from sklearn.decomposition import NMF

    pooled = sp.vstack(list(train.values())).tocsr().astype(np.float64)
    model = NMF(
        n_components=topics,
        init="nndsvda",
        solver="cd",
        max_iter=run.sklearn_max_iter,
        tol=run.sklearn_tol,
        random_state=run.seed,
    )
    model.fit(pooled)
    return model, {"rounds": int(model.n_iter_), "bytes": 0.0, "curve": []}


def run_method(
    method: str,
    run: FedNMFRunConfig,
    topics: int,
    train: Mapping[str, sp.csr_matrix],
    vocabulary: pd.DataFrame,
    evaluation: Evaluation | None,
    vectors: Any,
    curve: bool = False,
    progress: bool = True,
    repeat: int = 0,
) -> MethodResult:
    """Train ``method`` at ``topics`` topics on ``train`` (organisation -> training counts); score
    what the server can score (WE coherence; with ``evaluation``, the paper's pooled SVM).
    ``repeat``: which repeat ``run`` (already moved to its seeds) is, for the model's key."""
    terms = vocabulary["term"].tolist()
    start = time.perf_counter()
    if method in ("lda", "fedlda"):
        model, facts = train_lda(method, run, topics, train, terms)
        fitted = Fitted("lda", model, model.get_topics())
    elif method == "nmf":
        model, facts = train_sklearn(run, topics, train)
        fitted = Fitted("sklearn", model, model.components_)
    else:
        model, facts = train_nmf(method, run, topics, train, vocabulary, curve, progress)
        fitted = Fitted("nmf_sgd", model, model.topic_word().numpy())
    seconds = time.perf_counter() - start
    key = model_key(method, topics, repeat)
    snapshots = {
        f"{key}@{int(p['round'])}": Fitted("nmf_sgd", p["model"], p["model"].topic_word().numpy())
        for p in facts["curve"]
    }
    points = [{"key": f"{key}@{int(p['round'])}", "round": p["round"], "bytes": p["bytes"]} for p in facts["curve"]]
    doc_topics = None if evaluation is None else fitted.doc_topics(evaluation.matrix)
    labels = None if evaluation is None else evaluation.labels
    scores = score(fitted.topic_word, doc_topics, labels, terms, vectors, run)
    logger.info(
        "fednmf %s, %d topics: WE coherence %s (%.1f s, %d rounds)",
        method,
        topics,
        _fmt(scores["we_coherence"]),
        seconds,
        facts["rounds"],
    )
    return MethodResult(
        method,
        topics,
        scores,
        seconds,
        facts["rounds"],
        facts["bytes"],
        points,
        {key: fitted, **snapshots},
        facts.get("participation"),
        repeat,
    )


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def model_key(method: str, topics: int, repeat: int = 0) -> str:
    """A model's name in the sweep's tables and the organisations' scores: ``<method>-<topics>``,
    and ``<method>-<topics>-r<repeat>`` for the repeats after the first."""
    return f"{method}-{topics}" if repeat == 0 else f"{method}-{topics}-r{repeat}"


def run_sweep(
    run: FedNMFRunConfig,
    organisations: Mapping[str, BowCorpus],
    vocabulary: pd.DataFrame,
    vectors: Any,
    progress: bool = True,
) -> list[MethodResult]:
    """Every method at every number of topics, ``repeats`` times, trained on the organisations'
    training documents (Tables III-IV, Fig. 2, and Fig. 3's snapshots at ``curve_topics`` in the
    first repeat), the paper's pooled SVM on all their documents beside (the same documents in
    every repeat); each result holds its models for the organisations' scores."""
    train = {org: bow.subset("train").matrix for org, bow in organisations.items()}
    evaluation = Evaluation.of(organisations, run.evaluate.max_documents, run.seed)
    settings = [(r, k, m) for r in range(run.repeats) for k in run.topics for m in run.methods]
    results = []
    for repeat, topics, method in tqdm(settings, desc="fednmf sweep", disable=not progress):
        curve = repeat == 0 and topics == run.evaluate.curve_topics and trained_federated(method)
        results.append(
            run_method(
                method, run.repeat(repeat), topics, train, vocabulary, evaluation, vectors, curve, progress, repeat
            )
        )
    return results


def run_heterogeneity(
    run: FedNMFRunConfig,
    organisations: Mapping[str, BowCorpus],
    vocabulary: pd.DataFrame,
    vectors: Any,
    progress: bool = True,
) -> tuple[list[dict[str, Any]], dict[str, Fitted]]:
    """Fig. 4: the pooled training documents partitioned again into K simulated organisations
    with label skew alpha (one setting varied at a time, the other at alpha 1 and the corpus's
    K), and ``heterogeneity.methods`` trained on them. Returns the rows (each with the ``key``
    of its model) and the models, which the corpus's own organisations score as the main sweep's."""
    config = run.heterogeneity
    empty = [name for name in ("alphas", "clients", "methods") if not getattr(config, name)]
    if not config.enabled or empty:
        why = "enabled is false" if not config.enabled else f"{' and '.join(empty)} empty"
        logger.info("fednmf: Fig. 4 (heterogeneity) off, fednmf.heterogeneity.%s: no sweep, table or figure", why)
        return [], {}
    train = [bow.subset("train") for bow in organisations.values()]
    pooled = sp.vstack([b.matrix for b in train]).tocsr()
    labels = np.concatenate([np.asarray(b.labels, dtype=object) for b in train])
    base_k = len(organisations)
    settings = [(a, base_k) for a in config.alphas] + [
        (1.0, k) for k in config.clients if k != base_k or 1.0 not in config.alphas
    ]
    rows, models = [], {}
    for alpha, k in tqdm(sorted(set(settings)), desc="fednmf heterogeneity", disable=not progress):
        names = [f"client{i}" for i in range(k)]
        split = dirichlet_label_partition(
            list(labels), names, alpha, derive_seed(run.seed, 9000), f"fednmf alpha {alpha}, K {k}"
        )
        parts = {name: pooled[split.assignment == i] for i, name in enumerate(names)}
        for method in config.methods:
            result = run_method(method, run, config.topics, parts, vocabulary, None, vectors, False, progress)
            key = f"heterogeneity:{alpha:g}:{k}:{model_key(method, config.topics)}"
            models[key] = result.models[model_key(method, config.topics)]
            rows.append({"alpha": alpha, "clients": k, "key": key, **result.row()})
    return rows, models
