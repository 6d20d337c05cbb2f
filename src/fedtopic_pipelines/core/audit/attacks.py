"""An honest-but-curious server's attacks on the messages it legitimately receives (issue 19, a-c).

The server runs the protocol as written and only reads what reaches it: each organisation's
update of every round (its tensors, row indices, example count and loss terms), the state
it broadcast, and the final model. :class:`RecordingEngine` wraps any engine and keeps the
replies of the first rounds, which is that view; the attacks read it.

(a) **Batch words from a gradient** (ProdLDA, CombinedTM, ZeroShotTM; NMF's weights). The
    encoder's first layer multiplies the bag of words, so the gradient of its weight is
    ``sum_d x_dw delta_d`` in the column of word w: exactly zero when w is in none of the
    batch's documents, non-zero (almost surely) when it is. The set of non-zero columns *is*
    the batch's vocabulary (:func:`first_layer_scores`). ZeroShotTM's encoder reads only the
    sentence embeddings; its bag of words enters only the decoder's reconstruction term, whose
    gradient is not zero on absent words (the softmax spreads the loss over the vocabulary):
    every logit of an absent word is pushed down, a present word's up. The summed decoder
    gradient over topics (:func:`decoder_scores`) ranks words by that sign.
(b) **Word2Vec's rows** (``SPARSE_ROWS``): the row indices *are* the words the batch used (U:
    the centre words; V: the context words and the negatives). :func:`sparse_rows_guess`.
(c) **Membership inference** from the final global model (Yeom et al. 2018): a document the
    model was trained on has a lower loss than one it was not; the per-document loss ranks
    candidates (:func:`membership`). The training losses the organisations report every round
    are the natural threshold (Yeom's attack needs the mean training loss): :func:`membership`
    takes one.

Scores: precision and recall of a thresholded guess against the truth, and ROC AUC
(scikit-learn's ``roc_auc_score``) of a per-item score, averaged over clients and rounds.
Functions take tensors or arrays and return small dataclasses; nothing here reads or writes
files. Ground truth (the words of a client's batch) is not something the server has: tests
and benchmarks get it by replaying the organisation's own seeded stream
(:func:`replay_batch_words`, :func:`replay_pair_rows`), as the organisation itself would.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fedtopic_pipelines.core.federated.messages import EVALUATE, Instruction, Replies, Update
from fedtopic_pipelines.core.models.ctm import ContextualBatch
from fedtopic_pipelines.core.seeds import derive_seed

# -- the server's view -------------------------------------------------------------------------


@dataclass
class RecordedRound:
    """One training round as the server saw it: what it broadcast and every reply, by client."""

    round: int
    state: dict[str, torch.Tensor]
    updates: dict[str, Update]


def copied(update: Update) -> Update:
    """A copy whose tensors aggregation cannot change afterwards (a strategy may clip in place)."""

    def clone(part: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in part.items()}

    return dataclasses.replace(
        update,
        tensors=clone(update.tensors),
        row_indices=clone(update.row_indices),
        statistics=clone(update.statistics),
        metrics=dict(update.metrics),
    )


class RecordingEngine:
    """Any engine, with the server's memory of the first ``keep_rounds`` training rounds.

    Queries and broadcasts pass through unchanged; the replies of a training instruction
    (not validation's) of a round below ``keep_rounds`` are copied into :attr:`rounds`, with
    the state broadcast in that round when ``keep_state`` (NMF's attack reads the weights'
    change). Every client's loss terms are kept for every round in :attr:`losses`
    (``{client: [(round, metrics)]}``): they are a few numbers.
    """

    def __init__(self, engine: Any, keep_rounds: int = 10, keep_state: bool = False) -> None:
        self.engine = engine
        self.keep_rounds = keep_rounds
        self.keep_state = keep_state
        self.rounds: list[RecordedRound] = []
        self.losses: dict[str, list[tuple[int, dict[str, float]]]] = {}

    def query(self, action: str, payloads: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        return self.engine.query(action, payloads)

    def broadcast(self, instruction: Instruction, to: Sequence[str] | None = None) -> Replies:
        replies = self.engine.broadcast(instruction) if to is None else self.engine.broadcast(instruction, to=to)
        if instruction.config.get("action") == EVALUATE:
            return replies
        updates = [u for u in replies.updates if isinstance(u, Update)]
        for update in updates:
            self.losses.setdefault(update.client_id, []).append((instruction.round, dict(update.metrics)))
        if instruction.round < self.keep_rounds:
            state = {k: v.detach().clone() for k, v in instruction.state.items()} if self.keep_state else {}
            self.rounds.append(RecordedRound(instruction.round, state, {u.client_id: copied(u) for u in updates}))
        return replies


def summed_view(recorded: RecordedRound) -> dict[str, torch.Tensor]:
    """What secure aggregation shows the server of a round: the sum of the updates' tensors
    (each weighted by its example count, as Flower's SecAgg+ sums ``weight * parameters``)."""
    total: dict[str, torch.Tensor] = {}
    for update in recorded.updates.values():
        for name, value in update.tensors.items():
            part = value.double() * update.num_examples
            total[name] = total[name] + part if name in total else part
    return total


# -- scoring -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class GuessScores:
    """How well a set was guessed: precision and recall of the thresholded guess, ROC AUC of
    the per-item score (NaN where the truth is all or nothing), and the sizes."""

    precision: float
    recall: float
    auc: float
    guessed: int
    true: int
    items: int

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in dataclasses.asdict(self).items()}


def score_guess(score: np.ndarray, truth: np.ndarray, threshold: float = 0.0) -> GuessScores:
    """``score[i] > threshold`` is the guess that item i is in the set ``truth`` (booleans)."""
    from sklearn.metrics import roc_auc_score  # deferred: scikit-learn is a heavy import

    score = np.asarray(score, dtype=np.float64)
    truth = np.asarray(truth, dtype=bool)
    if score.shape != truth.shape:
        raise ValueError(f"{score.shape[0]} scores for {truth.shape[0]} items")
    guess = score > threshold
    hits = int((guess & truth).sum())
    precision = hits / int(guess.sum()) if guess.any() else math.nan
    recall = hits / int(truth.sum()) if truth.any() else math.nan
    auc = float(roc_auc_score(truth, score)) if 0 < truth.sum() < truth.size else math.nan
    return GuessScores(precision, recall, auc, int(guess.sum()), int(truth.sum()), int(truth.size))


@dataclass(frozen=True)
class AttackSummary:
    """An attack's scores averaged over clients and rounds (NaNs left out), and how many."""

    precision: float
    recall: float
    auc: float
    cases: int

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in dataclasses.asdict(self).items()}


