"""An organisation's side of a federation: the one place where its documents are touched.

:class:`Site` holds the steps an organisation takes on its own data, the same on every
engine: preprocess its documents (term counts stay inside), propose its vocabulary (only
its top-N terms and their counts leave), vectorise against the common vocabulary, hold
out validation documents, and build its client. The Kedro per-organisation nodes call
these methods on catalog data; on Flower the ClientApp calls them through a
:class:`FolderEndpoint`, which keeps the results in the organisation's private cache.

An *endpoint* answers the server for one organisation on either engine: queries before
training (``hello``, ``vocabulary``, ``prepare``) and then each round's instruction.
:class:`MemoryEndpoint` holds data already prepared in this process (the Kedro train
node, the synthetic experiment); :class:`PooledEndpoint` is the centralized scenario's
trusted server holding every organisation's documents.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import logging
import os
import secrets
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp

from fedtopic_pipelines.core import lineage
from fedtopic_pipelines.core.capabilities import DataKind
from fedtopic_pipelines.core.compute import resolve_device
from fedtopic_pipelines.core.config import (
    ConsensusConfig,
    EmbeddingsConfig,
    PreprocessConfig,
    PrivacyConfig,
    TrainConfig,
    from_mapping,
)
from fedtopic_pipelines.core.families import get_family
from fedtopic_pipelines.core.families.ctm import ContextualData, DocumentEmbeddings, documents_fingerprint
from fedtopic_pipelines.core.families.word2vec import sentences_from_frames
from fedtopic_pipelines.core.federated.client import FamilyClient
from fedtopic_pipelines.core.federated.family import ClientModel, EpochExamples, LocalState, ModelFamily
from fedtopic_pipelines.core.federated.local import LocalEpochs, LocalStates, runs_local_rounds
from fedtopic_pipelines.core.federated.messages import Instruction, Update
from fedtopic_pipelines.core.seeds import derive_seed, hold_out_one
from fedtopic_pipelines.core.shards import ShardedTable, as_frame, iter_frames
from fedtopic_pipelines.core.text.demo import CorpusError
from fedtopic_pipelines.core.text.embeddings import EmbeddingCache, encoder_fingerprint, resolve_model_path
from fedtopic_pipelines.core.text.preprocess import preprocess_shards
from fedtopic_pipelines.core.vocab.consensus import (
    exchange_vocabulary,
    keyed,
    offer_vocabulary,
    propose_terms,
    reveal_vocabulary,
    vectorize_frames,
)
from fedtopic_pipelines.core.vocab.privacy import vocabulary_key

# Text processing and shards (pandas, pyarrow, nltk: seconds of imports) are imported only by the
# stages that need them, not by training messages: a Flower ClientApp may be a fresh process per
# message. Those function-local imports defer these dependencies; none of them closes a cycle.

logger = logging.getLogger(__name__)

HELLO, VOCABULARY, PREPARE = "hello", "vocabulary", "prepare"
# the two steps of the VOCABULARY query (payload "step"): the offer (terms, or keyed digests, with
# their counts), then, keyed, the reveal of the digests the server kept (docs/vocabulary.md)
OFFER, REVEAL = "offer", "reveal"
VOCABULARY_PRIVACY = ("vocab_k", "vocab_min_count", "vocab_keyed", "vocab_count_noise")  # what a node reads
POOLED_STREAM = 1000  # the centralized trainer's seed stream (organisations use their index)


@dataclass(frozen=True)
class Prepared:
    """An organisation's training data over the common vocabulary, and its held-out part."""

    train: Any
    validation: Any


