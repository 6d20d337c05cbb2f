"""Federated LDA (gensim's distributed scheme) equals gensim's batch LDA on the concatenated corpus."""

from __future__ import annotations

import numpy as np
import pytest
from gensim.corpora import Dictionary
from gensim.models import LdaModel

from fedtopic_pipelines.core.models.fedlda import federated_lda

TEXTS = {
    "a": [["rocket", "orbit", "launch"], ["orbit", "moon", "rocket", "rocket"], ["hockey", "goal"]],
    "b": [["goal", "team", "hockey", "season"], ["team", "season"], ["moon", "launch", "orbit"], ["team", "goal"]],
}


def test_federated_lda_equals_gensims_batch_lda_on_the_concatenated_corpus() -> None:
    dictionary = Dictionary(t for texts in TEXTS.values() for t in texts)
    corpora = {org: [dictionary.doc2bow(t) for t in texts] for org, texts in TEXTS.items()}
    pooled = [doc for corpus in corpora.values() for doc in corpus]
    reference = LdaModel(
        corpus=pooled,
        id2word=dictionary,
        num_topics=2,
        random_state=3,
        chunksize=2,
        passes=4,
        update_every=0,
        eval_every=None,  # its perplexity log runs an extra E-step that draws from the generator
        dtype=np.float64,
    )
    model, history = federated_lda(
        corpora, dictionary, num_topics=2, passes=4, seed=3, chunksize=2, dtype=np.float64, progress=False
    )
    np.testing.assert_allclose(model.get_topics(), reference.get_topics(), rtol=0, atol=1e-10)
    assert [h["documents"] for h in history] == [7] * 4
    assert history[0]["bytes"] == {"a": 2 * len(dictionary) * 8, "b": 2 * len(dictionary) * 8}  # k x V float64
    assert model.get_topics().shape == (2, len(dictionary))


def test_an_organisation_without_documents_is_refused() -> None:
    dictionary = Dictionary(TEXTS["a"])
    with pytest.raises(ValueError, match=r"organisations \['b'\] have no document"):
        federated_lda({"a": [dictionary.doc2bow(t) for t in TEXTS["a"]], "b": []}, dictionary, 2, 1, 0)
