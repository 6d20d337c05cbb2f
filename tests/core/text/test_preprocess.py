"""Streaming, multi-process preprocessing equals the in-memory algorithm."""

from __future__ import annotations

import math
import re
from collections import Counter
from unittest.mock import patch

import numpy as np
import pandas as pd
import pytest

from fedtopic_pipelines.core.config import ConfigError, EvaluateConfig, PreprocessConfig, TrainConfig, from_mapping
from fedtopic_pipelines.core.shards import ShardedTable, write_parquet_atomic
from fedtopic_pipelines.core.text.demo import CorpusError
from fedtopic_pipelines.core.text.preprocess import (
    check_organisations,
    document_frequency_window,
    preprocess_shards,
    svm_minimum_documents,
)
from fedtopic_pipelines.core.text.tokenize import tokenize_documents

WORDS = [
    "rocket",
    "orbit",
    "launch",
    "engine",
    "hockey",
    "puck",
    "skate",
    "goal",
    "disk",
    "drive",
    "memory",
    "cache",
    "the",
    "and",
    "42",
    "x",
]


def corpus(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "doc_id": [f"o:{i}" for i in range(n)],
            "organisation": "o",
            "text": [" ".join(rng.choice(WORDS, rng.integers(0, 12))) for _ in range(n)],
            "label": "",
            "split": np.where(rng.random(n) < 0.2, "test", "train"),
        }
    )


def sharded(frame: pd.DataFrame, tmp_path, size: int) -> ShardedTable:
    paths = []
    for i, begin in enumerate(range(0, len(frame), size)):
        write_parquet_atomic(frame.iloc[begin : begin + size], tmp_path / f"part-{i:05d}.parquet")
        paths.append(tmp_path / f"part-{i:05d}.parquet")
    return ShardedTable(paths)


def document_frequency_vocabulary(docs: list[list[str]], min_df: int, max_df: float) -> set[str]:
    """Terms in at least ``min_df`` and at most ``max_df`` (a fraction) of ``docs``, counted in memory."""
    df: Counter[str] = Counter()
    for doc in docs:
        df.update(set(doc))
    return {t for t, n in df.items() if min_df <= n <= max_df * len(docs)}


def test_the_in_memory_reference_applies_both_limits() -> None:
    docs = [["a", "b", "c"], ["a", "b"], ["a", "d"], ["a"]]
    assert document_frequency_vocabulary(docs, min_df=2, max_df=0.75) == {"b"}  # a: 4/4 > 0.75; c, d: 1


def reference(frame: pd.DataFrame, config: PreprocessConfig) -> tuple[list[str], dict[str, int]]:
    """The in-memory algorithm: tokenise all, vocabulary on train, filter, drop empty, count train."""
    docs = tokenize_documents(frame["text"], config)
    train = [d for d, s in zip(docs, frame["split"], strict=True) if s == "train"]
    keep = document_frequency_vocabulary(train, config.min_df, config.max_df)
    kept = [" ".join(t for t in d if t in keep) for d in docs]
    counts: Counter[str] = Counter()
    for text, split in zip(kept, frame["split"], strict=True):
        if split == "train":
            counts.update(text.split())
    return [k for k in kept if k], dict(counts)


@pytest.mark.parametrize("processes", [1, 2])
def test_sharded_and_parallel_equal_the_in_memory_algorithm(tmp_path, processes) -> None:
    frame = corpus(900)
    config = PreprocessConfig(min_df=3, max_df=0.3, processes=processes, chunk_documents=100)
    result = preprocess_shards(sharded(frame, tmp_path, 250), config)
    tokens = result.tokens.to_frame()
    expected_tokens, expected_counts = reference(frame, config)
    assert tokens["tokens"].tolist() == expected_tokens
    assert result.term_counts == expected_counts
    assert list(result.term_counts) == list(expected_counts)  # same order: the consensus breaks ties by it
    assert result.report["documents_in"] == 900
    assert result.report["documents_out"] + result.report["dropped_empty_after_cleaning"] == 900
    assert result.report["shards"] == len(result.tokens.paths) <= 4
    assert result.report["processes"] == processes
    result.tokens.discard()
    assert not result.tokens.staging.exists()