class Site:
    """One organisation's own steps (see the module docstring); ``name`` is for messages
    (a Kedro node inside a namespace need not know it)."""

    def __init__(self, name: str = "") -> None:
        self.name = name

    def preprocess(self, raw, config: PreprocessConfig):
        """Tokens (stay inside), training-split term counts (stay inside) and a report."""
        return preprocess_shards(raw, config)

    def propose(self, term_counts: Mapping[str, int], consensus: ConsensusConfig) -> dict[str, int]:
        """What leaves the organisation for the vocabulary: its top-N terms above the count T."""
        proposal = propose_terms(term_counts, consensus.top_n, consensus.min_count)
        if self.name:
            logger.info("organisation %s proposes %d terms", self.name, len(proposal))
        return proposal

    def offer(
        self,
        term_counts: Mapping[str, int],
        consensus: ConsensusConfig,
        privacy: PrivacyConfig | None,
        key: bytes | None = None,
        noise_secret: bytes | None = None,
    ) -> dict[str, int]:
        """What actually leaves it for the vocabulary under ``privacy``: its proposal, counts noised
        (``vocab_count_noise``), as keyed digests (``vocab_k`` > 1 with ``vocab_keyed``)."""
        return offer_vocabulary(self.propose(term_counts, consensus), privacy, key, noise_secret)

    def reveal(
        self, term_counts: Mapping[str, int], consensus: ConsensusConfig, requested: Sequence[str], key: bytes
    ) -> dict[str, list[str]]:
        """The second step of the keyed exchange: its own terms (with their openings) among the
        digests the server kept, recomputed from its counts; nothing else leaves."""
        proposal = propose_terms(term_counts, consensus.top_n, consensus.min_count)
        return reveal_vocabulary(proposal, requested, key)

    def embed(self, raw, doc_ids: Sequence[str], config: EmbeddingsConfig, cache_dir: Path):
        """Sentence embeddings of the documents ``doc_ids`` (their raw text, in that order),
        from its own cache or computed here (``core/text/embeddings.py``): a
        ``DocumentEmbeddings``. They never leave the organisation; only gradients do."""
        texts = texts_of(raw, doc_ids, self.name)
        values = EmbeddingCache(cache_dir).load_or_compute(
            texts,
            config.model,
            batch_size=config.batch_size,
            threads=config.threads,
            max_seq_length=config.max_seq_length,
            quantize=config.quantize,
        )
        model = encoder_fingerprint(resolve_model_path(config.model), config.max_seq_length, config.quantize)
        return DocumentEmbeddings(values, documents_fingerprint(doc_ids), model)

    def vectorise(self, tokens, terms: Sequence[str], proposal: Mapping[str, int] | None = None):
        """Its documents as a bag of words over the common vocabulary, and a report (with its own
        ``proposal``, also the tokens of its proposed terms the consensus left out)."""
        return vectorize_frames(iter_frames(tokens), list(terms), None if proposal is None else list(proposal))

    def prepare(self, family: ModelFamily, train: Any, config: TrainConfig, index: int) -> Prepared:
        """The training data minus the validation documents it holds out (when validating)."""
        family.validate_data(self.name, train, config)
        if config.validation_fraction > 0:
            fit, held = hold_out_one(self.name, train, config.validation_fraction, config.seed, index, family)
            return Prepared(fit, held)
        return Prepared(train, None)

    def client(
        self,
        family: ModelFamily,
        prepared: Prepared,
        config: TrainConfig,
        vocab_size: int,
        stream: int,
        ghosts: int | None = None,
        state_dir: Path | None = None,
    ) -> FamilyClient:
        """The client of seed stream ``stream`` (an organisation's index): its seeds depend on
        that number only, so both engines build the same client for the same organisation.
        Under a weights rule its "stream" is its local epochs; a family with parameters of its
        own (NMF's H) draws them here, sized to its documents, and keeps copies of them in
        ``state_dir`` while the server checkpoints."""
        device = resolve_device(config.device)
        # a family that reads the broadcast weights in place needs no table of its own until then
        create = family.create_client_model if isinstance(family, ClientModel) else family.create_model
        model = create(vocab_size, config, device)
        seed = derive_seed(config.seed, stream)
        if runs_local_rounds(family, config):
            batches: Any = LocalEpochs(family, prepared.train, config, seed, device, ghosts)
        else:
            batches = family.stream(prepared.train, config, seed, device, ghosts)
        if isinstance(family, LocalState):
            family.init_local(model, prepared.train, config, derive_seed(config.seed, 6000, stream))
        states = LocalStates(state_dir) if state_dir is not None and config.checkpoint_every else None
        return FamilyClient(
            self.name,
            family,
            model,
            batches,
            prepared.validation,
            derive_seed(config.seed, 2000, stream),
            local_states=states,
        )


