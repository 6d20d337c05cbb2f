"""Federated FedSGD == centralized training on the concatenated mini-batches (gFedNTM sec. 4.1).

Dropout masks and reparameterisation noise are on: each organisation's batch sampling and
noise come from its own seeded source, which the centralized trainer uses for the matching
ghost batch. The centralized side backpropagates once through the concatenated batch's mean
loss; the federated side averages three separately computed client gradients (eq. 2).

Both sides are also compared with an independent reference: a plain PyTorch loop (one
backward pass, ``torch.optim.Adam``, BatchNorm running statistics updated by hand), so a
bug shared by the engine's two paths (strategy, server, statistics) would still show.

The model uses the CTM defaults (hidden (100, 100), dropout 0.2, Adam lr 2e-3). float32 is
the issue's check (<= 1e-5); float64 shows the two computations are mathematically the same
(the float32 gap is rounding, which Adam can amplify where a gradient is near its eps:
docs/batchnorm.md gives the numbers measured on smaller networks).
"""

import pytest
import torch

from fedtopic_pipelines.core.config import OptimizerConfig, ProdLDAConfig, TrainConfig
from fedtopic_pipelines.core.families import get_family
from fedtopic_pipelines.core.federated.batching import BatchSource
from fedtopic_pipelines.core.federated.client import FamilyClient
from fedtopic_pipelines.core.federated.engine import InProcessEngine
from fedtopic_pipelines.core.federated.server import FederatedServer, StoppingRule
from fedtopic_pipelines.core.models.prodlda import Draws, ProdLDA
from fedtopic_pipelines.core.seeds import derive_seed
from tests.conftest import poisson_matrices
from tests.core.federated.test_family_contract import ConcatenatedStreams

V, STEPS, BATCH = 300, 20, 16
CONFIG = ProdLDAConfig(n_topics=5, hidden_sizes=(100, 100), dropout=0.2)
LAYER = CONFIG.replace(normalization="layer")  # batch-independent normalisation (docs/batchnorm.md)
FAMILY = get_family("prodlda")


def _train(
    federated: bool, dtype: torch.dtype, optimizer: OptimizerConfig, model_config: ProdLDAConfig = CONFIG
) -> tuple[dict[str, torch.Tensor], list]:
    matrices = poisson_matrices((50, 37, 80), V)  # unequal sizes: partial batches and uneven weights
    config = TrainConfig(model=model_config, optimizer=optimizer, batch_size=BATCH, seed=11, device="cpu")

    def model() -> ProdLDA:
        return ProdLDA.create(V, model_config, seed=11).to(dtype)

    def sources() -> list[BatchSource]:
        return [BatchSource(m, BATCH, derive_seed(7, i), torch.device("cpu")) for i, m in enumerate(matrices)]

    if federated:
        clients = [FamilyClient(f"org{i}", FAMILY, model(), s) for i, s in enumerate(sources())]
    else:
        clients = [FamilyClient("server", FAMILY, model(), ConcatenatedStreams(sources()))]
    global_model = model()
    server = FederatedServer(FAMILY.strategy(global_model, config), StoppingRule(STEPS))
    history = server.run(InProcessEngine(clients), progress=False)
    return global_model.state_dict(), history


@pytest.mark.parametrize(
    ("dtype", "optimizer", "tolerance", "model_config"),
    [
        (torch.float32, OptimizerConfig(), 1e-5, CONFIG),
        (torch.float64, OptimizerConfig(), 1e-10, CONFIG),
        (torch.float64, OptimizerConfig(name="sgd", lr=0.01), 1e-10, CONFIG),
        # float32 rounding that Adam amplifies where a first-layer gradient is near its eps
        # (docs/batchnorm.md): 1.4e-5 measured with torch's operations, 5.7e-5 with the compiled
        # encoder tail (core/models/fused.py: other products, other rounding; every other
        # parameter within 6e-7), and float64 below agrees to 1e-10
        (torch.float32, OptimizerConfig(), 1e-4, LAYER),
        (torch.float64, OptimizerConfig(), 1e-10, LAYER),
    ],
    ids=["adam-float32", "adam-float64", "sgd-eq3-float64", "layernorm-adam-float32", "layernorm-adam-float64"],
)
def test_federated_equals_centralized(
    dtype: torch.dtype, optimizer: OptimizerConfig, tolerance: float, model_config: ProdLDAConfig
) -> None:
    fed, fed_history = _train(True, dtype, optimizer, model_config)
    cen, cen_history = _train(False, dtype, optimizer, model_config)
    assert len(fed_history) == len(cen_history) == STEPS
    worst = max((fed[k] - cen[k]).abs().max().item() for k in fed)
    assert worst <= tolerance, worst
    # the weights did move, so the comparison is not trivially true
    start = ProdLDA.create(V, model_config, seed=11).state_dict()
    assert (fed["beta"] - start["beta"].to(dtype)).abs().max().item() > 1e-3
    assert fed_history[-1].loss == pytest.approx(cen_history[-1].loss, rel=1e-5)


