"""Organisations that share their terms, for the Flower tests of the keyed vocabulary exchange.

Under the configured ``privacy.vocab_k: 2`` (conf/base) a term enters the common vocabulary only
if at least two organisations hold it. The project's ``tiny_raw_tables`` give each organisation a
topic of its own, so nothing would pass; in ``shared_raw_tables`` every organisation writes half
of its documents on the next one's topic, and every term is held by exactly two organisations:
the keyed exchange keeps the whole vocabulary. The other Flower tests keep ``tiny_raw_tables``
(the library's default, k = 1), whose figures (SecAgg's quantisation bound) were derived on them.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.conftest import WORDS


def make_shared_raw_tables() -> dict[str, pd.DataFrame]:
    """Three organisations (deterministic); the odd documents of each are on the next one's topic."""
    rng = np.random.default_rng(0)
    topics = list(WORDS.items())
    tables = {}
    for j, org in enumerate(("alpha", "beta", "gamma")):
        rows = []
        for i in range(40):
            topic, words = topics[(j + i % 2) % len(topics)]
            text = " ".join(rng.choice(words.split(), size=8)) + " the and of 1234"
            label = topic if i % 8 < 4 else f"{topic}_b"
            rows.append((f"{org}:{i}", org, text, label, "test" if i % 4 == 0 else "train"))
        tables[org] = pd.DataFrame(rows, columns=["doc_id", "organisation", "text", "label", "split"])
    return tables


@pytest.fixture
def shared_raw_tables() -> dict[str, pd.DataFrame]:
    """Organisations whose every term two of them hold (:func:`make_shared_raw_tables`)."""
    return make_shared_raw_tables()