def matrix_fingerprint(matrices: Sequence[sp.spmatrix], key: bytes | None = None) -> str:
    """A digest of sparse matrices' exact contents (with their sentence embeddings, for a
    contextual family's data); keyed (HMAC-SHA256) when ``key`` is given, so
    that whoever receives it learns only whether the data are the same as another time."""
    digest = hmac.new(key, digestmod=hashlib.sha256) if key is not None else hashlib.sha256()
    for matrix in matrices:
        parts = getattr(matrix, "fingerprint_parts", None)  # data other than a bag of words (token sequences)
        if parts is not None:
            for part in parts():
                digest.update(part)
            continue
        embeddings = getattr(matrix, "embeddings", None)  # a contextual family's data: both views
        csr = sp.csr_matrix(matrix.bow if embeddings is not None else matrix)
        csr.sort_indices()
        digest.update(json.dumps([list(csr.shape), str(csr.dtype)]).encode())
        for part in (csr.indptr.astype(np.int64), csr.indices.astype(np.int64), csr.data):
            digest.update(np.ascontiguousarray(part).tobytes())
        if embeddings is not None:
            digest.update(json.dumps(["embeddings", list(embeddings.shape)]).encode())
            digest.update(np.ascontiguousarray(embeddings, dtype=np.float32).tobytes())
    return digest.hexdigest()


def prepare_reply(
    family: ModelFamily,
    prepared: Prepared,
    fingerprint: str,
    report: Mapping[str, Any] | None = None,
    config: TrainConfig | None = None,
) -> dict[str, Any]:
    """What an organisation declares when it has prepared: its document counts (the server caps
    every later update's example count by them), a fingerprint of its training data (a
    checkpoint resumes only over the same data), plus a flat report."""
    reply: dict[str, Any] = {
        "train_rows": family.rows(prepared.train),
        "validation_rows": 0 if prepared.validation is None else family.rows(prepared.validation),
        "data_fingerprint": fingerprint,
    }
    if isinstance(family, EpochExamples) and config is not None:
        reply["epoch_examples"] = int(family.epoch_examples(prepared.train, config))
    reply.update(report or {})
    return reply


