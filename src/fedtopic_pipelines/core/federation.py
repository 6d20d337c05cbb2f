"""The one federation entry point: consensus, preparation, rounds, checkpoints, result.

The Kedro train node (through ``core/training.py``) and the Flower ServerApp both call
:func:`run_federation`, with an engine that reaches the organisations' endpoints in this
process or over Flower. The stages:

1. ``vocabulary`` (unless the vocabulary is given, as in Kedro, whose consensus pipeline
   made it from the same proposals): every organisation proposes its top-N terms with
   their counts, nothing more; the server merges them (union or intersection) and applies
   the vocabulary floors, with the Kedro consensus node's function.
2. ``prepare``: every organisation vectorises against the common vocabulary, holds out
   its validation documents, builds its client, and declares its document counts, which
   cap the example count of every later update it sends.
3. Rounds: the family's strategy on a :class:`FederatedServer` until a stopping rule
   fires, with checkpoints every ``train.checkpoint_every`` rounds; a restarted run with
   the same job resumes from the last one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from fedtopic_pipelines.core.compute import resolve_device
from fedtopic_pipelines.core.config import ConsensusConfig, PreprocessConfig, PrivacyConfig, TrainConfig
from fedtopic_pipelines.core.families import get_family
from fedtopic_pipelines.core.federated.checkpoint import Checkpoints
from fedtopic_pipelines.core.federated.engine import Engine, FederationError
from fedtopic_pipelines.core.federated.family import ModelFamily, ServerPreparation, WeightsStrategy
from fedtopic_pipelines.core.federated.local import client_sample, runs_local_rounds, uses_weights
from fedtopic_pipelines.core.federated.privacy import apply_privacy
from fedtopic_pipelines.core.federated.server import FederatedServer, StoppingRule
from fedtopic_pipelines.core.federated.strategies import FedOpt
from fedtopic_pipelines.core.lineage import vocabulary_fingerprint
from fedtopic_pipelines.core.model_store import TrainedModel
from fedtopic_pipelines.core.site import OFFER, PREPARE, REVEAL, VOCABULARY, VOCABULARY_PRIVACY
from fedtopic_pipelines.core.vocab.consensus import complete_vocabulary, keyed, select_vocabulary
from fedtopic_pipelines.core.vocab.privacy import VocabularyPrivacyError

logger = logging.getLogger(__name__)


@dataclass
class FederationResult:
    """The common vocabulary, the trained model and what each organisation declared."""

    vocabulary: pd.DataFrame
    model: TrainedModel
    prepared: dict[str, dict[str, Any]] = field(default_factory=dict)


def strategy_of(family, model, config: TrainConfig):
    """The server's strategy: the family's own under FedSGD (its ``strategy``), FedAvg / FedOpt on
    its shared weights under a weights rule (with the family's projection and checks, if any); a
    family that declares no weights rule (PC-TD: its parties' statistics are summed) always its own."""
    if not uses_weights(config):
        return family.strategy(model, config)
    if isinstance(family, WeightsStrategy):
        return family.weights_strategy(model, config)
    return FedOpt(
        model, config.aggregation, config.rule, shared=family.shared_names(model), metric_names=family.loss_names
    )


def stopping_rule(config: TrainConfig, steps_per_epoch: int, validate: bool) -> StoppingRule:
    """The run's stopping rule; an epoch is ``steps_per_epoch`` rounds."""
    max_rounds = config.max_steps if config.max_steps is not None else config.max_epochs * steps_per_epoch
    every = (config.validation_every or steps_per_epoch) if validate else None
    return StoppingRule(max_rounds, config.tolerance, every, config.patience)


def agree_vocabulary(
    engine: Engine,
    organisations: Sequence[str],
    preprocess: PreprocessConfig,
    consensus: ConsensusConfig,
    privacy: PrivacyConfig | None = None,
) -> pd.DataFrame:
    """Ask every organisation for its proposal (top-N terms and counts) and merge them.

    Under ``privacy`` (its vocabulary fields travel in the payload) the counts may be noised,
    and with ``vocab_k`` > 1 and ``vocab_keyed`` the proposals are keyed digests: the server
    keeps the digests that pass, then asks (the same VOCABULARY query, ``step`` "reveal") for
    their terms only, and checks each reveal (docs/vocabulary.md).
    """
    payload: dict[str, Any] = {"preprocess": preprocess.to_params(), "vocab_consensus": consensus.to_params()}
    if privacy is not None:
        payload["privacy"] = {name: getattr(privacy, name) for name in VOCABULARY_PRIVACY}
    secure = keyed(privacy)
    noised = privacy is not None and privacy.vocab_count_noise > 0
    sent = "hashes" if secure else "terms"
    answers = engine.query(VOCABULARY, {org: {**payload, "step": OFFER} for org in organisations})
    offers = {}
    for org in organisations:
        terms, counts = list(answers[org].get(sent, [])), list(answers[org].get("counts", []))
        if len(terms) != len(counts) or not all(isinstance(t, str) for t in terms):
            raise FederationError(f"stage 'vocabulary': {org} sent {len(terms)} {sent} but {len(counts)} counts")
        if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
            raise FederationError(f"stage 'vocabulary': {org} sent counts that are not integers >= 0")
        if len(set(terms)) != len(terms):
            raise FederationError(f"stage 'vocabulary': {org} proposed a term twice")
        offers[org] = dict(zip(terms, counts, strict=True))
    for org, offer in offers.items():
        too_many = len(offer) > consensus.top_n
        too_rare = [] if noised else [t for t, c in offer.items() if c <= consensus.min_count]  # noise blurs T
        if too_many or too_rare:  # the privacy boundary is enforced where it is checked, not trusted
            raise FederationError(
                f"stage 'vocabulary': {org} proposed {len(offer)} terms (at most top_n = {consensus.top_n}) "
                f"with {len(too_rare)} at or below min_count = {consensus.min_count}"
            )
    selection = select_vocabulary(offers, consensus, privacy)  # the Kedro consensus node's function
    reveals: dict[str, dict[str, list[str]]] = {}
    if secure:
        request = {**payload, "step": REVEAL, "hashes": selection.request}
        opened = engine.query(VOCABULARY, {org: request for org in organisations})
        for org in organisations:
            hashes, terms, openings = (list(opened[org].get(k, [])) for k in ("hashes", "terms", "openings"))
            if not len(hashes) == len(terms) == len(openings):
                raise FederationError(f"stage 'vocabulary': {org} revealed {len(hashes)} digests, {len(terms)} terms")
            reveals[org] = {d: [t, o] for d, t, o in zip(hashes, terms, openings, strict=True)}
    try:
        vocabulary = complete_vocabulary(selection, offers, reveals).vocabulary
    except VocabularyPrivacyError as exc:
        raise FederationError(f"stage 'vocabulary': {exc}") from exc
    logger.info(
        "common vocabulary (%s): %d terms%s",
        consensus.merge,
        len(vocabulary),
        f" (keyed: the server read only these; privacy.vocab_k = {privacy.vocab_k})" if secure else "",
    )
    return vocabulary


def _declared(org: str, reply: Mapping[str, Any], key: str) -> int:
    value = reply.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FederationError(f"stage 'prepare': {org} declared {key} = {value!r}, not a count")
    return value


def run_federation(
    engine: Engine,
    organisations: Sequence[str],
    config: TrainConfig,
    *,
    vocabulary: pd.DataFrame | None = None,
    preprocess: PreprocessConfig | None = None,
    consensus: ConsensusConfig | None = None,
    name: str = "federated",
    scenario: str = "federated",
    trained_on: Sequence[str] | None = None,
    ghosts: int | None = None,
    progress: bool = True,
    on_round_end: Callable[[FederatedServer], None] | None = None,
) -> FederationResult:
    """Run one federation of ``organisations`` (endpoint names, in seed order) to its end.

    ``vocabulary`` skips the vocabulary stage; otherwise ``preprocess`` and ``consensus``
    say how the organisations build their proposals. ``ghosts`` marks the centralized
    scenario's single pooled client (that many ghost batches per step); ``trained_on`` the
    organisations whose documents the model saw (default: ``organisations``).
    ``on_round_end`` observes the server after every round, after any checkpoint (learning
    curves read the model there).
    """
    family = get_family(config.model.family)
    if vocabulary is None:
        if preprocess is None or consensus is None:
            raise ValueError("run_federation needs 'vocabulary', or 'preprocess' and 'consensus' to agree on one")
        vocabulary = agree_vocabulary(engine, organisations, preprocess, consensus, config.privacy)
    terms = vocabulary["term"].tolist()
    declared = _prepare(engine, organisations, config, vocabulary, preprocess)
    model = family.create_model(len(terms), config, resolve_device(config.device))
    if isinstance(family, ServerPreparation):  # what the consensus told the server: summed counts, documents
        family.prepare_server_model(model, vocabulary, declared.rows, config)
    server, checkpoints = _server(family, model, config, organisations, declared, name, scenario, ghosts, terms)

    def observe(server: FederatedServer) -> None:
        if checkpoints is not None:
            checkpoints.maybe_save(server)
        if on_round_end is not None:
            on_round_end(server)

    history = server.run(engine, progress=progress, on_round_end=observe)
    last = history[-1].loss if history else math.nan
    kept = "" if server.best_round is None else f", kept the weights of round {server.best_round + 1}"
    logger.info("%s: %d rounds, final loss %.2f%s", name, len(history), last, kept)
    trained = _trained(model, server, config, name, scenario, list(trained_on or organisations), terms)
    return FederationResult(vocabulary, trained, {org: dict(declared.replies[org]) for org in organisations})


def _trained(
    model: Any,
    server: FederatedServer,
    config: TrainConfig,
    name: str,
    scenario: str,
    trained_on: list[str],
    terms: list[str],
) -> TrainedModel:
    """The run's model: the global model's tensors as they end (without another copy: a copy is
    320 MB for Word2Vec's 200k x 200 tables; .cpu() copies only from a GPU), its history and stops."""
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return TrainedModel(
        name,
        scenario,
        trained_on,
        len(terms),
        config,
        state,
        list(server.history),
        server.stopped_early,
        server.best_round,
        vocabulary_fingerprint(terms),
    )


@dataclass
class _Declared:
    """What the organisations declared when they prepared: their replies, training and validation
    documents, and what an epoch is counted in (documents, or a family's examples such as pairs)."""

    replies: Mapping[str, Mapping[str, Any]]
    rows: dict[str, int]
    held: dict[str, int]
    epoch: dict[str, int]


def _prepare(
    engine: Engine,
    organisations: Sequence[str],
    config: TrainConfig,
    vocabulary: pd.DataFrame,
    preprocess: PreprocessConfig | None,
) -> _Declared:
    """Every organisation prepares its data over the vocabulary and declares its counts; a site
    holds out at most its share of validation documents (and at least 2): more is a false claim."""
    payload: dict[str, Any] = {"train": config.to_params(), "terms": vocabulary["term"].tolist()}
    if "frequency" in vocabulary:  # the consensus's summed counts (Word2Vec's noise and subsampling read them)
        payload["frequencies"] = [float(f) for f in vocabulary["frequency"]]
    if preprocess is not None:
        payload["preprocess"] = preprocess.to_params()
    prepared = engine.query(PREPARE, {org: {**payload, "index": i} for i, org in enumerate(organisations)})
    rows = {org: _declared(org, prepared[org], "train_rows") for org in organisations}
    held = {org: _declared(org, prepared[org], "validation_rows") for org in organisations}
    epoch = {
        org: _declared(org, prepared[org], "epoch_examples") if "epoch_examples" in prepared[org] else rows[org]
        for org in organisations
    }
    validate = config.validation_fraction > 0
    for org in organisations:
        fraction = config.validation_fraction
        most = math.ceil(rows[org] * fraction / (1 - fraction)) + 2 if validate else 0
        if held[org] > most:
            raise FederationError(
                f"stage 'prepare': {org} declared {held[org]} validation documents for {rows[org]} training documents; "
                f"'train.validation_fraction' = {fraction} allows at most {most}"
            )
    return _Declared(prepared, rows, held, epoch)


def _server(
    family: ModelFamily,
    model: Any,
    config: TrainConfig,
    organisations: Sequence[str],
    declared: _Declared,
    name: str,
    scenario: str,
    ghosts: int | None,
    terms: list[str],
) -> tuple[FederatedServer, Checkpoints | None]:
    """The server of the run: the family's strategy, what each organisation may claim, the
    stopping rule, client sampling, the privacy defences of a federated scenario, and its
    checkpoints (resumed when one exists)."""
    rows = declared.rows
    local_rounds = runs_local_rounds(family, config)
    if local_rounds:  # a round is every sampled organisation's local epochs; an update weighs its documents
        per_epoch, capacity = 1, dict(rows)
    else:
        per_epoch = family.steps_per_epoch(max(declared.epoch.values()), config, ghosts)
        capacity = {org: family.max_update_examples(n, config, ghosts) for org, n in rows.items()}
    server = FederatedServer(
        strategy_of(family, model, config),
        stopping_rule(config, per_epoch, config.validation_fraction > 0),
        name=name,
        capacity=capacity,
        validation_capacity=declared.held,
        sample=client_sample(organisations, config.aggregation.client_fraction, config.seed),
    )
    if scenario == "federated":  # the references (pooled, each alone) train without a defence
        apply_privacy(server, config, len(organisations), name, rows)
    checkpoints = Checkpoints(config, name, organisations, terms, declared.replies) if config.checkpoint_every else None
    if checkpoints is not None:
        if local_rounds:  # clients with local parameters keep copies of them under this job's name
            server.context = {**server.context, "job": checkpoints.path.stem, "checkpointed": 0}
        checkpoints.resume(server)
    return server, checkpoints
