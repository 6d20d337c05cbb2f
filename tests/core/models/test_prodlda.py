import pytest
import torch
from torch.distributions import Normal, kl_divergence

from fedtopic_pipelines.core.config import ProdLDAConfig
from fedtopic_pipelines.core.models.prodlda import BagOfWordsLinear, ProdLDA, bag_linear

V, K = 40, 4


def _model() -> ProdLDA:
    return ProdLDA.create(V, ProdLDAConfig(n_topics=K, hidden_sizes=(16, 16)), seed=3)


def _bow(n: int = 8) -> torch.Tensor:
    return torch.poisson(torch.full((n, V), 0.5), generator=torch.Generator().manual_seed(0))


def test_kl_matches_torch_distributions() -> None:
    model = _model()
    mu, log_var = torch.randn(5, K), torch.randn(5, K)
    expected = kl_divergence(
        Normal(mu, (0.5 * log_var).exp()), Normal(model.prior_mean, model.prior_variance.sqrt())
    ).sum(1)
    torch.testing.assert_close(model._kl(mu, log_var), expected)


def test_loss_is_mean_of_kl_plus_reconstruction() -> None:
    model = _model().train()
    out = model.loss_on_batch(_bow(), torch.Generator().manual_seed(1))
    torch.testing.assert_close(out.loss.detach(), out.kl + out.reconstruction)
    assert out.kl > 0 and out.reconstruction > 0 and out.n == 8


def test_noise_comes_only_from_the_generator() -> None:
    model = _model().train()
    a = model.loss_on_batch(_bow(), torch.Generator().manual_seed(1)).loss
    b = model.loss_on_batch(_bow(), torch.Generator().manual_seed(1)).loss
    c = model.loss_on_batch(_bow(), torch.Generator().manual_seed(2)).loss
    assert a == b and a != c


def test_same_seed_same_initial_weights() -> None:
    a, b = _model().state_dict(), _model().state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_batch_statistics_are_returned_not_applied() -> None:
    model = _model().train()
    before = model.mu_bn.running_mean.clone()
    stats = model.loss_on_batch(_bow(), torch.Generator().manual_seed(1)).statistics
    assert torch.equal(model.mu_bn.running_mean, before)
    assert set(stats) == set(model.statistics_shapes())
    model.apply_statistics(stats)
    torch.testing.assert_close(model.mu_bn.running_mean, 0.9 * before + 0.1 * stats["mu_bn.mean"])


def test_prior_mean_gradient_carries_no_data() -> None:
    """Why the prior mean is fixed: under affine-free BN its gradient is prior_mean / prior_var."""
    model = _model().train()
    model.prior_mean = torch.full((K,), 0.3, requires_grad=True)
    model.loss_on_batch(_bow(), torch.Generator().manual_seed(1)).loss.backward()
    torch.testing.assert_close(model.prior_mean.grad, 0.3 / model.prior_variance.detach(), rtol=1e-4, atol=1e-5)


def test_inference_is_deterministic_and_normalised() -> None:
    model = _model()
    theta = model.doc_topic(_bow())
    torch.testing.assert_close(theta.sum(1), torch.ones(8))
    assert torch.equal(theta, model.doc_topic(_bow()))
    torch.testing.assert_close(model.topic_word().sum(1), torch.ones(K))