def test_a_plain_table_is_one_shard(tmp_path) -> None:
    frame = corpus(50, seed=1)
    config = PreprocessConfig(min_df=1, max_df=1.0)
    assert preprocess_shards(frame, config).tokens.to_frame()["tokens"].tolist() == reference(frame, config)[0]


def test_no_training_document_left_is_named() -> None:
    frame = corpus(20).assign(text="the and 42", organisation="hospital")
    with pytest.raises(CorpusError, match="organisation 'hospital' .* no training document left.*stopword"):
        preprocess_shards(frame, PreprocessConfig(min_df=1))
    with pytest.raises(CorpusError, match="organisation 'hospital' has no training documents"):
        preprocess_shards(frame.assign(split="test"), PreprocessConfig(min_df=1))


def test_a_min_df_that_leaves_no_document_names_a_value_computed_from_the_organisation() -> None:
    # 30 training documents, each with its own two words and one word shared by three of them
    texts = [f"alpha{chr(97 + i)} beta{chr(97 + i)} shared{chr(97 + i // 3)}" for i in range(30)]
    frame = corpus(30).assign(text=texts, split="train", organisation="clinic")
    config = PreprocessConfig(min_df=5, max_df=0.5, alphabetic_only=False)
    with pytest.raises(CorpusError, match="'preprocess.min_df' = 5 \\(5 documents\\).* keep 0 terms") as caught:
        preprocess_shards(frame, config)
    suggested = int(re.search(r"try 'preprocess.min_df' = (\d+)", str(caught.value)).group(1))
    assert suggested == 1  # 60 words in one document, 10 in three: the 500 most widespread include the former
    assert preprocess_shards(frame, PreprocessConfig(min_df=suggested, max_df=0.5, alphabetic_only=False)).term_counts
    everywhere = corpus(30).assign(text="common word", split="train", organisation="clinic")
    with pytest.raises(CorpusError, match="try 'preprocess.max_df' = 1: every term is in more than 15"):
        preprocess_shards(everywhere, PreprocessConfig(min_df=1, max_df=0.5))


def test_synthetic_terms_survive_with_the_whitespace_tokenizer() -> None:
    config = PreprocessConfig(tokenizer="whitespace", alphabetic_only=False, stopwords="none", min_token_length=1)
    assert tokenize_documents(["term12 term3 term12"], config) == [["term12", "term3", "term12"]]
    assert tokenize_documents(["term12 term3"], PreprocessConfig()) == [[]]


# min_df that scales with the organisation, and the check before preprocessing -----------
@pytest.mark.parametrize(("min_df", "n_train", "least"), [(5, 11, 5), (0.1, 11, 2), (0.1, 10, 1), (0.01, 5, 1)])
def test_min_df_is_a_count_or_a_share_rounded_up(min_df, n_train, least) -> None:
    assert document_frequency_window(PreprocessConfig(min_df=min_df, max_df=0.5), n_train) == (least, 0.5 * n_train)


def test_a_share_min_df_keeps_the_terms_scikit_learn_keeps(tmp_path) -> None:
    from sklearn.feature_extraction.text import CountVectorizer

    frame = corpus(400, seed=3)
    config = PreprocessConfig(min_df=0.15, max_df=0.4, chunk_documents=100)
    result = preprocess_shards(sharded(frame, tmp_path, 150), config)
    docs = tokenize_documents(frame["text"], config)
    train = [d for d, s in zip(docs, frame["split"], strict=True) if s == "train"]
    expected = CountVectorizer(analyzer=lambda d: d, min_df=0.15, max_df=0.4).fit(train).vocabulary_
    assert set(result.term_counts) == set(expected) and expected
    assert result.report["min_df_documents"] == document_frequency_window(config, len(train))[0] > 1
    result.tokens.discard()


