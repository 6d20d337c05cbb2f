"""PC-TD's EM (seed 002 eq. 3-13): units, exactness of the federated sum, the noise, the server step."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from fedtopic_pipelines.core.models.pctd import (
    MIN_PROBABILITY,
    SemanticUnits,
    e_step,
    fold_in,
    m_step,
    per_word_perplexity,
    random_distributions,
    semantic_consistency,
    similarity_matrix,
)


def _corpus(seed: int, docs: int, vocab: int = 12, length: int = 20) -> list[list[int]]:
    """Documents from two word blocks (two clear topics), in order, so units have a topic."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(docs):
        block = rng.integers(2)
        words = rng.integers(0, vocab // 2, size=length) + block * (vocab // 2)
        out.append(words.tolist())
    return out


def test_units_are_consecutive_words_of_the_vocabulary() -> None:
    units = SemanticUnits.from_tokens([["a", "b", "x", "c", "d"], [], ["d", "d"]], ["a", "b", "c", "d"], 3)
    assert units.n_docs == 3 and units.doc_of_unit.tolist() == [0, 0, 2]
    assert units.counts.toarray().tolist() == [[1, 1, 1, 0], [0, 0, 0, 1], [0, 0, 0, 2]]
    assert units.document_counts().toarray().tolist() == [[1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 2]]
    with pytest.raises(ValueError, match="'unit_length' is 0"):
        SemanticUnits.from_token_ids([[0]], 4, 0)
    with pytest.raises(ValueError, match="document 0 has a word id outside the vocabulary of 4"):
        SemanticUnits.from_token_ids([[4]], 4)


def test_federated_statistics_sum_to_the_pooled_e_step_and_em_climbs() -> None:
    """Without noise a unit's posterior needs only its document's p(z|d): the parties' M_t sum to
    the E-step on the pooled documents (to 1e-12), and EM never lowers the log-likelihood."""
    corpora = [_corpus(s, n) for s, n in ((1, 5), (2, 8), (3, 3))]
    parties = [SemanticUnits.from_token_ids(c, 12) for c in corpora]
    pooled = SemanticUnits.from_token_ids([doc for c in corpora for doc in c], 12)
    rng = np.random.default_rng(0)
    phi = random_distributions(2, 12, rng)
    thetas = [random_distributions(p.n_docs, 2, rng) for p in parties]
    previous = -np.inf
    for _ in range(15):
        steps = [e_step(p, phi, t, 0.0, rng) for p, t in zip(parties, thetas, strict=True)]
        whole = e_step(pooled, phi, np.vstack(thetas), 0.0, rng)
        np.testing.assert_allclose(sum(s.statistics for s in steps), whole.statistics, rtol=0, atol=1e-12)
        np.testing.assert_allclose(np.vstack([s.doc_topic for s in steps]), whole.doc_topic, atol=1e-12)
        assert whole.log_likelihood >= previous - 1e-9
        previous = whole.log_likelihood
        thetas = [s.doc_topic for s in steps]
        phi = m_step(sum(s.statistics for s in steps)).topic_word
    top = np.argsort(-phi, axis=1)[:, :6]
    assert sorted(map(sorted, (set(t // 6) for t in top))) == [[0], [1]]  # each topic found one block


def _draws(mode: str, n: int) -> np.ndarray:
    units = SemanticUnits.from_token_ids([[0, 1, 2, 3, 4, 0], [2, 3]], 5, unit_length=2)
    phi = np.array([[0.4, 0.3, 0.1, 0.1, 0.1], [0.05, 0.05, 0.3, 0.3, 0.3]])
    theta = np.array([[0.7, 0.3], [0.4, 0.6]])
    rng = np.random.default_rng(11 if mode == "projected" else 12)
    return np.stack([e_step(units, phi, theta, 0.8, rng, mode).statistics.ravel() for _ in range(n)])


def test_projected_noise_has_the_per_entry_noises_distribution() -> None:
    """The statistics drawn with the noise in K dimensions and with eq. 4's noise on every
    count have the same mean and covariance (Monte Carlo, 4,000 draws each)."""
    fast, slow = _draws("projected", 4000), _draws("per_entry", 4000)
    se = np.sqrt(fast.var(0) / len(fast) + slow.var(0) / len(slow))
    assert np.all(np.abs(fast.mean(0) - slow.mean(0)) < 4.5 * se)
    np.testing.assert_allclose(np.cov(fast.T), np.cov(slow.T), atol=0.12 * np.abs(np.cov(slow.T)).max())
    assert np.abs(fast.mean(0) - _draws("projected", 1)[0]).max() > 0.1  # the noise is there


def test_decomposition_of_the_noise_is_an_identity() -> None:
    """Omega^T r = L G^+ (Omega L)^T r + P Omega^T r, P the projector off L's columns."""
    rng = np.random.default_rng(3)
    log_phi = np.log(random_distributions(3, 7, rng)).T
    omega, r = rng.normal(size=(9, 7)), random_distributions(9, 3, rng)
    pinv = np.linalg.pinv(log_phi.T @ log_phi)
    projector = np.eye(7) - log_phi @ pinv @ log_phi.T
    np.testing.assert_allclose(log_phi @ pinv @ (omega @ log_phi).T @ r + projector @ omega.T @ r, omega.T @ r)


def test_noise_free_modes_agree_and_bad_arguments_are_named() -> None:
    units = SemanticUnits.from_token_ids(_corpus(4, 3), 12)
    rng = np.random.default_rng(1)
    phi, theta = random_distributions(2, 12, rng), random_distributions(3, 2, rng)
    a = e_step(units, phi, theta, 0.0, np.random.default_rng(0), "projected")
    b = e_step(units, phi, theta, 0.0, np.random.default_rng(5), "per_entry")
    np.testing.assert_array_equal(a.statistics, b.statistics)
    with pytest.raises(ValueError, match="'sigma' is -1"):
        e_step(units, phi, theta, -1, rng)
    with pytest.raises(ValueError, match="'noise' is 'none'"):
        e_step(units, phi, theta, 1.0, rng, "none")
    with pytest.raises(ValueError, match=r"shapes disagree: p\(w\|z\) \(2, 11\)"):
        e_step(units, phi[:, :11], theta, 0.0, rng)


def test_m_step_clips_negative_totals_and_renormalises() -> None:
    total = np.array([[2.0, -1.0, 2.0, 0.0], [-1.0, -2.0, 0.0, -0.5]])
    step = m_step(total)
    assert step.clipped == 4 and step.empty_topics == 1
    np.testing.assert_allclose(step.topic_word.sum(1), 1.0)
    assert step.topic_word.min() >= MIN_PROBABILITY * 0.99
    np.testing.assert_allclose(step.topic_word[0], [0.5, 0, 0.5, 0], atol=1e-9)
    np.testing.assert_allclose(step.topic_word[1], 0.25)
    with pytest.raises(ValueError, match="non-finite"):
        m_step(np.array([[np.nan, 1.0]]))


def test_semantic_consistency_moves_mass_to_similar_words() -> None:
    """Eq. 13: with R the identity it sharpens a topic; with words 0 and 2 similar, word 2
    gains against word 1 (equal before); tau 0 changes nothing."""
    p = np.array([[0.5, 0.25, 0.25]])
    identity = sp.identity(3, format="csr")
    sharpened = semantic_consistency(p, identity, 0.3)
    expected = p + 0.3 * p**2 / (p**2).sum()
    np.testing.assert_allclose(sharpened, expected / expected.sum())
    related = sp.csr_matrix(np.array([[1, 0, 0.8], [0, 1, 0], [0.8, 0, 1]]))
    moved = semantic_consistency(p, related, 0.3)
    assert moved[0, 2] > moved[0, 1] and moved.sum() == pytest.approx(1.0)
    assert semantic_consistency(p, related, 0.0) is p
    with pytest.raises(ValueError, match="'tau' is -0.1"):
        semantic_consistency(p, related, -0.1)


def test_similarity_matrix_is_sparse_symmetric_with_a_unit_diagonal() -> None:
    vectors = {"cat": [1.0, 0.1], "dog": [0.9, 0.2], "car": [0.0, 1.0], "bus": [0.1, 0.9]}
    r = similarity_matrix(["cat", "dog", "car", "bus", "zzz"], vectors, frequent=4, neighbours=1, threshold=0.5)
    dense = r.toarray()
    np.testing.assert_allclose(dense, dense.T)
    np.testing.assert_allclose(np.diag(dense), 1.0)
    assert dense[0, 1] > 0.9 and dense[2, 3] > 0.9  # each word's nearest neighbour
    assert dense[0, 2] == 0 and dense[4, :4].sum() == 0  # dissimilar; no vector
    assert similarity_matrix(["cat", "dog"], vectors, threshold=0.999).nnz == 2


def test_perplexity_of_a_uniform_model_is_the_vocabulary_size_and_fold_in_finds_topics() -> None:
    bow = sp.csr_matrix(np.array([[1, 2, 0, 1], [0, 0, 3, 1]]))
    assert per_word_perplexity(bow, np.full((2, 4), 0.25), np.full((2, 2), 0.5)) == pytest.approx(4.0)
    phi = np.array([[0.49, 0.49, 0.01, 0.01], [0.01, 0.01, 0.49, 0.49]])
    theta = fold_in(SemanticUnits.from_token_ids([[0, 1, 0, 1, 0, 1], [2, 3, 2, 3, 3, 2]], 4), phi)
    assert theta[0, 0] > 0.95 and theta[1, 1] > 0.95
    own_words = sp.csr_matrix(np.array([[3, 3, 0, 0]]))
    assert per_word_perplexity(own_words, phi, theta[:1]) == pytest.approx(1 / 0.49, rel=1e-6)
