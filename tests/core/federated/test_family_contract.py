"""The contract every registered model family must pass, parametrised over the registry.

Adding a family adds one entry to ``CASES`` (its small training block and data), nothing
more; ``test_every_registered_family_has_a_case`` fails until it is there.

1. federated equals centralized on the concatenated batches, where the family claims it;
2. the in-process engine and the Flower grid engine (the real ClientApp and records)
   give identical results, and so does the Kedro path (matrices prepared by the pipelines);
3. an update of the wrong kind, shape or index, or with non-finite values, is rejected
   without touching the model;
4. checkpoint/resume gives the uninterrupted run's exact result;
5. nothing but the family's declared update kind (and validation metrics) leaves a client.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedtopic_pipelines.core.capabilities import DataKind
from fedtopic_pipelines.core.config import (
    ConsensusConfig,
    PreprocessConfig,
    TrainConfig,
)
from fedtopic_pipelines.core.families import families, get_family
from fedtopic_pipelines.core.federated.client import FamilyClient
from fedtopic_pipelines.core.federated.engine import InProcessEngine
from fedtopic_pipelines.core.federated.family import LocalRounds, LocalState, PrivateSteps, Streaming
from fedtopic_pipelines.core.federated.messages import Instruction, Update, UpdateKind
from fedtopic_pipelines.core.federated.server import FederatedServer, StoppingRule
from fedtopic_pipelines.core.federation import run_federation
from fedtopic_pipelines.core.seeds import derive_seed
from fedtopic_pipelines.core.site import FolderEndpoint, MemoryEndpoint, read_raw, run_sites
from fedtopic_pipelines.core.training import train_scenarios
from tests.conftest import TINY_EMBEDDING_SIZE, make_tiny_raw_tables, poisson_matrices

CPU = torch.device("cpu")


class ConcatenatedStreams:
    """The centralized trainer over exactly the organisations' own batch streams: each step,
    every organisation's batches (each with its own noise) together. Federated = centralized
    on the concatenated batches is the claim the contract checks (docs/batchnorm.md)."""

    def __init__(self, streams) -> None:
        self.streams = list(streams)

    def next_batches(self):
        return [pair for stream in self.streams for pair in stream.next_batches()]

    def state_dict(self):  # pooled BatchNorm's exchanges put the stream back after each
        return {f"{i}.{k}": v for i, stream in enumerate(self.streams) for k, v in stream.state_dict().items()}

    def load_state_dict(self, state) -> None:
        for i, stream in enumerate(self.streams):
            stream.load_state_dict({k.removeprefix(f"{i}."): v for k, v in state.items() if k.startswith(f"{i}.")})


@dataclass(frozen=True)
class FamilyCase:
    """What the contract needs to run a family small: a train block, organisations' data over
    a vocabulary of ``vocab_size`` terms, settings for the engines that start from raw text
    (the Flower ClientApp), and, for a family that claims exact federation, how its
    organisations' streams concatenate into the centralized trainer's."""

    train: dict[str, Any]
    data: Callable[[], dict[str, Any]]
    vocab_size: int
    preprocess: dict[str, Any]
    consensus: dict[str, Any]
    concatenated: Callable[[list], Any] | None = None
    variants: tuple[dict[str, Any], ...] = ()  # model options the exactness check also runs


PREPROCESS = {"min_df": 1, "max_df": 1.0, "min_token_length": 2, "processes": 1}
CONSENSUS = {"top_n": 50, "min_count": 0, "merge": "union"}


def bags() -> dict[str, Any]:
    """Three organisations' bags of words (30, 21 and 45 documents over 40 words)."""
    return dict(zip(("a", "b", "c"), poisson_matrices((30, 21, 45), 40), strict=True))