@pytest.mark.parametrize("min_df", [1.5, 0.0, 1.0, 0, True, "5"])
def test_min_df_must_be_a_positive_count_or_a_share_below_1(min_df) -> None:
    with pytest.raises(ConfigError, match="preprocess.min_df"):
        from_mapping(PreprocessConfig, {"min_df": min_df}, "preprocess")


def test_a_window_no_term_can_pass_is_named_before_the_second_pass() -> None:
    frame = corpus(12, seed=2).assign(organisation="tiny", split="train")
    with pytest.raises(CorpusError, match=r"organisation 'tiny' \(12 training documents\).*'preprocess.min_df' = 7"):
        preprocess_shards(frame, PreprocessConfig(min_df=7, max_df=0.5))


COUNTS = {"big": {"train": 400, "test": 100}, "small": {"train": 6, "test": 0}, "empty": {"train": 0, "test": 3}}


def _check(counts, preprocess=None, train=None, evaluate=None):
    return check_organisations(
        counts,
        PreprocessConfig.model_validate(preprocess or {}),
        TrainConfig.model_validate(train or {}),
        EvaluateConfig.model_validate(evaluate or {}),
    )


def test_the_check_names_every_organisation_too_small_with_its_counts_and_the_parameter() -> None:
    with pytest.raises(CorpusError) as caught:
        _check(COUNTS, {"min_df": 5, "max_df": 0.5})
    message = str(caught.value)
    assert "before preprocessing" in message and "big" not in message
    assert "organisation 'small' (6 training, 0 test documents): 'preprocess.min_df' = 5" in message
    assert "set 'preprocess.min_df' to a share" in message
    assert "organisation 'empty' (0 training, 3 test documents): no training document" in message


def test_the_check_names_a_validation_split_that_leaves_too_few_to_train() -> None:
    with pytest.raises(CorpusError, match=r"'small' \(6 training.*'train.validation_fraction' = 0.8"):
        _check({"small": COUNTS["small"]}, {"min_df": 1}, {"validation_fraction": 0.8})


def test_the_check_passes_a_scaled_min_df_and_warns_of_missing_metrics(caplog) -> None:
    report = _check(
        {k: v for k, v in COUNTS.items() if k != "empty"} | {"few": {"train": 9, "test": 2}}, {"min_df": 0.01}
    )
    assert report["big"] == {
        "train": 400,
        "test": 100,
        "min_df_documents": 4,
        "max_df_documents": 200.0,
        "warnings": [],
    }
    assert report["small"]["min_df_documents"] == 1
    assert report["small"]["warnings"] == ["no test document: its perplexity and macro-F1 will be missing"]
    assert "the SVM needs at least 6" in report["few"]["warnings"][0]
    assert "organisation 'small' (6 training, 0 test documents): no test document" in caplog.text


def test_svm_minimum_documents_matches_the_classifier_rule() -> None:
    from fedtopic_pipelines.core.metrics.classification import svm_macro_f1

    for test_size in (0.2, 0.5):
        least = svm_minimum_documents(test_size)
        labels = np.array(["a", "b"] * least)[:least]
        features = np.eye(least)
        assert svm_macro_f1(features, labels, test_size, 1.0, 0) is not None
        assert svm_macro_f1(features[:-1], labels[:-1], test_size, 1.0, 0) is None


