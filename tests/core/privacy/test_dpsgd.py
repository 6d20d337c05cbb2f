"""Sample-level DP-SGD (``privacy.dp.level: sample``; core/privacy/dpsgd.py): the per-document
gradients add up to the batch's, clipping bounds what one document moves, the noise is seeded, and
a federation under it trains, records the document-level epsilon and equals its plain run without
noise. The Flower grid's run is in tests/flower/test_federation.py."""

from __future__ import annotations

import math

import pytest
import scipy.sparse as sp
import torch

from fedtopic_pipelines.core.config import CombinedTMConfig, ConfigError, ProdLDAConfig
from fedtopic_pipelines.core.models.ctm import ContextualBatch, ContextualProdLDA
from fedtopic_pipelines.core.models.prodlda import ProdLDA
from fedtopic_pipelines.core.privacy.accountant import gaussian_privacy
from fedtopic_pipelines.core.privacy.defences import flat_norm, noise_generator
from fedtopic_pipelines.core.privacy.dpsgd import clipped_gradient_sum, private_gradient
from tests.core.privacy.test_defences import _check, _config, _run

V, N = 30, 40


def _bow(seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.poisson(torch.full((N, V), 0.5), generator=generator)


def _batch_gradient(model: ProdLDA, batch, seed: int) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    model.loss_on_batch(batch, torch.Generator().manual_seed(seed)).loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def _names(model: torch.nn.Module) -> list[str]:
    return [name for name, _ in model.named_parameters()]


@pytest.mark.parametrize(("normalization", "dropout"), [("layer", 0.2), ("none", 0.2), ("layer", 0.0)])
def test_per_document_gradients_add_up_to_the_batch_gradient(normalization: str, dropout: float) -> None:
    """With a bound no document reaches, the clipped sum over n is the mean-loss gradient of the
    batch, with the same dropout masks and noise: the per-document pass is the batch pass, row by row."""
    config = ProdLDAConfig(n_topics=4, hidden_sizes=(8, 6), normalization=normalization, dropout=dropout)
    model = ProdLDA.create(V, config, 3)
    model.train()
    expected = _batch_gradient(model, _bow().to_sparse_csr(), 1)
    total, n, clipped = clipped_gradient_sum(
        model, _bow().to_sparse_csr(), torch.Generator().manual_seed(1), _names(model), 1e9
    )
    assert (n, clipped) == (N, 0)
    for name, grad in expected.items():
        torch.testing.assert_close(total[name] / n, grad, rtol=1e-4, atol=1e-6)
    assert expected["hidden.0.weight"].abs().max() > 0


def test_combinedtm_per_document_gradients_add_up_to_the_batch_gradient() -> None:
    config = CombinedTMConfig(n_topics=3, hidden_sizes=(8,), normalization="layer", embedding_size=5)
    model = ContextualProdLDA.create(V, config, 2)
    model.train()
    embeddings = torch.randn(N, 5, generator=torch.Generator().manual_seed(4))
    batch = ContextualBatch(_bow().to_sparse_csr(), embeddings)
    expected = _batch_gradient(model, batch, 9)
    total, n, _ = clipped_gradient_sum(model, batch, torch.Generator().manual_seed(9), _names(model), 1e9)
    for name, grad in expected.items():
        torch.testing.assert_close(total[name] / n, grad, rtol=1e-4, atol=1e-6)
    assert expected["adapt_bert.weight"].abs().max() > 0


def test_one_document_moves_the_clipped_sum_by_at_most_twice_the_bound() -> None:
    """The DP-SGD sensitivity: every document's contribution has norm <= C, so replacing one
    document (here by a 1000x copy of another) moves the sum by at most 2C, whatever it holds."""
    model = ProdLDA.create(V, ProdLDAConfig(n_topics=4, hidden_sizes=(8,), normalization="layer"), 0)
    bound = 0.05
    bow = _bow()
    poisoned = bow.clone()
    poisoned[7] = 1000 * bow[3]
    names = _names(model)
    first, _, clipped = clipped_gradient_sum(model, bow, torch.Generator().manual_seed(2), names, bound)
    second, _, _ = clipped_gradient_sum(model, poisoned, torch.Generator().manual_seed(2), names, bound)
    assert clipped == N  # the bound is below every document's gradient norm here
    assert flat_norm(first) <= N * bound * (1 + 1e-5)
    moved = flat_norm({k: second[k] - first[k] for k in first})
    assert 0 < moved <= 2 * bound * (1 + 1e-5)


def test_the_noise_has_std_sigma_c_over_n_and_is_seeded() -> None:
    model = ProdLDA.create(V, ProdLDAConfig(n_topics=4, hidden_sizes=(8,), normalization="layer"), 0)
    names, bow = _names(model), _bow()

    def run(std: float, who: str) -> dict[str, torch.Tensor]:
        grads, n, _ = private_gradient(
            model, [(bow, torch.Generator().manual_seed(5))], names, 0.5, std, noise_generator(1, who, 0)
        )
        assert n == N
        return grads

    clean, noisy = run(0.0, "a"), run(3.0, "a")
    assert all(torch.equal(noisy[k], run(3.0, "a")[k]) for k in noisy)
    assert any(not torch.equal(noisy[k], run(3.0, "b")[k]) for k in noisy)
    residual = torch.cat([(noisy[k] - clean[k]).reshape(-1) for k in noisy])
    assert float(residual.std()) == pytest.approx(3.0 / N, rel=0.05)


def test_a_sample_level_federation_without_noise_is_the_plain_run_and_records_document_epsilon() -> None:
    """Sigma 0 and a bound nobody reaches: each organisation's DP-SGD gradient is its batch gradient
    (float rounding apart), so the federation trains the plain model; with noise it moves, is seeded,
    and records the epsilon of one document of the smallest organisation (sampling 8 of 16)."""
    plain = _run(_config())
    off = _run(_config({"dp": {"level": "sample", "clip": 1e9, "noise_multiplier": 0.0}}))
    for name, value in plain.model.state.items():
        torch.testing.assert_close(off.model.state[name], value, rtol=1e-4, atol=1e-5)
    assert all(math.isnan(r.loss) for r in off.model.history)
    privacy = {"dp": {"level": "sample", "clip": 0.5, "noise_multiplier": 1.0}}
    first, second = _run(_config(privacy), sizes=(16, 24, 32)), _run(_config(privacy), sizes=(16, 24, 32))
    for name, value in first.model.state.items():
        assert torch.equal(value, second.model.state[name]), name
    assert any(not torch.allclose(v, plain.model.state[k], atol=1e-3) for k, v in first.model.state.items())
    last = first.model.history[-1].metrics
    spent = gaussian_privacy(1.0, 6, 1e-5, 1.0, 8 / 16)
    assert last["epsilon_rdp"] == pytest.approx(spent.epsilon_rdp)
    assert last["sigma"] == 1.0


def test_sample_level_takes_a_robust_rule_but_not_local_epochs_server_noise_or_batchnorm() -> None:
    sample = {"level": "sample", "noise_multiplier": 1.0}
    layer = {"model": {"normalization": "layer"}}
    _check({"train": layer, "privacy": {"dp": sample, "robust_rule": "median"}})  # post-processing of private updates
    with pytest.raises(ConfigError, match="calibrated to the mean"):
        _check({"train": layer, "privacy": {"dp": {**sample, "level": "client"}, "robust_rule": "median"}})
    with pytest.raises(ConfigError, match="DP-SGD is built here for one noisy step per round"):
        _check({"train": {**layer, "aggregation": {"rule": "fedavg"}}, "privacy": {"dp": sample}})
    with pytest.raises(ConfigError, match="never sees a single document's gradient"):
        _check({"train": layer, "privacy": {"dp": {**sample, "noise_at": "server"}}})
    with pytest.raises(ConfigError, match="BatchNorm"):
        _check({"train": {"model": {"normalization": "batch"}}, "privacy": {"dp": sample}})
    with pytest.raises(ConfigError, match="held-out documents without noise"):
        _check({"train": {**layer, "validation_fraction": 0.25}, "privacy": {"dp": sample}})
    with pytest.raises(ConfigError, match="word2vec"):
        _check({"train": {}, "word2vec": {}, "privacy": {"dp": sample}}, ["word2vec"])


def test_a_client_asked_for_sample_level_dp_on_local_epochs_refuses_naming_itself() -> None:
    """The configuration refuses it first; a server that asks anyway gets the client's reason, not a plain step."""
    from fedtopic_pipelines.core.families import get_family
    from fedtopic_pipelines.core.federated.client import FamilyClient
    from fedtopic_pipelines.core.federated.messages import Instruction
    from fedtopic_pipelines.core.privacy.defences import DP_LEVEL_KEY, NOISE_KEYS

    config = _config()
    family = get_family("prodlda")
    model = family.create_model(V, config, torch.device("cpu"))
    client = FamilyClient(
        "alpha", family, model, family.stream(sp.csr_matrix(_bow().numpy()), config, 0, torch.device("cpu"))
    )
    keys = {**dict(zip(NOISE_KEYS, (1.0, 1.0, 0), strict=True)), DP_LEVEL_KEY: "sample", "action": "weights"}
    with pytest.raises(ValueError, match="client 'alpha': sample-level DP .* not for 'weights' of prodlda"):
        client.handle(Instruction(0, dict(model.state_dict()), keys))