def summarise(scores: Iterable[GuessScores]) -> AttackSummary:
    scores = list(scores)

    def mean(values: list[float]) -> float:
        kept = [v for v in values if not math.isnan(v)]
        return float(np.mean(kept)) if kept else math.nan

    precision, recall, auc = (mean([getattr(s, name) for s in scores]) for name in ("precision", "recall", "auc"))
    return AttackSummary(precision, recall, auc, len(scores))


# -- (a) batch words from a gradient -------------------------------------------------------------

FIRST_LAYER = "hidden.0.weight"  # ProdLDA's / CombinedTM's encoder layer on the bag of words
DECODER = "beta"  # the topic-word weights (K x V)
WORD_BIAS = "word_bias"


def first_layer_scores(weight_grad: torch.Tensor, vocab_size: int) -> np.ndarray:
    """Per word, the L2 norm of its row of the encoder's first-layer gradient (stored one row per
    input: V x hidden, or 2V x hidden for CombinedTM, whose first V rows read the bag of words).
    Zero exactly when the word is in none of the batch's documents."""
    if weight_grad.shape[0] < vocab_size:
        raise ValueError(
            f"the first layer reads {weight_grad.shape[0]} inputs, fewer than the {vocab_size} words: it does not "
            "read the bag of words (ZeroShotTM reads the embeddings only; use decoder_scores)"
        )
    return weight_grad[:vocab_size].double().norm(dim=1).cpu().numpy()


def decoder_scores(tensors: Mapping[str, torch.Tensor]) -> np.ndarray:
    """Per word, minus its decoder gradient summed over topics (plus minus its background's,
    with ``word_bias``): descent would raise a word of the batch and lower an absent one, so
    the words of the batch score high. Not zero on absent words: a ranking, not a set."""
    score = -tensors[DECODER].double().sum(dim=0)
    if WORD_BIAS in tensors:
        score = score - tensors[WORD_BIAS].double()
    return score.cpu().numpy()


def decoder_magnitude(tensors: Mapping[str, torch.Tensor]) -> np.ndarray:
    """Per word, the L2 norm of its decoder gradient column (a sign-free ranking)."""
    return tensors[DECODER].double().norm(dim=0).cpu().numpy()


def relative_threshold(score: np.ndarray, tolerance: float = 1e-6) -> float:
    """A column whose norm is under ``tolerance`` times the largest is taken as zero (float
    rounding of an exact zero stays exactly zero here; noise does not)."""
    top = float(np.max(np.abs(score))) if score.size else 0.0
    return tolerance * top


