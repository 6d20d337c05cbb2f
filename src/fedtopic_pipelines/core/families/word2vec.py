"""Word2Vec as a federated family: FedSGD on skip-gram pairs, sent as sparse rows (seed 003).

An organisation's data are its documents as sequences of common-vocabulary ids
(:class:`Sentences`). Each round it draws ``train.batch_size`` pairs (2048 in the
thesis) with their negatives, and sends the gradient of their mean loss on the rows it
touched only, with the row numbers (``SPARSE_ROWS``), weighted by its pair count. The
server's :class:`~fedtopic_pipelines.core.federated.strategies.SparseRowsSGD` averages
them (a row a client did not touch counts as zero for it) and steps those rows alone.
The negatives' noise distribution and the subsampling rule read the consensus
vocabulary's summed counts, which the organisations already sent to agree on the
vocabulary (docs/word2vec.md): every organisation and the centralized trainer draw from
the same distribution, so federated training equals centralized training on the
concatenated batches (the contract tests check it).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fedtopic_pipelines.core.config import TrainConfig, Word2VecConfig
from fedtopic_pipelines.core.families.base import Declared
from fedtopic_pipelines.core.federated.family import LocalStep
from fedtopic_pipelines.core.federated.messages import UpdateKind
from fedtopic_pipelines.core.federated.strategies import SparseRowsSGD
from fedtopic_pipelines.core.models.word2vec import (
    NoiseSampler,
    PairBatch,
    SkipGram,
    keep_probabilities,
    noise_distribution,
    skipgram_pairs,
    sparse_step,
)
from fedtopic_pipelines.core.seeds import derive_seed

if TYPE_CHECKING:  # pandas is read only by the stage that builds the data (a ClientApp message need not load it)
    import pandas as pd

CHUNK_TOKENS = 200_000  # tokens per chunk of pair generation (a chunk's pairs are shuffled together)


@dataclass(frozen=True)
class Sentences:
    """An organisation's documents as common-vocabulary ids: document i is
    ``tokens[offsets[i]:offsets[i + 1]]``; ``frequencies`` are the consensus vocabulary's
    summed counts (the same for every organisation). ``shape`` is (documents, vocabulary),
    as a bag of words' is, so that code counting documents reads both alike."""

    tokens: np.ndarray
    offsets: np.ndarray
    frequencies: np.ndarray

    def __post_init__(self) -> None:
        offsets = np.asarray(self.offsets, dtype=np.int64)
        if offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != len(self.tokens):
            raise ValueError("offsets must start at 0 and end at the number of tokens")
        if np.any(np.diff(offsets) < 0):
            raise ValueError("offsets must not decrease")
        tokens = np.asarray(self.tokens, dtype=np.int64)
        frequencies = np.asarray(self.frequencies, dtype=np.float64)
        if len(tokens) and (tokens.min() < 0 or tokens.max() >= len(frequencies)):
            raise ValueError(f"token ids must lie in [0, {len(frequencies)})")
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "offsets", offsets)
        object.__setattr__(self, "frequencies", frequencies)

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.offsets) - 1, len(self.frequencies))

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def select(self, rows: Sequence[int]) -> Sentences:
        rows = np.asarray(rows, dtype=np.int64)
        lengths = self.lengths[rows]
        if len(rows):
            parts = [self.tokens[self.offsets[r] : self.offsets[r + 1]] for r in rows]
            tokens = np.concatenate(parts)
        else:
            tokens = np.zeros(0, dtype=np.int64)
        return Sentences(tokens, np.concatenate([[0], np.cumsum(lengths)]), self.frequencies)

    def fingerprint_parts(self) -> list[bytes]:
        """The exact contents, for data fingerprints (``site.matrix_fingerprint``)."""
        return [json.dumps(["sentences", list(self.shape)]).encode(), self.tokens.tobytes(), self.offsets.tobytes()]


