"""Tokenisation and per-organisation document-frequency filtering.

Everything here runs inside one organisation: its output (token lists) never leaves
it; only :func:`term_counts` produces what is shared with the server.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache

from nltk.tokenize import RegexpTokenizer, ToktokTokenizer, wordpunct_tokenize

from fedtopic_pipelines.core.config import PreprocessConfig

logger = logging.getLogger(__name__)


def stopword_set(source: str) -> frozenset[str]:
    """Stopwords from scikit-learn and/or gensim (NLTK's list needs a download)."""
    words: set[str] = set()
    if source in ("sklearn", "both"):
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

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


def tokenize_documents(texts: Iterable[str], config: PreprocessConfig) -> list[list[str]]:
    """Lowercase, tokenise, drop stopwords, short tokens and (``alphabetic_only``) tokens with digits."""
    tokenize = _tokenizer(config.tokenizer)
    stop = _stopwords(config.stopwords)
    min_len = config.min_token_length
    alpha = config.alphabetic_only
    out: list[list[str]] = []
    for text in texts:
        tokens = tokenize(str(text).lower())
        out.append([t for t in tokens if len(t) >= min_len and (t.isalpha() or not alpha) and t not in stop])
    return out


@lru_cache(maxsize=4)
def _stopwords(source: str) -> frozenset[str]:
    return stopword_set(source) if source != "none" else frozenset()


def term_counts(docs: Iterable[Sequence[str]]) -> Counter[str]:
    """Corpus-level term frequencies: the only text-derived object that leaves an organisation."""
    counts: Counter[str] = Counter()
    for doc in docs:
        counts.update(doc)
    return counts