def test_a_document_over_max_document_chars_is_truncated_and_counted(tmp_path, caplog) -> None:
    frame = corpus(300)
    long_row = 7
    frame.loc[long_row, "text"] = "rocket orbit " * 50 + "hockey " * 1000  # 7,650 characters
    frame.loc[long_row, "split"] = "train"
    config = PreprocessConfig(min_df=1, max_df=1.0, max_document_chars=650, processes=1)
    with caplog.at_level("WARNING"):
        result = preprocess_shards(sharded(frame, tmp_path, 100), config)
    assert result.report["documents_truncated"] == 1
    assert result.report["truncated_doc_ids"] == [f"o:{long_row}"]
    assert result.report["max_document_chars"] == 650
    assert "preprocess o: 1 document(s) longer than 'preprocess.max_document_chars'" in caplog.text
    tokens = result.tokens.to_frame().set_index("doc_id")["tokens"]
    assert tokens[f"o:{long_row}"].split() == ["rocket", "orbit"] * 50  # the first 650 characters, no word cut
    # without a limit the whole document is kept and nothing is counted
    whole = preprocess_shards(frame, PreprocessConfig(min_df=1, max_df=1.0, max_document_chars=None))
    assert whole.report["documents_truncated"] == 0
    assert whole.tokens.to_frame().set_index("doc_id")["tokens"][f"o:{long_row}"].split().count("hockey") == 1000


def test_a_tokenizer_error_names_the_organisation_and_row(tmp_path) -> None:
    frame = corpus(300)

    def fail_on_poison(text: str) -> list[str]:
        if "poison" in text:
            raise TimeoutError("regular-expression match exceeded its 5.0s time limit ... (ReDoS)")
        return text.split()

    frame.loc[213, "text"] = "poison"
    expected = r"organisation 'o', row 213 \(doc_id 'o:213', 6 characters\).*ReDoS"
    with (
        patch("fedtopic_pipelines.core.text.tokenize._tokenizer", return_value=fail_on_poison),
        pytest.raises(CorpusError, match=expected),
    ):
        preprocess_shards(sharded(frame, tmp_path, 100), PreprocessConfig(min_df=1, chunk_documents=50))


def test_max_document_chars_is_validated() -> None:
    with pytest.raises(ConfigError, match="max_document_chars"):
        from_mapping(PreprocessConfig, {"max_document_chars": 0}, "preprocess")


def _with_boilerplate(frame: pd.DataFrame) -> pd.DataFrame:
    """Every document between the same navigation line and licence line (mixed case and spacing),
    half of them also with a signature line."""
    texts = [
        f"Home |  Contact\n{t}\n" + ("--\nsent from my desk\n" if i % 2 else "") + "licence CC BY-SA"
        for i, t in enumerate(frame["text"])
    ]
    return frame.assign(text=texts)


@pytest.mark.parametrize("processes", [1, 2])
def test_lines_repeated_across_documents_are_removed_and_counted(tmp_path, processes) -> None:
    frame = corpus(300, seed=3)
    config = PreprocessConfig(min_df=1, max_df=1.0, processes=processes, chunk_documents=50, repeated_lines=0.3)
    result = preprocess_shards(sharded(_with_boilerplate(frame), tmp_path, 120), config)
    assert result.tokens.to_frame()["tokens"].tolist() == reference(frame, config)[0]  # as if never there
    assert not {"home", "contact", "licence", "sent", "desk"} & set(result.term_counts)
    n_train = int((frame["split"] == "train").sum())
    report = result.report["repeated_lines"]
    assert report["threshold_documents"] == math.ceil(0.3 * n_train)
    assert report["distinct_lines"] == 4  # navigation, licence, "--" and the signature
    assert report["occurrences_removed"] == 2 * 300 + 2 * 150
    assert report["documents_changed"] == 300


def test_a_line_below_the_repeat_threshold_and_corpus_stopwords_stay_apart(tmp_path) -> None:
    frame = corpus(40, seed=4)
    texts = _with_boilerplate(frame)["text"]
    config = PreprocessConfig(min_df=1, max_df=1.0, repeated_lines=10_000, extra_stopwords=("Licence", "rocket"))
    result = preprocess_shards(frame.assign(text=texts), config)
    assert result.report["repeated_lines"]["distinct_lines"] == 0  # no line reaches 10,000 documents
    assert {"home", "contact"} <= set(result.term_counts)  # kept: below the threshold
    assert not {"licence", "rocket"} & set(result.term_counts)  # a corpus's own stopwords, any case
    assert "repeated_lines" not in preprocess_shards(frame, PreprocessConfig(min_df=1, max_df=1.0)).report