def concatenate(parts: Sequence[Sentences]) -> Sentences:
    """Several organisations' documents as one (they must share the vocabulary's counts)."""
    if not parts:
        raise ValueError("nothing to concatenate")
    for part in parts[1:]:
        if not np.array_equal(part.frequencies, parts[0].frequencies):
            raise ValueError("organisations' sentences were built over different vocabulary counts")
    lengths = np.concatenate([p.lengths for p in parts])
    return Sentences(
        np.concatenate([p.tokens for p in parts]), np.concatenate([[0], np.cumsum(lengths)]), parts[0].frequencies
    )


def sentences_from_frames(
    frames: Iterable[pd.DataFrame], terms: Sequence[str], frequencies: Sequence[float], split: str = "train"
) -> tuple[Sentences, dict[str, Any]]:
    """One organisation's token tables (its preprocessing's output) as id sequences over the
    common vocabulary, for the documents of ``split``; tokens outside the vocabulary are
    removed (the window then spans them, as gensim does). A document left with fewer than
    two tokens gives no pair: it is dropped and counted in the report."""
    index = {term: i for i, term in enumerate(terms)}
    if len(frequencies) != len(index):
        raise ValueError(f"{len(frequencies)} vocabulary counts for {len(index)} terms")
    parts: list[np.ndarray] = []
    counter: Counter[str] = Counter()
    for frame in frames:
        chosen = frame.loc[frame["split"] == split, "tokens"] if "split" in frame else frame["tokens"]
        for text in chosen:
            words = str(text).split()
            ids = np.fromiter((index[w] for w in words if w in index), dtype=np.int64)
            counter["documents"] += 1
            counter["tokens"] += len(words)
            counter["in_vocabulary"] += len(ids)
            if len(ids) < 2:
                counter["dropped_fewer_than_two_terms"] += 1
                continue
            parts.append(ids)
    lengths = np.array([len(p) for p in parts], dtype=np.int64)
    tokens = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    sentences = Sentences(tokens, np.concatenate([[0], np.cumsum(lengths)]), np.asarray(frequencies, dtype=float))
    report = {
        "split": split,
        "documents": counter["documents"],
        "kept_documents": len(parts),
        "dropped_fewer_than_two_terms": counter["dropped_fewer_than_two_terms"],
        "tokens": counter["tokens"],
        "tokens_in_vocabulary": counter["in_vocabulary"],
    }
    return sentences, report


def expected_pairs(data: Sentences, model: Word2VecConfig) -> int:
    """About how many pairs one pass over ``data`` yields: each document's expected kept tokens
    m, and at distance d (<= window) 2 (m - d) pairs, each kept with probability (W - d + 1) / W."""
    keep = keep_probabilities(data.frequencies, model.subsample)
    kept = np.add.reduceat(keep[data.tokens], data.offsets[:-1]) if len(data.tokens) else np.zeros(0)
    kept = np.where(data.lengths > 0, kept, 0.0)
    w = model.window
    total = sum(2.0 * (w - d + 1) / w * np.clip(kept - d, 0, None).sum() for d in range(1, w + 1))
    return int(total)


def words_per_second(history: Sequence[Any], data: Sequence[Sentences], model: Word2VecConfig) -> float | None:
    """A trained model's speed in gensim's unit: the pooled tokens times the passes its rounds'
    pairs amount to (pairs over :func:`expected_pairs` of one pass), over the rounds' seconds
    (each organisation's step, the server's, validation). None when no round was timed."""
    seconds = sum(r.seconds for r in history if math.isfinite(r.seconds))
    pairs_per_pass = sum(expected_pairs(d, model) for d in data)
    if seconds <= 0 or pairs_per_pass <= 0:
        return None
    passes = sum(r.num_examples for r in history) / pairs_per_pass
    return sum(len(d.tokens) for d in data) * passes / seconds