def test_a_sparse_batch_gives_the_dense_batch_loss_and_gradients() -> None:
    """The batch sources give sparse CSR batches; the input layer and the reconstruction term
    skip the zeros but compute the same function (float64: to rounding)."""
    dense = _bow(16).double()
    results = []
    for bow in (dense, dense.to_sparse_csr()):
        model = _model().double().train()
        out = model.loss_on_batch(bow, torch.Generator().manual_seed(1))
        out.loss.backward()
        results.append((out, {k: p.grad for k, p in model.named_parameters()}))
    (a, grads_a), (b, grads_b) = results
    torch.testing.assert_close(a.loss, b.loss, rtol=1e-12, atol=1e-12)
    assert all(torch.allclose(a.statistics[k], b.statistics[k], rtol=1e-12, atol=1e-12) for k in a.statistics)
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], rtol=1e-10, atol=1e-12)
    assert grads_a["hidden.0.weight"].abs().max() > 0  # the input layer did receive a gradient


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_sparse_reconstruction_term_is_the_log_softmax_one_with_its_gradient(dtype: torch.dtype) -> None:
    """N lse(logits) - sum_w n_w logits_w, read and written at the batch's entries only, is the
    dense -sum_w n_w log_softmax(logits)_w, its gradient too; an empty document costs nothing."""
    from fedtopic_pipelines.core.models.prodlda import _reconstruction

    bow = _bow(6).to(dtype)
    bow[2] = 0
    logits = torch.randn(6, V, dtype=dtype, generator=torch.Generator().manual_seed(2)) * 3
    weights = torch.randn(6, dtype=dtype, generator=torch.Generator().manual_seed(3))
    results = []
    for batch in (bow, bow.to_sparse_csr()):
        leaf = logits.clone().requires_grad_()
        term = _reconstruction(batch, leaf)
        (grad,) = torch.autograd.grad(term, leaf, weights)
        results.append((term, grad))
    (dense, dense_grad), (sparse, sparse_grad) = results
    tolerance = {"rtol": 1e-5, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    torch.testing.assert_close(sparse, dense, **tolerance)
    torch.testing.assert_close(sparse_grad, dense_grad, **tolerance)
    assert sparse[2] == 0 and not sparse_grad[2].any()
    if dtype == torch.float64:
        csr = bow.to_sparse_csr()
        assert torch.autograd.gradcheck(lambda x: _reconstruction(csr, x), (logits.clone().requires_grad_(),))


def test_the_first_layer_draws_the_weights_of_nn_linear_stored_one_row_per_word() -> None:
    """The same seed gives the function the encoder had as an ``nn.Linear``: models and figures
    of earlier runs are reproduced; only the stored layout is transposed."""
    torch.manual_seed(5)
    reference = torch.nn.Linear(V, 16)
    torch.manual_seed(5)
    layer = BagOfWordsLinear(V, 16)
    assert layer.weight.shape == (V, 16) and layer.weight.is_contiguous()
    assert torch.equal(layer.weight, reference.weight.t()) and torch.equal(layer.bias, reference.bias)
    bow = _bow(6)
    torch.testing.assert_close(layer(bow.to_sparse_csr()), reference(bow), rtol=1e-5, atol=1e-5)


def test_a_model_saved_with_the_first_layer_as_nn_linear_still_loads() -> None:
    model = _model()
    state = model.state_dict()
    state["hidden.0.weight"] = state["hidden.0.weight"].t().contiguous()  # the former (out x in) layout
    restored = ProdLDA.create(V, ProdLDAConfig(n_topics=K, hidden_sizes=(16, 16)), seed=4)
    restored.load_state_dict(state)
    assert torch.equal(restored.hidden[0].weight, model.hidden[0].weight)


def test_the_sparse_first_layer_has_the_dense_gradient_in_float32() -> None:
    """The compiled CPU path against autograd's dense product, value and table gradient."""
    bow = _bow(9)
    bow[4] = 0.0  # an empty document
    table = torch.randn(V, 7, generator=torch.Generator().manual_seed(2))
    grads = []
    for batch in (bow, bow.to_sparse_csr()):
        leaf = table.clone().requires_grad_()
        out = bag_linear(batch, leaf, None)
        (out * torch.arange(7.0)).sum().backward()
        grads.append((out.detach(), leaf.grad))
    (dense_out, dense_grad), (sparse_out, sparse_grad) = grads
    torch.testing.assert_close(sparse_out, dense_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sparse_grad, dense_grad, rtol=1e-5, atol=1e-5)
    assert sparse_grad.abs().max() > 0


def _encode_decode(model: ProdLDA, bow: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Training-mode posterior mean and word distribution (dropout 0, so no randomness)."""
    mu, _ = model.encode(bow, None, {})
    return mu, model.decode(torch.softmax(mu, dim=1), {})


@pytest.mark.parametrize("normalization", ["layer", "none"])
def test_batch_independent_normalisation_has_no_batch_coupling(normalization: str) -> None:
    """Each document's training-mode output is the same alone, in its batch or in another batch,
    so any grouping of documents into client batches computes the same function."""
    config = ProdLDAConfig(n_topics=K, hidden_sizes=(16, 16), dropout=0.0, normalization=normalization)
    model = ProdLDA.create(V, config, seed=3).train()
    bow = _bow(8)
    mu, words = _encode_decode(model, bow)
    for rows in ([0, 1, 2], [5], [7, 3]):
        part_mu, part_words = _encode_decode(model, bow[rows])
        torch.testing.assert_close(part_mu, mu[rows])
        torch.testing.assert_close(part_words, words[rows])
    assert model.statistics_shapes() == {} and dict(model.named_buffers()).keys() == {"prior_mean"}
    out = model.loss_on_batch(bow[:1], torch.Generator().manual_seed(1))  # one document is a batch
    assert out.statistics == {} and out.n == 1


def test_batch_norm_couples_the_documents_of_a_batch() -> None:
    """The property above is not vacuous: under BatchNorm a document's output depends on its batch."""
    model = ProdLDA.create(V, ProdLDAConfig(n_topics=K, hidden_sizes=(16, 16), dropout=0.0), seed=3).train()
    bow = _bow(8)
    mu, _ = _encode_decode(model, bow)
    part_mu, _ = _encode_decode(model, bow[[0, 1, 2]])
    assert not torch.allclose(part_mu, mu[[0, 1, 2]], atol=1e-3)


def test_word_bias_starts_at_the_background_and_is_added_to_the_logits() -> None:
    counts = torch.tensor([50.0, 30.0, 15.0, 5.0, 0.0])  # a term with no count is clamped to 1, not log(0)
    model = ProdLDA.create(5, ProdLDAConfig(n_topics=2, hidden_sizes=(4,), normalization="layer", word_bias=True), 0)
    model.set_background(counts.numpy())
    expected = torch.log(counts.clamp(min=1) / counts.clamp(min=1).sum())
    assert torch.allclose(model.word_bias.detach(), expected)
    with torch.no_grad():
        model.beta.zero_()  # no topic signal: each document's word distribution is the background
    words = model.decode(torch.full((3, 2), 0.5), None)
    assert torch.allclose(words, (counts.clamp(min=1) / counts.clamp(min=1).sum()).expand(3, -1), atol=1e-6)


def test_without_word_bias_the_background_is_ignored() -> None:
    model = ProdLDA.create(5, ProdLDAConfig(n_topics=2, hidden_sizes=(4,), normalization="layer"), 0)
    model.set_background(torch.ones(5).numpy())
    assert model.word_bias is None and "word_bias" not in model.state_dict()


@pytest.mark.parametrize("decoder", ["centred", "standardised", "standardised+layer"])
def test_topic_normalised_decoder_ignores_a_background_in_beta(decoder: str) -> None:
    """Under ``centred`` / ``standardised`` a constant added to a word's weight in every topic
    changes neither the documents' word distributions nor the topics: a word's background cannot
    live in beta (under ``layer`` it does, which is what lowers topic diversity)."""

    def outputs(kind: str, shift: float) -> tuple[torch.Tensor, torch.Tensor]:
        config = ProdLDAConfig(n_topics=K, hidden_sizes=(16,), normalization="layer", decoder_normalization=kind)
        model = ProdLDA.create(V, config, seed=3).eval()
        with torch.no_grad():
            model.beta += shift * torch.linspace(-3.0, 3.0, V)  # one offset per word, the same in every topic
        return model.decode(
            torch.softmax(torch.randn(4, K, generator=torch.Generator().manual_seed(0)), 1), None
        ), model.topic_word()

    for before, after in zip(outputs(decoder, 0.0), outputs(decoder, 1.0), strict=True):
        torch.testing.assert_close(before, after)
    layer_before, layer_after = outputs("layer", 0.0), outputs("layer", 1.0)
    assert not torch.allclose(layer_before[1], layer_after[1], atol=1e-3)  # not vacuous


@pytest.mark.parametrize("decoder", ["centred", "standardised", "centred+layer", "standardised+layer"])
def test_topic_normalised_decoder_has_no_batch_coupling(decoder: str) -> None:
    config = ProdLDAConfig(
        n_topics=K, hidden_sizes=(16, 16), dropout=0.0, normalization="layer", decoder_normalization=decoder
    )
    model = ProdLDA.create(V, config, seed=3).train()
    bow = _bow(8)
    _, words = _encode_decode(model, bow)
    for rows in ([0, 1, 2], [5]):
        torch.testing.assert_close(_encode_decode(model, bow[rows])[1], words[rows])
    assert not config.batch_coupled() and model.statistics_shapes() == {}


def test_batch_norm_on_the_decoder_only() -> None:
    """``decoder_normalization: batch`` with a LayerNorm encoder: only the decoder keeps (and
    returns) batch statistics, the encoder keeps its biases, and the model is batch-coupled."""
    config = ProdLDAConfig(n_topics=K, hidden_sizes=(16,), normalization="layer", decoder_normalization="batch")
    model = ProdLDA.create(V, config, seed=3)
    assert config.batch_coupled()
    assert set(model.statistics_shapes()) == {"beta_bn.mean", "beta_bn.var"}
    assert model.f_mu.bias is not None
    out = model.train().loss_on_batch(_bow(8), torch.Generator().manual_seed(1))
    assert set(out.statistics) == {"beta_bn.mean", "beta_bn.var"}
    with pytest.raises(ValueError, match="at least 2 documents"):
        model.loss_on_batch(_bow(1), torch.Generator().manual_seed(1))