def _reference(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Centralized training written without the engine: the textbook loop."""
    matrices = poisson_matrices((50, 37, 80), V)
    sources = [BatchSource(m, BATCH, derive_seed(7, i), torch.device("cpu")) for i, m in enumerate(matrices)]
    model = ProdLDA.create(V, CONFIG, seed=11).to(dtype).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.99, 0.999))
    for _ in range(STEPS):
        parts = [model.loss_on_batch(s.next_batch(), s.noise) for s in sources]
        n = sum(p.n for p in parts)
        optimizer.zero_grad()
        sum(p.loss * p.n for p in parts).div(n).backward()
        optimizer.step()
        with torch.no_grad():
            for layer in ("mu_bn", "sigma_bn", "beta_bn"):
                bn = getattr(model, layer)
                mean = sum(p.statistics[f"{layer}.mean"] * p.n for p in parts) / n
                var = sum(p.statistics[f"{layer}.var"] * p.n for p in parts) / n
                bn.running_mean.copy_(0.9 * bn.running_mean + 0.1 * mean)
                bn.running_var.copy_(0.9 * bn.running_var + 0.1 * var)
    return model.state_dict()


def test_federated_equals_a_plain_pytorch_reference() -> None:
    fed, _ = _train(True, torch.float64, OptimizerConfig())
    ref = _reference(torch.float64)
    worst = max((fed[k] - ref[k]).abs().max().item() for k in fed)
    assert worst <= 1e-10, worst


def test_pooled_batchnorm_equals_batchnorm_over_every_organisations_batch() -> None:
    """``pooled_batch``: three organisations' exchanged sums and gradients give the step a plain
    PyTorch BatchNorm model takes on their concatenated batch (one backward pass, running
    statistics of the whole batch), float64, several SGD steps."""
    pooled = CONFIG.replace(normalization="pooled_batch")
    optimizer = OptimizerConfig(name="sgd", lr=0.05)
    matrices = poisson_matrices((50, 37, 80), V)
    config = TrainConfig(model=pooled, optimizer=optimizer, batch_size=BATCH, seed=11, device="cpu")

    def sources() -> list[BatchSource]:
        return [BatchSource(m, BATCH, derive_seed(7, i), torch.device("cpu")) for i, m in enumerate(matrices)]

    clients = [
        FamilyClient(f"org{i}", FAMILY, ProdLDA.create(V, pooled, seed=11).double(), s) for i, s in enumerate(sources())
    ]
    federated = ProdLDA.create(V, pooled, seed=11).double()
    server = FederatedServer(FAMILY.strategy(federated, config), StoppingRule(5))
    history = server.run(InProcessEngine(clients), progress=False)
    assert all(r.exchanges == 5 for r in history)  # 2 groups: 2 sums and 2 derivatives before the gradient

    reference = ProdLDA.create(V, CONFIG, seed=11).double()  # nn-style BatchNorm over what it is given
    reference.train()
    streams = sources()
    for _ in range(5):
        bows, draws = [], []
        for stream in streams:
            ((bow, noise),) = stream.next_batches()
            bows.append(bow.to_dense().double())
            draws.append(reference.draws(bows[-1].shape[0], noise))
        joined = Draws(*(torch.cat(parts) if parts[0] is not None else None for parts in zip(*draws, strict=True)))
        stats: dict[str, torch.Tensor] = {}
        rl, kl = reference(torch.cat(bows), joined, stats)
        reference.zero_grad()
        (rl + kl).mean().backward()
        with torch.no_grad():
            for p in reference.parameters():
                p -= optimizer.lr * p.grad
        reference.apply_statistics(stats)
    expected = reference.state_dict()
    worst = max(float((federated.state_dict()[k] - expected[k]).abs().max()) for k in expected)
    assert worst <= 1e-10, worst

    # one party holding the same streams (a trusted server) needs no exchange: one BatchNorm batch
    solo = ProdLDA.create(V, pooled, seed=11).double()
    holder = FamilyClient("server", FAMILY, ProdLDA.create(V, pooled, seed=11).double(), ConcatenatedStreams(sources()))
    solo_server = FederatedServer(FAMILY.strategy(solo, config), StoppingRule(5), capacity={"server": 10**6})
    assert all(r.exchanges == 1 for r in solo_server.run(InProcessEngine([holder]), progress=False))
    worst = max(float((solo.state_dict()[k] - expected[k]).abs().max()) for k in expected)
    assert worst <= 1e-10, worst
    moved = ProdLDA.create(V, CONFIG, seed=11).double().state_dict()
    assert max(float((expected[k] - moved[k]).abs().max()) for k in expected) > 1e-3