class PairStream:
    """An organisation's (or, with ``ghosts``, the pooled corpus's) endless stream of pairs:
    seeded epochs of shuffled documents, cut into chunks of about :data:`CHUNK_TOKENS` tokens
    whose pairs are generated and shuffled together; each step takes the next
    ``batch_size`` pairs per ghost batch (across chunk and epoch ends) and draws their
    negatives from that ghost batch's own generator.

    Its position is (epoch, chunk, offset) plus the negative generators: a chunk's pairs
    depend on (seed, epoch, chunk) only, so a restored stream regenerates them exactly.
    """

    def __init__(
        self, data: Sentences, config: TrainConfig, seed: int, device: torch.device, ghosts: int | None = None
    ) -> None:
        model = config.model
        assert isinstance(model, Word2VecConfig)
        self.data = data
        self.model = model
        self.batch_size = config.batch_size
        self.seed = seed
        self.device = device
        self.keep = keep_probabilities(data.frequencies, model.subsample) if model.subsample > 0 else None
        self.noise = NoiseSampler(noise_distribution(data.frequencies, model.noise_power))
        self.generators = [
            torch.Generator(device="cpu").manual_seed(derive_seed(seed, 1, g)) for g in range(ghosts or 1)
        ]
        self.epoch = self.chunk = self.offset = 0
        self._chunks: list[np.ndarray] | None = None
        self._pairs: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def max_examples(self) -> int:
        return self.batch_size * len(self.generators)

    def _epoch_chunks(self) -> list[np.ndarray]:
        order = np.random.default_rng(derive_seed(self.seed, 10, self.epoch)).permutation(self.data.shape[0])
        ends = np.cumsum(self.data.lengths[order])
        cuts = np.searchsorted(ends, np.arange(CHUNK_TOKENS, ends[-1] if len(ends) else 0, CHUNK_TOKENS), "right")
        return [c for c in np.split(order, cuts) if len(c)]

    def _chunk_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        if self._chunks is None:
            self._chunks = self._epoch_chunks()
        if self._pairs is None:
            rows = self._chunks[self.chunk]
            part = self.data.select(np.sort(rows))
            rng = np.random.default_rng(derive_seed(self.seed, 11, self.epoch, self.chunk))
            centres, contexts = skipgram_pairs(part.tokens, part.offsets, self.model.window, self.keep, rng)
            order = rng.permutation(len(centres))
            self._pairs = (centres[order], contexts[order])
        return self._pairs

    def _advance_chunk(self) -> None:
        self._pairs = None
        self.offset = 0
        self.chunk += 1
        if self._chunks is not None and self.chunk >= len(self._chunks):
            self.chunk, self.epoch, self._chunks = 0, self.epoch + 1, None

    def _take(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        centres: list[np.ndarray] = []
        contexts: list[np.ndarray] = []
        need, empty_epochs, start_epoch = n, 0, self.epoch
        while need > 0:
            c, o = self._chunk_pairs()
            take = min(need, len(c) - self.offset)
            if take > 0:
                centres.append(c[self.offset : self.offset + take])
                contexts.append(o[self.offset : self.offset + take])
                self.offset += take
                need -= take
                start_epoch, empty_epochs = self.epoch, 0
            if self.offset >= len(c):
                self._advance_chunk()
                if self.epoch > start_epoch and need > 0:
                    empty_epochs += 1
                    start_epoch = self.epoch
                    if empty_epochs > 2:
                        raise ValueError("the documents yield no skip-gram pair (every document too short?)")
        return np.concatenate(centres), np.concatenate(contexts)

    def _negatives(self, generator: torch.Generator, pairs: int) -> torch.Tensor:
        k = self.model.negatives
        return self.noise.draw((k,) if self.model.negative_sharing == "batch" else (pairs, k), generator)

    def next_batches(self) -> list[PairBatch]:
        batches = []
        for generator in self.generators:
            centres, contexts = self._take(self.batch_size)
            negatives = self._negatives(generator, len(centres))
            batches.append(
                PairBatch(
                    torch.from_numpy(centres).to(self.device),
                    torch.from_numpy(contexts).to(self.device),
                    negatives.to(self.device),
                )
            )
        return batches

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {
            "position": torch.tensor([self.epoch, self.chunk, self.offset], dtype=torch.int64),
            **{f"noise.{g}": gen.get_state() for g, gen in enumerate(self.generators)},
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        epoch, chunk, offset = (int(v) for v in state["position"].tolist())
        if epoch != self.epoch or self._chunks is None:
            self._chunks = None
        self.epoch, self.chunk, self.offset, self._pairs = epoch, chunk, offset, None
        for g, gen in enumerate(self.generators):
            gen.set_state(state[f"noise.{g}"])


class SequenceData(Declared):
    """The data methods of a family trained on word-id sequences (Word2Vec, PC-TD)."""

    def rows(self, data: Sentences) -> int:
        return data.shape[0]

    def select(self, data: Sentences, rows: Sequence[int]) -> Sentences:
        return data.select(rows)

    def concatenate(self, parts: Sequence[Sentences]) -> Sentences:
        return concatenate(parts)


class Word2VecFamily(SequenceData):
    """``train.model.family: word2vec`` (the ``SPARSE_ROWS`` family)."""

    name = "word2vec"
    config_type = Word2VecConfig
    update_kind = UpdateKind.SPARSE_ROWS
    exact_federation = True
    loss_names = ("loss",)

    def create_model(self, vocab_size: int, config: TrainConfig, device: torch.device) -> SkipGram:
        assert isinstance(config.model, Word2VecConfig)
        return SkipGram(vocab_size, config.model, config.seed).to(device)

    def create_client_model(self, vocab_size: int, config: TrainConfig, device: torch.device) -> SkipGram:
        """A client's model: empty tables, replaced by the broadcast ones at every round."""
        assert isinstance(config.model, Word2VecConfig)
        return SkipGram(0, config.model, config.seed).to(device)

    def shared_names(self, model: SkipGram) -> list[str]:
        return ["input", "output"]

    def stream(
        self, data: Sentences, config: TrainConfig, seed: int, device: torch.device, ghosts: int | None = None
    ) -> PairStream:
        return PairStream(data, config, seed, device, ghosts)

    def local_step(self, model: SkipGram, stream: PairStream) -> LocalStep:
        step = sparse_step(model, stream.next_batches())
        return LocalStep(step.values, step.pairs, {"loss": step.loss}, row_indices=step.rows)

    def replay(self, model: SkipGram, stream: PairStream, steps: int) -> None:
        # A step's draws (pairs, negatives) do not depend on the weights: draw and discard.
        for _ in range(steps):
            stream.next_batches()

    def validation_loss(self, model: SkipGram, data: Sentences, seed: int) -> tuple[float, int]:
        """The mean loss of up to ``validation_pairs`` held-out pairs, drawn (subsampling, windows,
        negatives) from ``seed`` alone: the same pairs at every validation."""
        config = model_config(model)
        rng = np.random.default_rng(derive_seed(seed, 12))
        keep = keep_probabilities(data.frequencies, config.subsample) if config.subsample > 0 else None
        centres, contexts = skipgram_pairs(data.tokens, data.offsets, config.window, keep, rng)
        if len(centres) == 0:
            return math.nan, 0
        order = rng.permutation(len(centres))[: config.validation_pairs]
        centres, contexts = centres[order], contexts[order]
        noise = NoiseSampler(noise_distribution(data.frequencies, config.noise_power))
        generator = torch.Generator().manual_seed(derive_seed(seed, 13))
        device = model.input.device
        total = 0.0
        size = VALIDATION_BATCH
        with torch.no_grad():
            for start in range(0, len(centres), size):
                c = torch.from_numpy(centres[start : start + size])
                o = torch.from_numpy(contexts[start : start + size])
                k = config.negatives
                shape = (k,) if config.negative_sharing == "batch" else (len(c), k)
                n = noise.draw(shape, generator)
                batch = PairBatch(c.to(device), o.to(device), n.to(device))
                total += sparse_step(model, [batch], grad=False).loss * len(c)
        return total / len(centres), data.shape[0]

    def strategy(self, model: SkipGram, config: TrainConfig) -> SparseRowsSGD:
        assert isinstance(config.model, Word2VecConfig)
        return SparseRowsSGD(model, config.optimizer, config.model.reduction, metric_names=self.loss_names)

    def max_update_examples(self, rows: int, config: TrainConfig, ghosts: int | None = None) -> int:
        return config.batch_size * (ghosts or 1)

    def steps_per_epoch(self, rows: int, config: TrainConfig, ghosts: int | None = None) -> int:
        """Rounds in one pass; ``rows`` here is the pairs of a pass (what ``epoch_examples`` declared)."""
        return max(1, math.ceil(rows / (config.batch_size * (ghosts or 1))))

    def epoch_examples(self, data: Sentences, config: TrainConfig) -> int:
        """The pairs one pass over ``data`` yields (an estimate: subsampling and windows are random)."""
        assert isinstance(config.model, Word2VecConfig)
        return expected_pairs(data, config.model)

    def validate_data(self, name: str, data: Any, config: TrainConfig | None = None) -> None:
        """An organisation must hold documents of at least two common-vocabulary tokens."""
        if not isinstance(data, Sentences):
            raise ValueError(
                f"organisation '{name}': the word2vec family trains on token sequences (Sentences), "
                f"got {type(data).__name__}"
            )
        usable = int((data.lengths >= 2).sum())
        if usable < 2:
            raise ValueError(
                f"organisation '{name}' has {usable} training document(s) with two or more tokens of the common "
                "vocabulary; skip-gram training needs at least 2 (is its text in the vocabulary's language?)"
            )


VALIDATION_BATCH = 8192


def model_config(model: SkipGram) -> Word2VecConfig:
    config = getattr(model, "config", None)
    if not isinstance(config, Word2VecConfig):
        raise ValueError("a SkipGram built outside the family has no config")
    return config


GENSIM_MAX_WORDS = 10_000  # gensim's Word2Vec cuts a longer sentence silently (MAX_WORDS_IN_BATCH)


def gensim_reference(
    data: Sequence[Sentences], terms: Sequence[str], model: Word2VecConfig, epochs: int, threads: int, seed: int
) -> tuple[Any, dict[str, Any]]:
    """gensim ``Word2Vec(sg=1)`` on the pooled sequences, with our dimension, window, negatives per
    pair (5 when ours share a batch's), subsampling and noise power: the model a user would
    otherwise train, as a yardstick beside the scenarios. Documents longer than gensim's 10,000
    words are cut into pieces rather than truncated. Returns its vectors and what it ran."""
    import time

    import gensim  # deferred: gensim is a heavy import, needed only by the centralized baseline
    from gensim.models import Word2Vec

    words = np.asarray(list(terms), dtype=object)
    sentences = [
        words[
            part.tokens[part.offsets[i] + start : min(part.offsets[i + 1], part.offsets[i] + start + GENSIM_MAX_WORDS)]
        ].tolist()
        for part in data
        for i in range(part.shape[0])
        for start in range(0, int(part.lengths[i]), GENSIM_MAX_WORDS)
    ]
    negatives = model.negatives if model.negative_sharing == "pair" else 5
    w2v = Word2Vec(
        vector_size=model.dimension,
        window=model.window,
        negative=negatives,
        sg=1,
        sample=model.subsample,
        ns_exponent=model.noise_power,
        min_count=1,
        workers=threads,
        seed=seed,
    )
    w2v.build_vocab(sentences)
    started = time.perf_counter()
    w2v.train(sentences, total_examples=len(sentences), epochs=epochs)
    seconds = time.perf_counter() - started
    tokens = int(sum(len(s) for s in sentences))
    info = {
        "library": f"gensim {gensim.__version__}",
        "epochs": epochs,
        "negatives": negatives,
        "threads": threads,
        "tokens": tokens,
        "seconds": seconds,
        "words_per_second": tokens * epochs / seconds if seconds > 0 else None,
    }
    return w2v.wv, info