def two_group_threshold(score: np.ndarray) -> float:
    """A threshold for a ranking with no natural zero: Otsu's split of the log scores into two
    groups (the largest between-group variance); the guess is the upper group."""
    x = np.sort(np.log(np.maximum(np.asarray(score, dtype=np.float64), 1e-300)))
    if x.size < 2:
        return -math.inf
    n = np.arange(1, x.size)
    cumulative = np.cumsum(x)[:-1]
    low = cumulative / n
    high = (x.sum() - cumulative) / (x.size - n)
    between = n * (x.size - n) * (low - high) ** 2
    i = int(np.argmax(between))
    return float(np.exp(0.5 * (x[i] + x[i + 1])))


def weights_delta_scores(
    sent: Mapping[str, torch.Tensor], broadcast: Mapping[str, torch.Tensor], name: str = "w"
) -> np.ndarray:
    """NMF: per word, the change of its row of W over the organisation's local epochs, summed
    over topics (W is V x k: a present word's row grows toward its counts, an absent word's
    shrinks toward 0)."""
    return (sent[name].double() - broadcast[name].double()).sum(dim=1).cpu().numpy()


def critic_delta_scores(
    sent: Mapping[str, torch.Tensor], broadcast: Mapping[str, torch.Tensor], name: str = "critic.words.weight"
) -> np.ndarray:
    """NMF with the MI critic: per word, the norm of the change of its column of the critic's
    first layer (32 x V, on the bag of words): zero exactly for words in none of the documents
    the local epochs read (plain SGD or Adagrad: a zero gradient moves nothing)."""
    return (sent[name].double() - broadcast[name].double()).norm(dim=0).cpu().numpy()


# -- (b) Word2Vec's rows -----------------------------------------------------------------------


def sparse_rows_guess(update: Update, vocab_size: int, table: str = "input") -> np.ndarray:
    """The rows of ``table`` the update touched, as a 0/1 score per word."""
    score = np.zeros(vocab_size)
    score[update.row_indices[table].cpu().numpy()] = 1.0
    return score


# -- (c) membership inference ------------------------------------------------------------------


@dataclass(frozen=True)
class MembershipScores:
    """Loss-threshold membership inference: ROC AUC of minus the loss (members lower), and, at
    ``threshold`` (a loss; below it is "member"), the accuracy on a balanced set and the
    advantage TPR - FPR (Yeom et al.'s measure)."""

    auc: float
    members: int
    non_members: int
    member_loss: float
    non_member_loss: float
    threshold: float = math.nan
    accuracy: float = math.nan
    advantage: float = math.nan

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in dataclasses.asdict(self).items()}


def membership(
    member_losses: np.ndarray, non_member_losses: np.ndarray, threshold: float | None = None
) -> MembershipScores:
    """Yeom et al.'s attack on per-document losses (members: documents the model trained on)."""
    from sklearn.metrics import roc_auc_score  # deferred: scikit-learn is a heavy import

    member_losses = np.asarray(member_losses, dtype=np.float64)
    non_member_losses = np.asarray(non_member_losses, dtype=np.float64)
    losses = np.concatenate([member_losses, non_member_losses])
    truth = np.concatenate([np.ones(len(member_losses), bool), np.zeros(len(non_member_losses), bool)])
    auc = float(roc_auc_score(truth, -losses))
    result = MembershipScores(
        auc, len(member_losses), len(non_member_losses), float(member_losses.mean()), float(non_member_losses.mean())
    )
    if threshold is None or not math.isfinite(threshold):
        return result
    tpr = float((member_losses < threshold).mean())
    fpr = float((non_member_losses < threshold).mean())
    return dataclasses.replace(
        result, threshold=float(threshold), accuracy=0.5 * (tpr + 1.0 - fpr), advantage=tpr - fpr
    )


@torch.no_grad()
def prodlda_document_losses(
    model: torch.nn.Module,
    data: Any,
    samples: int = 8,
    seed: int = 0,
    per_word: bool = False,
    chunk: int = 1024,
) -> np.ndarray:
    """Each document's negative ELBO under ``model`` (a ProdLDA, CombinedTM or ZeroShotTM in eval
    mode: its validation pass), averaged over ``samples`` draws from ``seed``; ``per_word``
    divides by the document's length. ``data``: a CSR bag of words, or ``ContextualData``."""
    bow_all = getattr(data, "bow", data).tocsr().astype(np.float32)
    embeddings = getattr(data, "embeddings", None)
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    out = np.zeros(bow_all.shape[0])
    for start in range(0, bow_all.shape[0], chunk):
        part = slice(start, start + chunk)
        bow = torch.from_numpy(bow_all[part].toarray()).to(device)
        batch = bow if embeddings is None else ContextualBatch(bow, torch.from_numpy(embeddings[part]).to(device))
        total = sum(model.validation_loss(batch, generator) for _ in range(samples)) / samples
        out[part] = total.double().cpu().numpy()
    if per_word:
        out = out / np.maximum(np.asarray(bow_all.sum(axis=1)).ravel(), 1.0)
    return out