class Endpoint:
    """Answers the server for one organisation: queries, then the rounds' instructions."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.name = site.name
        self.client: FamilyClient | None = None

    def query(self, action: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        if action == HELLO:
            return {"organisation": self.name, "documents": self.documents()}
        if action == VOCABULARY:
            return self.vocabulary(payload)
        if action == PREPARE:
            return self.prepare(payload)
        raise ValueError(f"organisation '{self.name}' cannot answer the query '{action}'")

    def vocabulary(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """The VOCABULARY query. ``step`` "offer" (the default; a payload without ``privacy`` is
        the plain proposal): ``terms`` (or, keyed, ``hashes``) and ``counts``. ``step`` "reveal":
        for the kept digests it holds among ``hashes``, ``hashes``, ``terms`` and ``openings``."""
        preprocess = from_mapping(PreprocessConfig, payload.get("preprocess"), "preprocess")
        consensus = from_mapping(ConsensusConfig, payload.get("vocab_consensus"), "vocab_consensus")
        raw = payload.get("privacy")
        privacy = None if raw is None else from_mapping(PrivacyConfig, raw, "privacy")
        step = payload.get("step", OFFER)
        secure = keyed(privacy)
        if step == OFFER:
            noise = privacy is not None and privacy.vocab_count_noise > 0
            proposal = self.proposal(preprocess, consensus)
            key = self.vocabulary_key() if secure else None
            offer = offer_vocabulary(proposal, privacy, key, self.noise_secret() if noise else None)
            if self.name:
                logger.info("organisation %s offers %d %s", self.name, len(offer), "digests" if secure else "terms")
            return {"hashes" if secure else "terms": list(offer), "counts": [int(c) for c in offer.values()]}
        if step == REVEAL:
            if not secure:
                raise ValueError(f"organisation '{self.name}' was asked to reveal terms without a keyed exchange")
            requested = payload.get("hashes")
            if not isinstance(requested, list) or not all(isinstance(d, str) for d in requested):
                raise ValueError(f"organisation '{self.name}': a reveal needs the list of kept digests ('hashes')")
            opened = reveal_vocabulary(self.proposal(preprocess, consensus), requested, self.vocabulary_key())
            return {
                "hashes": list(opened),
                "terms": [pair[0] for pair in opened.values()],
                "openings": [pair[1] for pair in opened.values()],
            }
        raise ValueError(f"organisation '{self.name}': unknown vocabulary step {step!r} (expected 'offer' or 'reveal')")

    def vocabulary_key(self) -> bytes:
        """The organisations' shared key (``FEDTOPIC_VOCAB_KEY``): in this process, a public one if unset."""
        return vocabulary_key(required=False)

    def noise_secret(self) -> bytes:
        """What seeds its count noise (never sent): in this process, the shared key."""
        return self.vocabulary_key()

    def prepare(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        config = TrainConfig.from_params(payload["train"])
        terms = list(payload["terms"])
        family = get_family(config.model.family)
        data, report = self.training_data(family, terms, payload)
        fingerprint = str(report.pop("data_fingerprint", None) or matrix_fingerprint([data]))
        prepared = self.site.prepare(family, data, config, int(payload["index"]))
        self.client = self.site.client(
            family, prepared, config, len(terms), int(payload["index"]), state_dir=self.state_dir(config)
        )
        return prepare_reply(family, prepared, fingerprint, report, config)

    def state_dir(self, config: TrainConfig) -> Path | None:
        """Where this organisation keeps its local parameters while the server checkpoints: in
        process, beside the server's checkpoints (one folder per organisation)."""
        return Path(config.checkpoint_dir) / "organisations" / self.name if config.checkpoint_dir else None

    def handle(self, instruction: Instruction) -> Update:
        if self.client is None:
            raise RuntimeError(f"organisation '{self.name}' got round {instruction.round} before 'prepare'")
        return self.client.handle(instruction)

    # what differs between endpoints: where the data comes from
    def documents(self) -> int:
        raise NotImplementedError

    def proposal(self, preprocess: PreprocessConfig, consensus: ConsensusConfig) -> dict[str, int]:
        raise NotImplementedError(f"organisation '{self.name}' holds no term counts to propose from")

    def training_data(self, family: ModelFamily, terms: list[str], payload: Mapping[str, Any]) -> tuple[Any, dict]:
        raise NotImplementedError


class MemoryEndpoint(Endpoint):
    """An organisation whose training data (over the common vocabulary) is already in memory."""

    def __init__(self, name: str, train: Any, term_counts: Mapping[str, int] | None = None) -> None:
        super().__init__(Site(name))
        self.train = train
        self.term_counts = term_counts

    def documents(self) -> int:
        return int(self.train.shape[0])

    def proposal(self, preprocess: PreprocessConfig, consensus: ConsensusConfig) -> dict[str, int]:
        if self.term_counts is None:
            return super().proposal(preprocess, consensus)
        return self.site.propose(self.term_counts, consensus)

    def training_data(self, family: ModelFamily, terms: list[str], payload: Mapping[str, Any]) -> tuple[Any, dict]:
        width = int(self.train.shape[1])
        if width != len(terms):
            raise ValueError(f"organisation '{self.name}' has data over {width} terms, the vocabulary has {len(terms)}")
        return self.train, {}


class PooledEndpoint(Endpoint):
    """The centralized scenario's trusted server: every organisation's training documents,
    split as each organisation would split them, pooled, and drawn as ghost batches (one
    per organisation and step, each normalised apart: docs/batchnorm.md)."""

    def __init__(self, name: str, organisations: Mapping[str, Any]) -> None:
        super().__init__(Site(name))
        self.organisations = dict(organisations)

    def documents(self) -> int:
        return sum(int(m.shape[0]) for m in self.organisations.values())

    def prepare(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        config = TrainConfig.from_params(payload["train"])
        terms = list(payload["terms"])
        family = get_family(config.model.family)
        parts = [
            Site(org).prepare(family, data, config, index)
            for index, (org, data) in enumerate(self.organisations.items())
        ]
        validate = config.validation_fraction > 0
        prepared = Prepared(
            family.concatenate([p.train for p in parts]),
            family.concatenate([p.validation for p in parts]) if validate else None,
        )
        ghosts = len(parts)
        self.client = self.site.client(
            family, prepared, config, len(terms), POOLED_STREAM, ghosts=ghosts, state_dir=self.state_dir(config)
        )
        return {
            **prepare_reply(family, prepared, matrix_fingerprint(list(self.organisations.values())), None, config),
            "ghosts": ghosts,
        }


def texts_of(raw, doc_ids: Sequence[str], organisation: str = "") -> list[str]:
    """The raw text of each of ``doc_ids``, in that order, read shard by shard (only the id and
    text columns). A document id missing from the raw documents is an error naming it."""
    ids = [str(d) for d in doc_ids]
    wanted = set(ids)
    found: dict[str, str] = {}
    for frame in iter_frames(raw, ["doc_id", "text"]):
        for doc_id, text in zip(frame["doc_id"].astype(str), frame["text"], strict=True):
            if doc_id in wanted and doc_id not in found:
                found[doc_id] = "" if text is None else str(text)
    missing = [d for d in ids if d not in found]
    if missing:
        who = f"organisation '{organisation}': " if organisation else ""
        raise ValueError(
            f"{who}{len(missing)} document(s) of the bag of words are not in the raw documents (first: "
            f"{missing[:3]}): the raw documents changed since the bag of words was built; rerun preprocessing"
        )
    return [found[d] for d in ids]


def read_raw(path: Path):
    """An organisation's raw documents (a ``ShardedTable``): a folder of Parquet shards or one Parquet file."""
    if path.is_dir():
        table = ShardedTable.from_directory(path)
        if not table.paths:
            raise CorpusError(f"organisation data folder '{path}' holds no *.parquet shard")
        return table
    if path.is_file() and path.suffix == ".parquet":
        return ShardedTable([path])
    raise CorpusError(f"organisation data '{path}' is neither a folder of Parquet shards nor a .parquet file")


class FolderEndpoint(Endpoint):
    """An organisation's node on another machine (the Flower ClientApp): its raw documents in a
    folder, and a private cache on its own disk for tokens and bags of words, computed once
    per data and parameters. Everything computed from its documents stays in that cache."""

    def __init__(self, name: str, data_path: Path, cache_dir: Path) -> None:
        super().__init__(Site(name))
        self.data_path = Path(data_path)
        self.cache_dir = Path(cache_dir)
        self.shards = sorted(self.data_path.glob("*.parquet")) if self.data_path.is_dir() else [self.data_path]

    def documents(self) -> int:
        return len(read_raw(self.data_path))

    def state_dir(self, config: TrainConfig) -> Path | None:
        """A node keeps its local parameters in its own cache, never where the server writes."""
        return self.cache_dir / "local-states"

    def fingerprint(self) -> list:
        """What the cached results depend on: every shard's name, size and modification time."""
        return [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in self.shards if p.exists()]

    def _tokens_dir(self, config: PreprocessConfig) -> Path:
        return self.cache_dir / f"tokens-{lineage.digest([self.name, self.fingerprint(), config.to_params()])}"

    def preprocessed(self, config: PreprocessConfig):
        """Tokens (a ``ShardedTable``) and training-split term counts, from the cache or computed once."""
        folder = self._tokens_dir(config)
        done = folder / "term_counts.json"
        if done.is_file():
            logger.info("site %s: preprocessed tokens from the cache %s", self.name, folder)
            return ShardedTable.from_directory(folder), json.loads(done.read_text())
        result = self.site.preprocess(read_raw(self.data_path), config)
        staging = folder.with_name(folder.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for k, path in enumerate(result.tokens.paths):
            shutil.move(str(path), staging / f"{k:06d}.parquet")
        result.tokens.discard()
        (staging / "term_counts.json").write_text(json.dumps(result.term_counts))
        (staging / "report.json").write_text(json.dumps(result.report))
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
        return ShardedTable.from_directory(folder), result.term_counts

    def proposal(self, preprocess: PreprocessConfig, consensus: ConsensusConfig) -> dict[str, int]:
        with self.cache_lock():
            _, counts = self.preprocessed(preprocess)
        return self.site.propose(counts, consensus)

    def vocabulary_key(self) -> bytes:
        """The organisations' shared key: a node in its own process must have ``FEDTOPIC_VOCAB_KEY``."""
        return vocabulary_key(required=True)

    def noise_secret(self) -> bytes:
        """Its count noise is seeded by its own secret (the other organisations cannot recompute it)."""
        return self.secret()

    def secret(self) -> bytes:
        """This node's fingerprint key: random, made once, kept in its cache, never sent."""
        path = self.cache_dir / "fingerprint.key"
        if not path.is_file():
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f"fingerprint.key.{os.getpid()}.partial")
            partial.write_bytes(secrets.token_bytes(32))
            with contextlib.suppress(FileExistsError):
                os.link(partial, path)  # the first writer wins; a concurrent task reads its key
            partial.unlink()
        return path.read_bytes()

    def training_data(self, family: ModelFamily, terms: list[str], payload: Mapping[str, Any]) -> tuple[Any, dict]:
        """The training split over ``terms`` (cached as a scipy .npz: no pickle) and its keyed fingerprint."""
        preprocess = from_mapping(PreprocessConfig, payload.get("preprocess"), "preprocess")
        if TrainConfig.from_params(payload["train"]).model.capabilities.data_kind == DataKind.SEQUENCES:
            return self.word_sequences(preprocess, terms, payload)
        tokens_dir = self._tokens_dir(preprocess)
        path = self.cache_dir / f"bow-{lineage.digest([tokens_dir.name, terms])}.npz"
        report_path = path.with_suffix(".json")
        with self.cache_lock():
            stale = report_path.is_file() and "train_doc_ids" not in json.loads(report_path.read_text())
            if stale or not (path.is_file() and report_path.is_file()):  # stale: written before the ids were kept
                tokens, _ = self.preprocessed(preprocess)
                bow, report = self.site.vectorise(tokens, terms)
                train = bow.subset("train")
                partial = path.with_name(path.stem + ".partial.npz")
                sp.save_npz(partial, train.matrix)
                report["data_fingerprint"] = matrix_fingerprint([train.matrix], self.secret())
                report["train_doc_ids"] = [str(d) for d in train.doc_ids]  # stays in this cache
                report_path.write_text(json.dumps(report))
                partial.rename(path)
        saved = json.loads(report_path.read_text())
        dropped = saved.get("dropped_no_vocabulary_term", {})
        report = {f"dropped_no_vocabulary_term_{split}": int(dropped.get(split, 0)) for split in ("train", "test")}
        report["data_fingerprint"] = saved["data_fingerprint"]
        matrix = sp.load_npz(path).tocsr()
        config = TrainConfig.from_params(payload["train"])
        if config.model.capabilities.data_kind != DataKind.CONTEXTUAL:
            return matrix, report
        # a contextual family: this node embeds its own training documents (cached, never sent)
        with self.cache_lock():
            embedded = self.site.embed(
                read_raw(self.data_path), saved["train_doc_ids"], config.embeddings, self.cache_dir / "embeddings"
            )
        data = ContextualData(matrix, embedded.values)
        report["data_fingerprint"] = matrix_fingerprint([data], self.secret())
        return data, report

    def word_sequences(self, preprocess: PreprocessConfig, terms: list[str], payload: Mapping[str, Any]):
        """A sequence family's data (Word2Vec, PC-TD): its training documents as ids of ``terms``,
        with the consensus's summed counts the server sent (``frequencies``), and its keyed fingerprint."""
        frequencies = payload.get("frequencies")
        if not isinstance(frequencies, list) or len(frequencies) != len(terms):
            raise ValueError(
                f"organisation '{self.name}': a family trained on word sequences needs the vocabulary's counts "
                "('frequencies'), one per term"
            )
        with self.cache_lock():
            tokens, _ = self.preprocessed(preprocess)
        data, report = sentences_from_frames(iter_frames(tokens), terms, frequencies)
        return data, {
            "dropped_fewer_than_two_terms": report["dropped_fewer_than_two_terms"],
            "data_fingerprint": matrix_fingerprint([data], self.secret()),
        }

    @contextlib.contextmanager
    def cache_lock(self):
        """One task at a time writes this node's cache (a stopped run's task may still be preprocessing
        when a resubmitted run's task starts: both would stage into the same folders)."""
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with (self.cache_dir / ".lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def run_sites(
    raw: Mapping[str, Any],
    preprocess: PreprocessConfig,
    consensus: ConsensusConfig,
    texts: Literal["train", "all"] | None = None,
    privacy: PrivacyConfig | None = None,
):
    """Every organisation's steps in one process, as the Kedro pipelines chain them: preprocess,
    propose, the vocabulary exchange (the server's part; under ``privacy``, keyed and noised
    as the pipeline does it), vectorise. Returns the common vocabulary and each
    organisation's bag of words (benchmarks, the Flower demo's in-process reference, tests);
    with ``texts`` also each organisation's preprocessed texts (token lists, for coherence) of its
    training split (``"train"``) or of both splits (``"all"``, what the evaluate pipeline counts
    pooled coherence on), read before the token shards are discarded."""
    sites = {org: Site(org) for org in raw}
    results = {org: sites[org].preprocess(table, preprocess) for org, table in raw.items()}
    proposals = {org: sites[org].propose(results[org].term_counts, consensus) for org in raw}
    secret = keyed(privacy) or (privacy is not None and privacy.vocab_count_noise > 0)
    key = vocabulary_key(required=False) if secret else None
    vocabulary = exchange_vocabulary(proposals, consensus, privacy, key)[0].vocabulary
    terms = vocabulary["term"].tolist()
    bows = {org: sites[org].vectorise(results[org].tokens, terms)[0] for org in raw}
    token_lists = {}
    for org, result in results.items():
        if texts is not None:
            frame = as_frame(result.tokens)
            chosen = frame["tokens"] if texts == "all" else frame.loc[frame["split"] == "train", "tokens"]
            token_lists[org] = [t.split() for t in chosen]
        result.tokens.discard()
    return (vocabulary, bows) if texts is None else (vocabulary, bows, token_lists)
