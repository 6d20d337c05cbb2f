"""CombinedTM and ZeroShotTM: the reference's architecture, on the ProdLDA machinery."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from fedtopic_pipelines.core.config import CombinedTMConfig, ZeroShotTMConfig
from fedtopic_pipelines.core.federated.batching import _sparse
from fedtopic_pipelines.core.models.ctm import ContextualBatch, ContextualProdLDA

V, E = 12, 5


def _batch(seed: int = 0, sparse: bool = True) -> ContextualBatch:
    rng = np.random.default_rng(seed)
    bow = sp.csr_matrix(rng.poisson(0.5, (6, V)).astype(np.float32))
    emb = torch.from_numpy(rng.normal(size=(6, E)).astype(np.float32))
    tensor = _sparse(bow, np.arange(6), torch.device("cpu")) if sparse else torch.from_numpy(bow.toarray())
    return ContextualBatch(tensor, emb)


def test_parameter_shapes_are_those_of_contextualized_topic_models_2_6_1() -> None:
    combined = ContextualProdLDA.create(V, CombinedTMConfig(n_topics=3, embedding_size=E), seed=0)
    assert combined.adapt_bert.weight.shape == (V, E)  # adapt_bert: embedding -> vocabulary size
    # input layer on [bow, adapted embedding]; stored one row per input: CTM's (100 x 2V) transposed
    assert combined.hidden[0].weight.t().shape == (100, 2 * V)
    assert [layer.weight.shape for layer in combined.hidden[1:]] == [(100, 100)]
    zeroshot = ContextualProdLDA.create(V, ZeroShotTMConfig(n_topics=3, embedding_size=E), seed=0)
    assert not hasattr(zeroshot, "adapt_bert") and zeroshot.hidden[0].weight.t().shape == (100, E)
    assert zeroshot.beta.shape == combined.beta.shape == (3, V)  # both reconstruct the bag of words


@pytest.mark.parametrize("sparse", [True, False])
def test_combined_first_layer_equals_the_layer_on_the_concatenation(sparse: bool) -> None:
    model = ContextualProdLDA.create(V, CombinedTMConfig(n_topics=3, embedding_size=E, hidden_sizes=(7,)), seed=0)
    batch = _batch(sparse=sparse)
    dense = batch.bow.to_dense() if sparse else batch.bow
    expected = model.hidden[0](torch.cat([dense, model.adapt_bert(batch.embeddings)], dim=1))
    assert torch.allclose(model._encoder_input(batch), expected, atol=1e-5)


def test_zeroshot_topics_come_from_the_embedding_alone_combined_from_both() -> None:
    batch, other = _batch(0, sparse=False), _batch(1, sparse=False)
    swapped = ContextualBatch(other.bow, batch.embeddings)  # other words, same embeddings
    zeroshot = ContextualProdLDA.create(V, ZeroShotTMConfig(n_topics=3, embedding_size=E), seed=0)
    assert torch.equal(zeroshot.doc_topic(batch), zeroshot.doc_topic(swapped))
    combined = ContextualProdLDA.create(V, CombinedTMConfig(n_topics=3, embedding_size=E), seed=0)
    assert not torch.allclose(combined.doc_topic(batch), combined.doc_topic(swapped))
    with pytest.raises(TypeError, match="ContextualBatch"):
        combined.doc_topic(batch.bow)  # a bag of words alone is refused, never misread


def test_a_training_step_moves_every_parameter() -> None:
    model = ContextualProdLDA.create(V, CombinedTMConfig(n_topics=3, embedding_size=E), seed=0)
    loss = model.loss_on_batch(_batch(), torch.Generator().manual_seed(0))
    loss.loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    names = {f"{layer}.{stat}" for layer in ("mu_bn", "sigma_bn", "beta_bn") for stat in ("mean", "var")}
    assert loss.n == 6 and set(loss.statistics) == names


def test_zeroshot_refuses_a_normalisation_that_collapses_it() -> None:
    from fedtopic_pipelines.core.config import ConfigError, TrainConfig

    for kind in ("layer", "none"):
        needs = f"ZeroShotTM needs 'train.model.normalization: pooled_batch'.*not '{kind}'"
        with pytest.raises(ConfigError, match=needs):
            TrainConfig.from_params({"model": {"family": "zeroshottm", "normalization": kind}})
    assert TrainConfig.from_params({"model": {"family": "combinedtm", "normalization": "layer"}})  # measured fine


def test_embeddings_of_another_size_are_refused_naming_the_organisation() -> None:
    from fedtopic_pipelines.core.config import TrainConfig
    from fedtopic_pipelines.core.families.ctm import ContextualData
    from fedtopic_pipelines.core.federated.engine import FederationError
    from fedtopic_pipelines.core.training import train_scenarios

    rng = np.random.default_rng(0)
    bows = [sp.csr_matrix(rng.poisson(0.5, (n, V)).astype(np.float32)) for n in (10, 12)]
    data = {
        "a": ContextualData(bows[0], rng.normal(size=(10, E)).astype(np.float32)),
        "b": ContextualData(bows[1], rng.normal(size=(12, E + 1)).astype(np.float32)),  # another encoder
    }
    config = TrainConfig.from_params(
        {"model": {"family": "combinedtm", "n_topics": 2, "embedding_size": E}, "max_steps": 2, "batch_size": 4}
    )
    with pytest.raises(FederationError, match=r"organisation 'b' has sentence embeddings of size 6, but 'train\.model"):
        train_scenarios(data, config.replace(scenarios=("federated",)), progress=False)