def nmf_document_losses(model: torch.nn.Module, data: Any, per_word: bool = False) -> np.ndarray:
    """Each document's squared reconstruction error ||x - W h||^2 under an NMF model, its h
    fitted to the model's W by the model's own inference (what evaluation does: a descent, so
    not under ``no_grad``)."""
    h = model.doc_topic(data).detach()
    w = model.w.detach()
    x = torch.from_numpy(data.tocsr().astype(np.float32).toarray())
    with torch.no_grad():
        out = ((x - h.to(w.dtype) @ w.T) ** 2).sum(dim=1).double().numpy()
    if per_word:
        out = out / np.maximum(np.asarray(data.sum(axis=1)).ravel(), 1.0)
    return out


def reported_training_loss(losses: Mapping[str, list[tuple[int, dict[str, float]]]], client: str, last: int) -> float:
    """The mean of the ``loss`` a client reported in its ``last`` recorded rounds: Yeom's threshold."""
    values = [m["loss"] for _, m in losses.get(client, [])[-last:] if "loss" in m]
    return float(np.mean(values)) if values else math.nan


# -- ground truth (tests and benchmarks: the organisation's own seeded stream, replayed) -------


def replay_batch_words(
    family: Any, data: Any, config: Any, index: int, rounds: int, vocab_size: int
) -> list[np.ndarray]:
    """The words (count > 0) of an organisation's mini-batch in each of the first ``rounds``
    FedSGD rounds, from its stream rebuilt as its site builds it (seed stream ``index``)."""
    stream = family.stream(data, config, derive_seed(config.seed, index), torch.device("cpu"))
    words = []
    for _ in range(rounds):
        present = np.zeros(vocab_size, dtype=bool)
        for batch, _noise in stream.next_batches():
            bow = getattr(batch, "bow", batch)
            present[bow.to_dense().sum(dim=0).cpu().numpy() > 0] = True
        words.append(present)
    return words


@dataclass(frozen=True)
class PairRows:
    """The rows one Word2Vec batch touched: centre words (U), context words, negatives (V)."""

    centres: np.ndarray
    contexts: np.ndarray
    negatives: np.ndarray

    def mask(self, which: Sequence[str], vocab_size: int) -> np.ndarray:
        out = np.zeros(vocab_size, dtype=bool)
        for name in which:
            out[getattr(self, name)] = True
        return out


def replay_pair_rows(family: Any, data: Any, config: Any, index: int, rounds: int) -> list[PairRows]:
    """An organisation's Word2Vec batches of the first ``rounds`` rounds, replayed from its seed."""
    stream = family.stream(data, config, derive_seed(config.seed, index), torch.device("cpu"))
    out = []
    for _ in range(rounds):
        batches = stream.next_batches()
        out.append(
            PairRows(
                np.unique(np.concatenate([b.centers.numpy() for b in batches])),
                np.unique(np.concatenate([b.contexts.numpy() for b in batches])),
                np.unique(np.concatenate([b.negatives.reshape(-1).numpy() for b in batches])),
            )
        )
    return out


@dataclass
class PerClient:
    """Scores kept per client and round, for summaries and tables."""

    scores: dict[str, list[GuessScores]] = field(default_factory=dict)

    def add(self, client: str, score: GuessScores) -> None:
        self.scores.setdefault(client, []).append(score)

    def summary(self) -> AttackSummary:
        return summarise(s for values in self.scores.values() for s in values)


def attack_rounds(
    recorded: Sequence[RecordedRound],
    truth: Mapping[str, Sequence[np.ndarray]],
    scorer: Callable[[RecordedRound, Update], tuple[np.ndarray, float]],
) -> AttackSummary:
    """Run ``scorer`` (round, update -> per-item score and threshold) on every recorded update of a
    client in ``truth`` ({client: truth mask per round}) and average the scores."""
    per = PerClient()
    for rec in recorded:
        for client, update in rec.updates.items():
            if client not in truth or rec.round >= len(truth[client]):
                continue
            score, threshold = scorer(rec, update)
            per.add(client, score_guess(score, truth[client][rec.round], threshold))
    return per.summary()