CASES: dict[str, FamilyCase] = {
    "prodlda": FamilyCase(
        train={
            "model": {"family": "prodlda", "n_topics": 3, "hidden_sizes": [16, 16]},
            "batch_size": 8,
            "max_steps": 10,
            "seed": 7,
            "device": "cpu",
        },
        data=bags,
        vocab_size=40,
        preprocess=PREPROCESS,
        consensus=CONSENSUS,
        concatenated=ConcatenatedStreams,
        variants=(
            {"normalization": "layer"},
            {"normalization": "none"},
            {"normalization": "layer", "word_bias": True},
            {"normalization": "layer", "decoder_normalization": "centred", "word_bias": True},
            {"normalization": "layer", "decoder_normalization": "standardised"},
            {"normalization": "layer", "decoder_normalization": "batch"},
            {"normalization": "pooled_batch"},
            {"normalization": "layer", "decoder_normalization": "pooled_batch"},
        ),
    ),
    **{
        family: FamilyCase(
            train={
                "model": {
                    "family": family,
                    "n_topics": 3,
                    "hidden_sizes": [16, 16],
                    "embedding_size": TINY_EMBEDDING_SIZE,
                },
                "batch_size": 8,
                "max_steps": 10,
                "seed": 7,
                "device": "cpu",
            },
            data=lambda: contextual_data((30, 21, 45), 40, TINY_EMBEDDING_SIZE),
            vocab_size=40,
            preprocess=PREPROCESS,
            consensus=CONSENSUS,
            concatenated=ConcatenatedStreams,
            variants=(
                ({"normalization": "layer"}, {"normalization": "pooled_batch"})
                if family == "combinedtm"
                else ({"normalization": "pooled_batch"},)  # ZeroShotTM: batch or pooled_batch only
            ),
        )
        for family in ("combinedtm", "zeroshottm")
    },
    "word2vec": FamilyCase(
        train={
            "model": {"family": "word2vec", "dimension": 8, "window": 2, "negatives": 3, "validation_pairs": 300},
            "optimizer": {"name": "sgd", "lr": 0.5},
            "batch_size": 16,
            "max_steps": 10,
            "seed": 7,
            "device": "cpu",
        },
        data=lambda: word_sequences((30, 21, 45), 40),
        vocab_size=40,
        preprocess=PREPROCESS,
        consensus=CONSENSUS,
        concatenated=ConcatenatedStreams,
        variants=(
            {"negative_sharing": "pair", "reduction": "mean"},
            {"subsample": 0.0, "reduction": "mean"},
            {"subsample": 0.01, "window": 5},
        ),
    ),
    "nmf": FamilyCase(
        train={
            "model": {"family": "nmf", "n_topics": 3, "mi_weight": 0.1, "inference_epochs": 3},
            "optimizer": {"name": "adagrad", "lr": 0.05},
            "aggregation": {"rule": "fedadam", "local_epochs": 2},
            "batch_size": 8,
            "max_steps": 10,
            "seed": 7,
            "device": "cpu",
        },
        data=bags,
        vocab_size=40,
        preprocess=PREPROCESS,
        consensus=CONSENSUS,
    ),
    "nmf_exact": FamilyCase(
        train={
            "model": {"family": "nmf_exact", "n_topics": 3, "alpha_w": 0.01, "l1_ratio": 0.5},
            "max_steps": 10,
            "seed": 7,
            "device": "cpu",
        },
        data=bags,
        vocab_size=40,
        preprocess=PREPROCESS,
        consensus=CONSENSUS,
    ),
    "lda": FamilyCase(
        train={
            "model": {"family": "lda", "n_topics": 3, "iterations": 20},
            "max_steps": 10,
            "seed": 7,
            "device": "cpu",
        },
        data=bags,
        vocab_size=40,
        preprocess=PREPROCESS,
        consensus=CONSENSUS,
    ),
    "pctd": FamilyCase(
        train={
            # noise on (sigma 0.5), with eq. 13 over GloVe: the noise streams must agree across engines
            "model": {"family": "pctd", "n_topics": 3, "sigma": 0.5, "consistency_frequent": 50},
            "max_steps": 10,
            "seed": 7,
            "device": "cpu",
        },
        data=lambda: word_sequences((30, 21, 45), 40),
        vocab_size=40,
        preprocess=PREPROCESS,
        consensus=CONSENSUS,
    ),
}


