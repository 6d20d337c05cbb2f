"""Tokenisation and per-organisation document-frequency filtering.

Everything here runs inside one organisation: its output (token lists) never leaves
it; only :func:`term_counts` produces what is shared with the server.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache

from nltk.tokenize import RegexpTokenizer, ToktokTokenizer, wordpunct_tokenize

from fedtopic_pipelines.core.config import PreprocessConfig

logger = logging.getLogger(__name__)


class TokenizeError(ValueError):
    """The tokenizer failed on the document at ``index`` of the batch; the caller names it."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(index, message)
        self.index = index
        self.message = message

    def __str__(self) -> str:
        return f"document {self.index}: {self.message}"


def stopword_set(source: str) -> frozenset[str]:
    """Stopwords from scikit-learn and/or gensim (NLTK's list needs a download)."""
    words: set[str] = set()
    if source in ("sklearn", "both"):
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS  # deferred (and gensim below): heavy

        words |= set(ENGLISH_STOP_WORDS)
    if source in ("gensim", "both"):
        from gensim.parsing.preprocessing import STOPWORDS

        words |= set(STOPWORDS)
    return frozenset(words)


def _tokenizer(name: str):
    # All work without NLTK data packages (punkt cannot be downloaded here).
    if name == "whitespace":
        return str.split
    if name == "regexp":
        return RegexpTokenizer(r"[^\W_]+").tokenize
    if name == "toktok":
        return ToktokTokenizer().tokenize
    return wordpunct_tokenize


# NLTK (3.9+) runs every regular expression under a 5 s wall-clock limit (``nltk.redos``) and
# raises "regular-expression match exceeded its 5.0s time limit ... ReDoS" when a match takes
# longer, which a plain 20 MB document does on a shared core. Pieces of this many characters take
# a few milliseconds each (docs/ingestion.md#long-documents).
PIECE_CHARS = 100_000


def _cut(text: str, start: int, end: int) -> int:
    """Where the piece ``text[start:end]`` should end so that no token is cut: after the last space
    that follows a letter or digit (no NLTK tokenizer's pattern crosses it, and ToktokTokenizer's
    end-of-text rules do not fire there), else after any whitespace, else at ``end`` (a piece of
    ``PIECE_CHARS`` characters without whitespace is cut)."""
    i = text.rfind(" ", start + 1, end)
    while i > start and not text[i - 1].isalnum():
        i = text.rfind(" ", start + 1, i)
    if i > start:
        return i + 1
    for j in range(end - 1, start, -1):
        if text[j].isspace():
            return j + 1
    return end


def pieces(text: str, size: int = PIECE_CHARS) -> list[str]:
    """``text`` in consecutive pieces of at most ``size`` characters, each ending at whitespace
    where there is any: their concatenation is ``text``."""
    out: list[str] = []
    start = 0
    while len(text) - start > size:
        end = _cut(text, start, start + size)
        out.append(text[start:end])
        start = end
    out.append(text[start:])
    return out


def tokenize_long(text: str, tokenize: Callable[[str], list[str]], size: int = PIECE_CHARS) -> list[str]:
    """Tokenise ``text`` piece by piece (:func:`pieces`) so that no single call passes NLTK more than
    ``size`` characters; for text whose pieces end at whitespace this equals ``tokenize(text)``."""
    if len(text) <= size:
        return tokenize(text)
    return [token for piece in pieces(text, size) for token in tokenize(piece)]


def truncate(text: str, max_chars: int | None) -> str:
    """The first ``max_chars`` characters of ``text``, cut back to the last whitespace so that no
    word is cut (``None``: no limit)."""
    if max_chars is None or len(text) <= max_chars:
        return text
    return text[: _cut(text, 0, max_chars)]


def tokenize_documents(texts: Iterable[str], config: PreprocessConfig) -> list[list[str]]:
    """Lowercase, tokenise, drop stopwords, short tokens and (``alphabetic_only``) tokens with digits.

    A document longer than ``max_document_chars`` is truncated (:func:`truncate`; the caller
    counts them) and a long one is tokenised in pieces (:func:`tokenize_long`).
    """
    tokenize = _tokenizer(config.tokenizer)
    stop = _stopwords(config.stopwords) | _extra(config.extra_stopwords)
    min_len = config.min_token_length
    alpha = config.alphabetic_only
    out: list[list[str]] = []
    for index, text in enumerate(texts):
        try:
            tokens = tokenize_long(truncate(str(text), config.max_document_chars).lower(), tokenize)
        except Exception as exc:  # NLTK's TimeoutError and anything else: say which document
            raise TokenizeError(index, f"{type(exc).__name__}: {exc}") from exc
        out.append([t for t in tokens if len(t) >= min_len and (t.isalpha() or not alpha) and t not in stop])
    return out


@lru_cache(maxsize=4)
def _stopwords(source: str) -> frozenset[str]:
    return stopword_set(source) if source != "none" else frozenset()


@lru_cache(maxsize=4)
def _extra(words: tuple[str, ...]) -> frozenset[str]:
    """A corpus's own stopwords, lowercased like the tokens they are compared with."""
    return frozenset(w.lower() for w in words)


def term_counts(docs: Iterable[Sequence[str]]) -> Counter[str]:
    """Corpus-level term frequencies: the only text-derived object that leaves an organisation."""
    counts: Counter[str] = Counter()
    for doc in docs:
        counts.update(doc)
    return counts
