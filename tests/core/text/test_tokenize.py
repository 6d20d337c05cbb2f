from unittest.mock import patch

import numpy as np
import pytest

from fedtopic_pipelines.core.config import PreprocessConfig
from fedtopic_pipelines.core.text.tokenize import (
    PIECE_CHARS,
    TokenizeError,
    _tokenizer,
    pieces,
    term_counts,
    tokenize_documents,
    tokenize_long,
    truncate,
)


def test_tokenize_lowercases_and_drops_stopwords_numbers_short_tokens() -> None:
    docs = tokenize_documents(["The Rocket launched in 1986, at NASA's site; ok x2"], PreprocessConfig())
    assert docs == [["rocket", "launched", "nasa", "site"]]


def test_every_tokenizer_runs_without_nltk_data() -> None:
    for name in ("regexp", "wordpunct", "toktok"):
        assert "rocket" in tokenize_documents(["the rocket"], PreprocessConfig(tokenizer=name))[0]


def test_term_counts() -> None:
    assert term_counts([["a", "b"], ["a"]]) == {"a": 2, "b": 1}


def long_text(n_chars: int, seed: int = 0) -> str:
    """Words, numbers, punctuation and every kind of whitespace, ``n_chars`` long."""
    rng = np.random.default_rng(seed)
    vocab = np.array(
        ["Rocket", "orbit.", "x2", "NASA's", '"quoted"', "(launch)", "hockey,", "naïve", "3.14", "--", "a_b"]
    )
    seps = np.array([" ", " ", " ", "\n", "\t", "  ", ". "])
    n = n_chars // 5
    text = "".join(w + s for w, s in zip(rng.choice(vocab, n), rng.choice(seps, n), strict=True))
    return text[:n_chars]


@pytest.mark.parametrize("name", ["regexp", "wordpunct", "toktok", "whitespace"])
def test_tokenising_in_pieces_equals_tokenising_the_whole_text(name: str) -> None:
    text = long_text(300_000)
    tokenize = _tokenizer(name)
    # small pieces: many boundaries, each must fall at whitespace without changing a token
    assert tokenize_long(text, tokenize, size=997) == tokenize(text)


def test_pieces_join_to_the_text_and_respect_the_size() -> None:
    text = long_text(50_000) + "y" * 3000  # a run without whitespace longer than a piece is cut
    parts = pieces(text, 1000)
    assert "".join(parts) == text
    assert max(map(len, parts)) <= 1000
    assert all(p[-1].isspace() for p in parts[:-4])


def test_a_multi_megabyte_document_never_passes_nltk_more_than_a_piece() -> None:
    # the probe: NLTK's 5 s regex limit fails a 20 MB document; here, every call NLTK sees is
    # at most PIECE_CHARS long and the tokens equal whole-text tokenisation
    text = long_text(3_000_000)
    seen: list[int] = []
    regexp = _tokenizer("regexp")

    def spy(piece: str) -> list[str]:
        seen.append(len(piece))
        return regexp(piece)

    config = PreprocessConfig(max_document_chars=None, min_token_length=1, stopwords="none", alphabetic_only=False)
    with patch("fedtopic_pipelines.core.text.tokenize._tokenizer", return_value=spy):
        docs = tokenize_documents([text], config)
    assert len(seen) >= 30 and max(seen) <= PIECE_CHARS
    assert docs == [regexp(text.lower())]


def test_a_tokenizer_error_names_the_document() -> None:
    def fail(piece: str) -> list[str]:
        raise TimeoutError("regular-expression match exceeded its 5.0s time limit")

    with (
        patch("fedtopic_pipelines.core.text.tokenize._tokenizer", return_value=fail),
        pytest.raises(TokenizeError, match=r"document 0: TimeoutError: regular-expression") as info,
    ):
        tokenize_documents(["a rocket"], PreprocessConfig())
    assert info.value.index == 0


def test_truncate_cuts_at_whitespace_and_only_long_documents() -> None:
    assert truncate("rocket orbit launch", 10) == "rocket "
    assert truncate("rocket orbit", 100) == "rocket orbit"
    assert truncate("rocket orbit", None) == "rocket orbit"
    config = PreprocessConfig(max_document_chars=14, stopwords="none")
    assert tokenize_documents(["rocket orbit launch", "hockey puck"], config) == [
        ["rocket", "orbit"],
        ["hockey", "puck"],
    ]