def word_sequences(sizes: tuple[int, ...], vocab: int) -> dict[str, Any]:
    """Organisations' documents as token ids (Word2Vec), 2 to 12 tokens each, Zipf-like
    frequencies; the vocabulary's counts are what all of them hold together."""
    from fedtopic_pipelines.core.families.word2vec import Sentences

    rng = np.random.default_rng(3)
    weights = 1.0 / np.arange(1, vocab + 1)
    docs = {
        org: [rng.choice(vocab, size=rng.integers(2, 13), p=weights / weights.sum()) for _ in range(n)]
        for org, n in zip(("a", "b", "c")[: len(sizes)], sizes, strict=True)
    }
    counts = np.bincount(np.concatenate([t for d in docs.values() for t in d]), minlength=vocab).astype(float)
    return {
        org: Sentences(np.concatenate(d), np.concatenate([[0], np.cumsum([len(t) for t in d])]), counts)
        for org, d in docs.items()
    }


def _raw_text_config(name: str, spec: FamilyCase, model: Path, **changes: Any) -> TrainConfig:
    """A family's config for the paths that start from raw text: a contextual family's sites
    embed their documents with the tiny test encoder (``tests/conftest.py``)."""
    if _contextual(name):
        changes["embeddings"] = {"model": str(model)}
    return _config(spec, **changes)


def contextual_data(sizes: tuple[int, ...], vocab: int, dim: int) -> dict[str, Any]:
    """Organisations' bags of words with random sentence embeddings (contextual families)."""
    from fedtopic_pipelines.core.families.ctm import ContextualData

    rng = np.random.default_rng(1)
    matrices = poisson_matrices(sizes, vocab)
    return {
        org: ContextualData(m, rng.normal(size=(m.shape[0], dim)).astype(np.float32))
        for org, m in zip(("a", "b", "c"), matrices, strict=True)
    }


def _contextual(name: str) -> bool:
    return get_family(name).capabilities.data_kind == DataKind.CONTEXTUAL


def test_every_registered_family_has_a_case() -> None:
    assert set(CASES) == set(families())


@pytest.fixture(params=families())
def case(request) -> tuple[str, FamilyCase]:
    return request.param, CASES[request.param]


def _config(case: FamilyCase, **changes: Any) -> TrainConfig:
    return TrainConfig.from_params({**case.train, **changes})


