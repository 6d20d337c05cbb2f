import numpy as np
import pytest

from fedtopic_pipelines.core.config import ConfigError, SyntheticGeneratorConfig, from_mapping
from fedtopic_pipelines.core.synthetic import generate, sample_documents

SMALL = SyntheticGeneratorConfig(
    n_organisations=3, vocab_size=300, n_topics=9, n_shared=3, n_train=60, n_validation=20, seed=7
)


def test_topics_are_split_into_shared_and_private_blocks() -> None:
    corpus = generate(SMALL)
    assert corpus.beta.shape == (9, 300)
    np.testing.assert_allclose(corpus.beta.sum(axis=1), 1.0)
    privates = [set(org.private_topics) for org in corpus.organisations.values()]
    assert [sorted(p) for p in privates] == [[3, 4], [5, 6], [7, 8]]
    for org in corpus.organisations.values():
        assert set(org.active_topics) == {0, 1, 2} | set(org.private_topics)


def test_private_topics_never_appear_in_another_organisations_mixtures() -> None:
    corpus = generate(SMALL)
    for org in corpus.organisations.values():
        others = [t for o in corpus.organisations.values() if o is not org for t in o.private_topics]
        for theta in (org.theta_train, org.theta_validation):
            assert (theta[:, others] == 0).all()
            assert (theta[:, org.active_topics] > 0).all()
            np.testing.assert_allclose(theta.sum(axis=1), 1.0)


def test_private_topic_words_never_appear_in_another_organisations_documents() -> None:
    # Topics with disjoint word supports make the emitting topic of every word visible.
    k, v = 4, 40
    beta = np.zeros((k, v))
    for topic in range(k):
        beta[topic, topic * 10 : (topic + 1) * 10] = 0.1
    theta = np.array([[0.5, 0.5, 0.0, 0.0]] * 50 + [[0.5, 0.0, 0.5, 0.0]] * 50)
    lengths = np.full(100, 200)
    counts = sample_documents(np.random.default_rng(0), theta, lengths, np.cumsum(beta, axis=1)).toarray()
    assert counts[:50, 20:].sum() == 0 and counts[50:, 10:20].sum() == 0 and counts[:, 30:].sum() == 0
    assert counts[:50, 10:20].sum() > 0 and counts[50:, 20:30].sum() > 0
    np.testing.assert_array_equal(counts.sum(axis=1), lengths)


def test_document_lengths_are_within_the_configured_range() -> None:
    corpus = generate(SMALL)
    for org in corpus.organisations.values():
        for matrix in (org.train, org.validation):
            lengths = np.asarray(matrix.sum(axis=1)).ravel()
            assert lengths.min() >= 150 and lengths.max() <= 250
        assert org.train.shape == (60, 300) and org.validation.shape == (20, 300)


def test_fixed_seed_is_deterministic_and_organisations_are_independent_streams() -> None:
    first, second = generate(SMALL), generate(SMALL)
    np.testing.assert_array_equal(first.beta, second.beta)
    for name in first.organisations:
        assert (first.organisations[name].train != second.organisations[name].train).nnz == 0
    other = generate(SMALL.replace(seed=8))
    assert not np.array_equal(first.beta, other.beta)


def test_paper_alpha_default_and_authors_inactive_prior() -> None:
    assert SyntheticGeneratorConfig().document_prior == pytest.approx(1.0)  # 50 / K with K = 50
    authors = generate(SMALL.replace(alpha=0.1, inactive_ratio=1e-4))
    org = authors.organisations["org1"]
    inactive = [t for t in range(9) if t not in org.active_topics]
    assert (org.theta_train[:, inactive] >= 0).all()
    assert org.theta_train[:, inactive].mean() < org.theta_train[:, org.active_topics].mean() / 100


@pytest.mark.parametrize(
    ("change", "parameter"),
    [
        ({"n_shared": 60}, "synthetic.generator.n_shared"),
        ({"n_shared": 12}, "synthetic.generator.n_shared"),  # 38 private topics over 5 organisations
        ({"eta": 0.0}, "synthetic.generator.eta"),
        ({"eta": -1.0}, "synthetic.generator.eta"),
        ({"alpha": 0.0}, "synthetic.generator.alpha"),
        ({"doc_length": (250, 150)}, "synthetic.generator.doc_length"),
        ({"n_train": 3}, "synthetic.generator.n_train"),
    ],
)
def test_invalid_generator_parameters_are_named(change: dict, parameter: str) -> None:
    with pytest.raises(ConfigError, match=parameter.replace(".", r"\.")):
        from_mapping(SyntheticGeneratorConfig, change, "synthetic.generator")
