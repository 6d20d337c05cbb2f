import numpy as np
import pytest

from fedtopic_pipelines.core.metrics import similarity
from fedtopic_pipelines.core.metrics.similarity import (
    align_topics,
    dss,
    expected_pair_similarity,
    hellinger_similarity,
    tss,
    tss_baseline,
)


def _dirichlet(rows: int, cols: int, alpha: float, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.full(cols, alpha), size=rows)


def test_dss_of_a_model_against_itself_is_zero_and_matches_the_definition() -> None:
    true, inferred = _dirichlet(30, 6, 0.5, 0), _dirichlet(30, 4, 0.5, 1)
    assert dss(true, true) == pytest.approx(0.0, abs=1e-12)
    w_true = np.array([[np.sum(np.sqrt(a * b)) for b in true] for a in true])
    w_inf = np.array([[np.sum(np.sqrt(a * b)) for b in inferred] for a in inferred])
    off_diagonal = ~np.eye(30, dtype=bool)
    expected = np.abs(w_true - w_inf)[off_diagonal].sum() / 30
    assert dss(true, inferred) == pytest.approx(expected, rel=1e-12)
    assert dss(inferred, true) == pytest.approx(expected, rel=1e-12)


def test_dss_in_blocks_equals_one_block(monkeypatch: pytest.MonkeyPatch) -> None:
    true, inferred = _dirichlet(50, 5, 0.3, 2), _dirichlet(50, 5, 0.3, 3)
    whole = dss(true, inferred)
    monkeypatch.setattr(similarity, "DSS_BLOCK", 7)
    assert dss(true, inferred) == pytest.approx(whole, rel=1e-12)


def test_tss_of_a_model_against_itself_is_k_and_ignores_topic_order() -> None:
    beta = _dirichlet(12, 200, 0.05, 4)
    assert tss(beta, beta) == pytest.approx(12.0)
    assert tss(beta, beta[::-1]) == pytest.approx(12.0)
    assert tss(beta, _dirichlet(12, 200, 0.05, 5)) < 12.0
    np.testing.assert_allclose(np.diag(hellinger_similarity(beta, beta)), 1.0)


def test_align_topics_reindexes_by_term_not_by_position() -> None:
    reference = [f"term{i}" for i in range(5)]
    model_vocab = ["term3", "term0", "term4"]
    beta = np.array([[0.2, 0.3, 0.5]])
    aligned = align_topics(beta, model_vocab, reference)
    np.testing.assert_allclose(aligned, [[0.3, 0.0, 0.0, 0.2, 0.5]])
    with pytest.raises(ValueError, match="not in the reference vocabulary"):
        align_topics(beta, ["term3", "term0", "wd9"], reference)


@pytest.mark.parametrize("eta", [0.01, 0.08, 1.0])
def test_tss_baseline_lies_within_its_analytic_range(eta: float) -> None:
    k, v = 20, 1000
    beta = _dirichlet(k, v, eta, 6)
    mean, std = tss_baseline(beta, eta, draws=5, rng=np.random.default_rng(0))
    pair = expected_pair_similarity(eta, v)
    assert k * pair <= mean <= k * min(1.0, k * pair)
    assert std >= 0.0


def test_expected_pair_similarity_matches_monte_carlo() -> None:
    rng = np.random.default_rng(1)
    p, q = rng.dirichlet(np.full(500, 0.05), size=4000), rng.dirichlet(np.full(500, 0.05), size=4000)
    monte_carlo = np.sum(np.sqrt(p * q), axis=1).mean()
    assert expected_pair_similarity(0.05, 500) == pytest.approx(monte_carlo, rel=0.02)


def test_mismatched_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="same documents"):
        dss(_dirichlet(3, 2, 1.0, 0), _dirichlet(4, 2, 1.0, 0))
    with pytest.raises(ValueError, match="same vocabulary"):
        tss(_dirichlet(3, 5, 1.0, 0), _dirichlet(3, 6, 1.0, 0))
    with pytest.raises(ValueError, match="non-finite"):
        dss(np.full((2, 2), np.nan), np.full((2, 2), 0.5))