def _states_equal(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# 0 ------------------------------------------------------------------------------------
def test_the_family_declares_what_it_does(case) -> None:
    """Its capabilities are its config model's, and agree with what it implements: a round is a
    batch step or its own local computation; a model that claims a word distribution has one;
    sample-level DP needs per-document gradients; a weights update never trains under FedSGD."""
    name, spec = case
    family = get_family(name)
    caps = family.capabilities
    assert caps is family.config_type.capabilities is _config(spec).model.capabilities
    assert isinstance(family, Streaming | LocalRounds)
    model = family.create_model(spec.vocab_size, _config(spec), CPU)
    assert caps.probabilistic == callable(getattr(model, "word_distribution", None))
    if isinstance(family, PrivateSteps):
        assert "dp" in caps.privacy
    if family.update_kind is UpdateKind.WEIGHTS:
        assert "fedsgd" not in caps.rules
    assert _config(spec).rule in caps.rules


# 1 ------------------------------------------------------------------------------------
def test_federated_equals_centralized_on_the_concatenated_batches(case) -> None:
    name, spec = case
    family = get_family(name)
    if not family.exact_federation:
        pytest.skip(f"family '{name}' does not claim federated = centralized")
    for variant in ({}, *spec.variants):
        _check_exact_federation(family, spec, _config(spec, model={**spec.train["model"], **variant}))


def _check_exact_federation(family, spec: FamilyCase, config: TrainConfig) -> None:
    data = spec.data()

    def streams():
        return [family.stream(d, config, derive_seed(config.seed, i), CPU) for i, d in enumerate(data.values())]

    def train(federated: bool) -> dict[str, torch.Tensor]:
        def model():
            return family.create_model(spec.vocab_size, config, CPU).double()

        if federated:
            clients = [FamilyClient(org, family, model(), s) for org, s in zip(data, streams(), strict=True)]
        else:
            clients = [FamilyClient("server", family, model(), spec.concatenated(streams()))]
        global_model = model()
        server = FederatedServer(family.strategy(global_model, config), StoppingRule(config.max_steps))
        server.run(InProcessEngine(clients), progress=False)
        return global_model.state_dict()

    fed, central = train(True), train(False)
    worst = max(float((fed[k] - central[k]).abs().max()) for k in fed)
    assert worst <= 1e-10, (config.model, worst)
    start = family.create_model(spec.vocab_size, config, CPU).double().state_dict()
    assert max(float((fed[k] - start[k]).abs().max()) for k in fed) > 1e-3  # the weights did move


# 2 ------------------------------------------------------------------------------------
def _write_raw(tmp_path: Path) -> dict[str, Path]:
    paths = {}
    for org, table in make_tiny_raw_tables().items():
        folder = tmp_path / "raw" / org
        folder.mkdir(parents=True)
        table.to_parquet(folder / "part-00000.parquet")
        paths[org] = folder
    return paths


def _in_process_and_on_the_grid(spec: FamilyCase, config: TrainConfig, tmp_path: Path):
    """The tiny raw tables' federation run by the in-process engine and on Flower's own grid
    objects (ClientApp, Message, Context) in one process: the raw folders and both results."""
    from fedtopic_pipelines.flower.client_app import app as client_app
    from fedtopic_pipelines.flower.federation import Job, run_flower_federation
    from tests.flower.local_grid import LocalGrid

    preprocess = PreprocessConfig.model_validate(spec.preprocess)
    consensus = ConsensusConfig.model_validate(spec.consensus)
    paths = _write_raw(tmp_path)
    orgs = list(paths)
    endpoints = [FolderEndpoint(org, paths[org], tmp_path / "cache-a" / org) for org in orgs]
    in_process = run_federation(InProcessEngine(endpoints), orgs, config, preprocess=preprocess, consensus=consensus)
    nodes = {
        100 + i: {"organisation": org, "data-path": str(paths[org]), "cache-dir": str(tmp_path / "cache-b" / org)}
        for i, org in enumerate(reversed(orgs))  # node order differs from the job's
    }
    job = Job(orgs, spec.preprocess, spec.consensus, config.to_params())
    flower, _ = run_flower_federation(LocalGrid(client_app, nodes), job)
    return paths, in_process, flower


def test_the_in_process_flower_grid_and_kedro_paths_give_identical_results(case, tmp_path, tiny_sentence_model) -> None:

    name, spec = case
    config = _raw_text_config(name, spec, tiny_sentence_model, validation_fraction=0.25, validation_every=4)
    preprocess = PreprocessConfig.model_validate(spec.preprocess)
    consensus = ConsensusConfig.model_validate(spec.consensus)
    paths, in_process, flower = _in_process_and_on_the_grid(spec, config, tmp_path)
    orgs = list(paths)

    raw = {org: read_raw(paths[org]) for org in orgs}
    vocabulary, bows, texts = run_sites(raw, preprocess, consensus, texts="train")
    matrices = {org: bow.subset("train").matrix for org, bow in bows.items()}
    # the Kedro path: the sequences node on the training texts
    if get_family(name).capabilities.data_kind == DataKind.SEQUENCES:
        import pandas as pd

        from fedtopic_pipelines.core.families.word2vec import sentences_from_frames

        terms, counts = vocabulary["term"].tolist(), vocabulary["frequency"].tolist()
        matrices = {
            org: sentences_from_frames([pd.DataFrame({"tokens": [" ".join(t) for t in docs]})], terms, counts)[0]
            for org, docs in texts.items()
        }
    if _contextual(name):  # the Kedro path: the embed node's step, then the bag of words' train rows
        from fedtopic_pipelines.core.families.ctm import contextual_split
        from fedtopic_pipelines.core.site import Site

        matrices = {
            org: contextual_split(
                bow,
                Site(org).embed(raw[org], bow.doc_ids.tolist(), config.embeddings, tmp_path / "emb" / org),
                "train",
                org,
            )
            for org, bow in bows.items()
        }
    kedro = train_scenarios(matrices, config.replace(scenarios=("federated",)), progress=False, vocabulary=vocabulary)

    assert in_process.vocabulary["term"].tolist() == flower.vocabulary["term"].tolist() == vocabulary["term"].tolist()
    assert len(in_process.model.history) == config.max_steps
    assert _states_equal(in_process.model.state, flower.model.state)
    assert _states_equal(in_process.model.state, kedro["federated"].state)
    assert [r.loss for r in in_process.model.history] == [r.loss for r in flower.model.history]
    for run in (in_process, flower):  # both engines time every organisation's answer (the progress log's)
        assert all(set(r.client_seconds) == set(raw) and r.seconds > 0 for r in run.model.history)


def test_pooled_batchnorm_exchanges_cross_the_flower_grid_unchanged(tmp_path) -> None:
    """``pooled_batch``'s exchanges (sums, derivatives, then the gradient) go through the Flower
    records and the ClientApp, which may rebuild a client for every message, and give the
    in-process model to the last bit."""
    spec = CASES["prodlda"]
    config = _config(spec, model={**spec.train["model"], "normalization": "pooled_batch"}, max_steps=4)
    _, in_process, flower = _in_process_and_on_the_grid(spec, config, tmp_path)
    assert [r.exchanges for r in flower.model.history] == [5] * 4
    assert _states_equal(in_process.model.state, flower.model.state)
    assert [r.loss for r in in_process.model.history] == [r.loss for r in flower.model.history]


# 3 ------------------------------------------------------------------------------------
def _corruptions(kind: UpdateKind) -> dict[str, Callable[[Update], Update]]:
    def first(u: Update) -> str:
        return next(iter(u.tensors))

    def with_tensor(u: Update, value) -> Update:
        return dataclasses.replace(u, tensors={**u.tensors, first(u): value})

    other_kind = UpdateKind.WEIGHTS if kind is not UpdateKind.WEIGHTS else UpdateKind.GRADIENTS
    corruptions = {
        "kind": lambda u: dataclasses.replace(u, kind=other_kind),
        "shape": lambda u: with_tensor(u, u.tensors[first(u)].reshape(-1)[:-1]),
        "nan": lambda u: with_tensor(u, torch.full_like(u.tensors[first(u)], float("nan"))),
        "inf": lambda u: with_tensor(u, torch.full_like(u.tensors[first(u)], float("inf"))),
    }
    if kind is UpdateKind.SPARSE_ROWS:
        corruptions["index"] = lambda u: dataclasses.replace(
            u, row_indices={**u.row_indices, first(u): u.row_indices[first(u)] + 10**9}
        )
    else:
        corruptions["index"] = lambda u: dataclasses.replace(u, row_indices={first(u): torch.tensor([0])})
    return corruptions


class Corrupting:
    """An organisation that answers like the real one, then corrupts its training updates."""

    def __init__(self, inner: MemoryEndpoint, corrupt: Callable[[Update], Update]) -> None:
        self.inner, self.name, self.corrupt = inner, inner.name, corrupt

    def query(self, action: str, payload: dict) -> dict:
        return self.inner.query(action, payload)

    def handle(self, instruction: Instruction) -> Update:
        update = self.inner.handle(instruction)
        return update if update.kind is UpdateKind.METRICS else self.corrupt(update)


class Silent(Corrupting):
    """The same organisation never answering a round."""

    def handle(self, instruction: Instruction) -> Update:
        if instruction.config.get("action") != "evaluate":
            raise TimeoutError("no reply")
        return self.inner.handle(instruction)


@pytest.mark.parametrize("corruption", ["kind", "shape", "index", "nan", "inf"])
def test_a_bad_update_is_rejected_without_touching_the_model(case, corruption) -> None:
    name, spec = case
    family = get_family(name)
    config = _config(spec, max_steps=4)
    data = spec.data()
    corrupt = _corruptions(family.update_kind)[corruption]

    def run(wrap) -> Any:
        endpoints = [MemoryEndpoint(org, d) for org, d in data.items()]
        endpoints[1] = wrap(endpoints[1])
        vocabulary = _vocabulary(spec.vocab_size)
        return run_federation(InProcessEngine(endpoints), list(data), config, vocabulary=vocabulary, progress=False)

    attacked = run(lambda e: Corrupting(e, corrupt)).model
    silent = run(lambda e: Silent(e, corrupt)).model
    bad = list(data)[1]
    assert all(bad in r.rejected for r in attacked.history), [r.rejected for r in attacked.history]
    assert all(bad in r.failed for r in silent.history)
    assert _states_equal(attacked.state, silent.state)  # as if the organisation had sent nothing


class CorruptingExchange(Corrupting):
    """An organisation that corrupts its answer to one pooled-BatchNorm exchange of every step."""

    def __init__(self, inner: MemoryEndpoint, phase: int, corrupt: Callable[[str, torch.Tensor], torch.Tensor]) -> None:
        super().__init__(inner, lambda u: u)
        self.phase, self.change = phase, corrupt

    def handle(self, instruction: Instruction) -> Update:
        update = self.inner.handle(instruction)
        if instruction.config.get("pooled_phase") != self.phase or update.kind is not UpdateKind.POOLED_NORM:
            return update
        return dataclasses.replace(update, tensors={k: self.change(k, v) for k, v in update.tensors.items()})


@pytest.mark.parametrize(
    ("phase", "corrupt"),
    [
        (0, lambda _, t: t * 1e12),  # sums far beyond any batch's
        # the inputs x 1000: a valid variance within the limits, far from the other organisations' (the screen)
        (1, lambda name, t: t * (1e3 if name.endswith("s1") else 1e6)),
        (0, lambda name, t: -t.abs() if name.endswith("s2") else t),  # a negative sum of squares
        (1, lambda _, t: torch.full_like(t, float("nan"))),
        (2, lambda _, t: torch.full_like(t, float("inf"))),  # a derivative: the step's exchanges start again
    ],
    ids=["huge-sum", "scaled-sum", "negative-variance", "nan-sum", "inf-derivative"],
)
def test_a_bad_pooled_exchange_leaves_the_organisation_out_of_the_step(phase, corrupt, caplog) -> None:
    spec = CASES["prodlda"]
    config = _config(spec, model={**spec.train["model"], "normalization": "pooled_batch"}, max_steps=3)
    data = spec.data()

    def run(wrap) -> Any:
        endpoints = [MemoryEndpoint(org, d) for org, d in data.items()]
        endpoints[1] = wrap(endpoints[1])
        vocabulary = _vocabulary(spec.vocab_size)
        return run_federation(InProcessEngine(endpoints), list(data), config, vocabulary=vocabulary, progress=False)

    attacked = run(lambda e: CorruptingExchange(e, phase, corrupt)).model
    silent = run(lambda e: Silent(e, lambda u: u)).model
    bad = list(data)[1]
    assert bad in attacked.history[0].rejected, attacked.history[0].rejected
    assert all(bad not in r.client_bytes for r in attacked.history)  # rejected, or sitting out (phase > 0)
    assert _states_equal(attacked.state, silent.state)  # as if the organisation had sent nothing
    if phase > 0:
        assert "start again without them" in caplog.text


def test_a_bad_gradient_after_pooled_exchanges_voids_the_step_and_benches_its_sender() -> None:
    """Its documents are in the step's pooled sums, so the others' gradients would carry parts
    only its own cancels: no step is taken, and it sits out 1, then 2, then 4 rounds."""
    spec = CASES["prodlda"]
    config = _config(spec, model={**spec.train["model"], "normalization": "pooled_batch"}, max_steps=7)
    data = spec.data()
    endpoints = [MemoryEndpoint(org, d) for org, d in data.items()]
    nan = _corruptions(UpdateKind.GRADIENTS)["nan"]
    endpoints[1] = Corrupting(endpoints[1], lambda u: nan(u) if u.kind is UpdateKind.GRADIENTS else u)
    result = run_federation(
        InProcessEngine(endpoints), list(data), config, vocabulary=_vocabulary(spec.vocab_size), progress=False
    )
    history, bad = result.model.history, list(data)[1]
    voided = [True, False, True, False, False, True, False]
    assert [r.voided for r in history] == voided
    assert [bad in r.rejected for r in history] == voided  # asked only in those rounds
    first = run_federation(
        InProcessEngine(endpoints), list(data), config.replace(max_steps=1), vocabulary=_vocabulary(spec.vocab_size)
    )
    start = get_family("prodlda").create_model(spec.vocab_size, config, CPU).state_dict()
    assert _states_equal(first.model.state, start)  # the voided step moved nothing
    assert not _states_equal(result.model.state, start)


def _vocabulary(size: int):
    import pandas as pd

    return pd.DataFrame({"term": [f"w{j}" for j in range(size)]})


# 4 ------------------------------------------------------------------------------------
class Killed(Exception):
    """Stands for the server process being killed."""


class KillingEngine(InProcessEngine):
    def __init__(self, endpoints, at: int) -> None:
        super().__init__(endpoints)
        self.at = at

    def broadcast(self, instruction: Instruction):
        if instruction.round == self.at and instruction.config.get("action") != "evaluate":
            raise Killed
        return super().broadcast(instruction)


@pytest.mark.parametrize("validation", [0.0, 0.25])
def test_checkpoint_resume_gives_the_uninterrupted_result(case, validation, tmp_path) -> None:
    _, spec = case
    config = _config(
        spec,
        max_steps=10,
        validation_fraction=validation,
        validation_every=3,
        checkpoint_every=3,
        checkpoint_dir=str(tmp_path / "ckpt"),
    )
    data = spec.data()
    vocabulary = _vocabulary(spec.vocab_size)

    def endpoints():
        return [MemoryEndpoint(org, d) for org, d in data.items()]

    plain = config.replace(checkpoint_every=0, checkpoint_dir=None)
    reference = run_federation(InProcessEngine(endpoints()), list(data), plain, vocabulary=vocabulary, progress=False)
    with pytest.raises(Killed):
        run_federation(KillingEngine(endpoints(), at=8), list(data), config, vocabulary=vocabulary, progress=False)
    counted = []

    class Counting(InProcessEngine):
        def broadcast(self, instruction):
            if instruction.config.get("action") != "evaluate":
                counted.append(instruction.round)
            return super().broadcast(instruction)

    observed: list[int] = []
    resumed = run_federation(
        Counting(endpoints()),
        list(data),
        config,
        vocabulary=vocabulary,
        progress=False,
        on_round_end=lambda server: observed.append(server.next_round),
    )
    assert counted == [6, 7, 8, 9]  # only the rounds after the last checkpoint ran again
    assert observed == [7, 8, 9, 10]  # the observer sees every round that ran, checkpoints still written
    assert [r.round for r in resumed.model.history] == list(range(10))
    assert [r.loss for r in resumed.model.history] == [r.loss for r in reference.model.history]
    assert _states_equal(resumed.model.state, reference.model.state)


# 5 ------------------------------------------------------------------------------------
class Recording(Corrupting):
    def __init__(self, inner, sent: list) -> None:
        super().__init__(inner, lambda u: u)
        self.sent = sent

    def query(self, action: str, payload: dict) -> dict:
        answer = self.inner.query(action, payload)
        self.sent.append((action, answer))
        return answer

    def handle(self, instruction: Instruction) -> Update:
        update = self.inner.handle(instruction)
        self.sent.append(("round", update))
        return update


ANSWER_KEYS = {
    "vocabulary": {"terms", "counts"},
    # counts only: Word2Vec declares the pairs of an epoch and the documents too short to give a pair
    "prepare": {"train_rows", "validation_rows", "data_fingerprint", "epoch_examples", "dropped_fewer_than_two_terms"},
}


@pytest.mark.parametrize("endpoints", ["memory", "folder"])
def test_nothing_but_the_declared_update_kind_leaves_a_client(case, endpoints, tmp_path, tiny_sentence_model) -> None:
    """Every answer and update an organisation sends, in process with prepared data (the Kedro
    path) and with its own documents and cache (the endpoint a Flower node runs, with the
    vocabulary stage): counts, a fingerprint, its top-N proposal, and updates of its kind."""
    name, spec = case
    family = get_family(name)
    config = _raw_text_config(name, spec, tiny_sentence_model, validation_fraction=0.25, validation_every=2)
    consensus = ConsensusConfig.model_validate({**spec.consensus, "top_n": 9})
    sent: list = []
    if endpoints == "memory":
        data = spec.data()
        inner = [MemoryEndpoint(org, d) for org, d in data.items()]
        stages = {"vocabulary": _vocabulary(spec.vocab_size)}
    else:
        paths = _write_raw(tmp_path)
        inner = [FolderEndpoint(org, path, tmp_path / "cache" / org) for org, path in paths.items()]
        stages = {"preprocess": PreprocessConfig.model_validate(spec.preprocess), "consensus": consensus}
    orgs = [e.name for e in inner]
    engine = InProcessEngine([Recording(e, sent) for e in inner])
    result = run_federation(engine, orgs, config, progress=False, **stages)
    trained = result.model.to_model()
    client_model = family.create_model(spec.vocab_size, config, CPU)
    if isinstance(family, LocalState):
        family.init_local(client_model, next(iter(spec.data().values())), config, 0)
    local = {n for n, _ in client_model.named_parameters()} - set(family.shared_names(trained))
    strategy = family.strategy(trained, config)
    updates = [u for what, u in sent if what == "round"]
    assert {u.kind for u in updates} == {family.update_kind, UpdateKind.METRICS}
    for update in updates:
        # only what the server's strategy accepts (shared parameters, or the family's declared
        # statistics of them), never a local parameter or data
        assert not set(update.tensors) & local
        if update.kind is not UpdateKind.METRICS:
            strategy.validate(update, None)
        assert all(isinstance(v, torch.Tensor) for v in [*update.tensors.values(), *update.statistics.values()])
        assert set(update.metrics) <= {*family.loss_names, "validation_loss"}
        assert all(isinstance(v, float) for v in update.metrics.values())
        if update.kind is UpdateKind.METRICS:
            assert not update.tensors and not update.statistics and set(update.metrics) <= {"validation_loss"}
    if _contextual(name):  # the sentence embeddings never travel, in any form a row of them has
        if endpoints == "memory":
            embedded = np.concatenate([d.embeddings for d in data.values()])
        else:
            embedded = np.concatenate([np.load(tmp_path / "cache" / o / "embeddings" / "embeddings.npy") for o in orgs])
        assert len(embedded) and np.abs(embedded).sum() > 0
        for update in updates:
            for tensor in [*update.tensors.values(), *update.statistics.values()]:
                if tensor.ndim and tensor.shape[-1] == embedded.shape[1]:
                    rows = tensor.detach().double().reshape(-1, embedded.shape[1]).numpy()
                    assert not np.isclose(rows[:, None, :], embedded[None], atol=1e-6).all(axis=2).any()
    answers = [(what, a) for what, a in sent if what != "round"]
    assert {what for what, _ in answers} == ({"prepare"} if endpoints == "memory" else {"vocabulary", "prepare"})
    for what, answer in answers:
        extra = {k for k in answer if not k.startswith("dropped_no_vocabulary_term_")} - ANSWER_KEYS[what]
        assert not extra, extra
        if what == "vocabulary":
            assert len(answer["terms"]) <= consensus.top_n  # the proposal, never the full counts
            assert all(c > consensus.min_count for c in answer["counts"])
        else:
            assert all(isinstance(answer[k], int) for k in ("train_rows", "validation_rows"))
            assert all(isinstance(answer[k], int) for k in answer if k.startswith(("epoch_", "dropped_")))
            assert len(answer["data_fingerprint"]) == 64
