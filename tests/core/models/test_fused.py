"""The compiled encoder tail computes what the torch operations compute, gradients included."""

import pytest
import torch

from fedtopic_pipelines.core.config import ProdLDAConfig
from fedtopic_pipelines.core.models.prodlda import ProdLDA

V, K = 40, 5


def _bow(n: int = 12) -> torch.Tensor:
    bow = torch.poisson(torch.full((n, V), 0.4), generator=torch.Generator().manual_seed(0))
    bow[3] = 0.0  # an empty document
    return bow


def _step(config: ProdLDAConfig, bow: torch.Tensor, dtype: torch.dtype, training: bool = True) -> tuple:
    model = ProdLDA.create(V, config, seed=3).to(dtype).train(training)
    out = model.loss_on_batch(bow.to(dtype), torch.Generator().manual_seed(1))
    out.loss.backward()
    return out, {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.parametrize("activation", ["softplus", "relu"])
@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float64, 1e-11), (torch.float32, 2e-5)])
def test_the_compiled_tail_gives_the_torch_loss_and_every_gradient(
    activation: str, dtype: torch.dtype, tolerance: float
) -> None:
    """A sparse batch on the CPU takes the compiled tail, the same batch dense takes torch's
    operations (dropout, learned prior variance, LayerNorm on mu and log-variance)."""
    config = ProdLDAConfig(n_topics=K, hidden_sizes=(16, 12), normalization="layer", activation=activation)
    bow = _bow()
    assert ProdLDA.create(V, config, seed=3)._fused(bow.to_sparse_csr())
    assert not ProdLDA.create(V, config, seed=3)._fused(bow)
    (a, grads_a), (b, grads_b) = _step(config, bow, dtype), _step(config, bow.to_sparse_csr(), dtype)
    torch.testing.assert_close(a.loss, b.loss, rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(a.kl, b.kl, rtol=tolerance, atol=tolerance)
    assert set(grads_a) == set(grads_b)
    for name, grad in grads_a.items():
        scale = float(grad.abs().max())
        assert scale > 0, name  # every parameter, the prior variance included, gets a gradient
        torch.testing.assert_close(grad, grads_b[name], rtol=tolerance, atol=tolerance * scale, msg=name)


def test_the_compiled_tail_in_eval_mode_draws_no_dropout() -> None:
    """Validation passes (eval mode: no dropout masks) take the compiled tail as well."""
    config = ProdLDAConfig(n_topics=K, hidden_sizes=(16, 12), normalization="layer")
    bow = _bow().double()
    losses = []
    for batch in (bow, bow.to_sparse_csr()):
        model = ProdLDA.create(V, config, seed=3).double()
        losses.append(model.validation_loss(batch, torch.Generator().manual_seed(1)))
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "config",
    [
        ProdLDAConfig(n_topics=K, hidden_sizes=(16, 12), normalization="batch"),
        ProdLDAConfig(n_topics=K, hidden_sizes=(16, 12), normalization="none"),
        ProdLDAConfig(n_topics=K, hidden_sizes=(16,), normalization="layer"),
        ProdLDAConfig(n_topics=K, hidden_sizes=(16, 12, 8), normalization="layer"),
    ],
    ids=["batch", "none", "one-hidden-layer", "three-hidden-layers"],
)
def test_other_shapes_go_through_torch(config: ProdLDAConfig) -> None:
    assert not ProdLDA.create(V, config, seed=3)._fused(_bow().to_sparse_csr())
