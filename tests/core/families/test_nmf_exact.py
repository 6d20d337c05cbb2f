"""FedNMF exact through the engine equals scikit-learn's coordinate-descent NMF on the pooled documents.

The federation runs in process (one endpoint per organisation, the server's rounds, the
validation of every update); scikit-learn's ``NMF(solver="cd", init="custom")`` starts from
the same W (the organisations' own draws, stacked) and H (the server's). Same iterations,
same factors to rounding, same reconstruction error.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from sklearn.decomposition import NMF

from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.families import get_family
from fedtopic_pipelines.core.federated.messages import Update, UpdateKind
from fedtopic_pipelines.core.models.nmf_exact import cd_sweep, cd_sweep_numpy, solve_weights
from fedtopic_pipelines.core.seeds import derive_seed
from tests.core.families import federate, vocabulary_of

CPU = torch.device("cpu")
VOCAB = 80


def _config(**model) -> TrainConfig:
    return TrainConfig.from_params(
        {
            "model": {"family": "nmf_exact", "n_topics": 6, **model},
            "max_steps": 1000,
            "tolerance": 1e-5,
            "seed": 3,
            "device": "cpu",
            "scenarios": ["federated"],
        }
    )


def _data() -> dict[str, sp.csr_matrix]:
    """Three organisations' counts (1 to 5, density 0.1) over 80 words: 30, 45 and 45 documents."""
    rng = np.random.default_rng(0)
    out = {}
    for org, n in zip("abc", (30, 45, 45), strict=True):
        mask = rng.random((n, VOCAB)) < 0.1
        out[org] = sp.csr_matrix(np.where(mask, rng.integers(1, 6, (n, VOCAB)), 0).astype(np.float32))
    return out


def _initial(config: TrainConfig, data: dict[str, sp.csr_matrix]) -> tuple[np.ndarray, np.ndarray]:
    """The federation's initial W (each organisation's draw, in order) and H (the server's)."""
    family = get_family("nmf_exact")
    server = family.create_model(VOCAB, config, CPU)
    family.prepare_server_model(server, vocabulary_of(data), {o: m.shape[0] for o, m in data.items()}, config)
    ws = []
    for stream, matrix in enumerate(data.values()):
        model = family.create_model(VOCAB, config, CPU)
        family.init_local(model, matrix, config, derive_seed(config.seed, 6000, stream))
        ws.append(model.doc_weights.detach().numpy().copy())
    return np.vstack(ws), server.ht.detach().numpy().T.copy()


@pytest.mark.parametrize(
    "model",
    [{}, {"alpha_w": 0.01, "l1_ratio": 0.5}, {"alpha_w": 0.02, "alpha_h": 0.005, "l1_ratio": 0.3}],
    ids=["plain", "l1_l2_same", "l1_l2_apart"],
)
def test_the_federation_equals_scikit_learn_cd_on_the_pooled_documents(model) -> None:
    config = _config(**model)
    data = _data()
    result = federate(config, data)
    w0, h0 = _initial(config, data)
    pooled = sp.vstack(list(data.values())).tocsr().astype(np.float64)
    reference = NMF(
        6,
        init="custom",
        solver="cd",
        tol=1e-5,
        max_iter=1000,
        alpha_W=model.get("alpha_w", 0.0),
        alpha_H=model.get("alpha_h", "same"),
        l1_ratio=model.get("l1_ratio", 0.0),
    )
    reference.fit_transform(pooled, W=w0.copy(), H=h0.copy())
    trained = result.model.to_model()
    h = trained.ht.detach().numpy().T
    history = result.model.history
    assert reference.n_iter_ < 1000  # both stopped by the tolerance, not the cap
    assert len(history) == reference.n_iter_
    assert np.abs(h - reference.components_).max() <= 1e-9 * np.abs(reference.components_).max()
    error = history[-1].metrics["reconstruction_error"]
    assert error == pytest.approx(reference.reconstruction_err_, rel=1e-9)


def test_an_organisation_keeps_scikit_learn_rows_and_sends_only_its_sums() -> None:
    """Given H, an organisation's swept rows are scikit-learn's W rows bit for bit, and what it sends
    is exactly its own W_o^T W_o, X_o^T W_o, violation and ||X_o||^2."""
    config = _config()
    family = get_family("nmf_exact")
    data = _data()
    model = family.create_model(VOCAB, config, CPU)
    family.init_local(model, data["b"], config, 17)
    w_before = model.doc_weights.detach().numpy().copy()
    step = family.local_update(model, data["b"], config, 0)
    x = data["b"].astype(np.float64).tocsr()
    ht = model.ht.detach().numpy()
    w = w_before.copy()
    cd_sweep(w, ht.T @ ht, np.asarray(x @ ht))
    assert np.array_equal(model.doc_weights.detach().numpy(), w)
    assert set(step.tensors) == {"gram", "cross", "violation", "squared_norm"}
    assert np.array_equal(step.tensors["gram"].numpy(), w.T @ w)
    assert np.allclose(step.tensors["cross"].numpy(), np.asarray(x.T @ w), rtol=1e-13, atol=0)
    assert float(step.tensors["squared_norm"]) == pytest.approx(float(x.multiply(x).sum()))
    assert step.num_examples == 45


def test_the_numpy_sweep_is_the_compiled_one() -> None:
    rng = np.random.default_rng(1)
    hht = rng.random((5, 5))
    hht = hht @ hht.T + np.eye(5)
    xht = rng.random((20, 5))
    w1 = rng.random((20, 5))
    w2 = w1.copy()
    v1 = cd_sweep(w1, hht, xht)
    v2 = cd_sweep_numpy(w2, hht, xht, np.arange(5))
    assert v1 == pytest.approx(v2, rel=1e-12)
    assert np.allclose(w1, w2, rtol=1e-12, atol=1e-14)


def test_transform_is_scikit_learns() -> None:
    data = _data()
    pooled = sp.vstack(list(data.values())).tocsr().astype(np.float64)
    reference = NMF(6, init="random", solver="cd", random_state=0, max_iter=400, tol=1e-5, alpha_W=0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference.fit(pooled)
    from fedtopic_pipelines.core.models.nmf_exact import Penalties

    penalties = Penalties.scaled(0, VOCAB, 0.01, None, 0.0)
    ours = solve_weights(pooled[:20], np.ascontiguousarray(reference.components_.T), penalties, 400, 1e-5)
    assert np.allclose(ours, reference.transform(pooled[:20]), rtol=1e-10, atol=1e-12)


def test_client_sampling_and_an_averaging_rule_are_refused_when_the_parameters_are_read() -> None:
    with pytest.raises(ValueError, match="client_fraction.*set it to 1.0"):
        TrainConfig.from_params({"model": {"family": "nmf_exact"}, "aggregation": {"client_fraction": 0.5}})
    with pytest.raises(ValueError, match="no averaging rule applies"):
        TrainConfig.from_params({"model": {"family": "nmf_exact"}, "aggregation": {"rule": "fedavg"}})


def test_a_negative_statistic_is_rejected() -> None:
    config = _config()
    family = get_family("nmf_exact")
    model = family.create_model(VOCAB, config, CPU)
    strategy = family.strategy(model, config)
    k = 6
    good = {
        "gram": torch.ones(k, k, dtype=torch.float64),
        "cross": torch.ones(VOCAB, k, dtype=torch.float64),
        "violation": torch.ones(1, dtype=torch.float64),
        "squared_norm": torch.ones(1, dtype=torch.float64),
    }
    strategy.validate(Update("a", UpdateKind.STATISTICS, good, 3, metrics={"loss": 1.0}, round=0), 3)
    bad = {**good, "cross": -good["cross"]}
    from fedtopic_pipelines.core.federated.aggregation import UpdateRejected

    with pytest.raises(UpdateRejected, match="'cross' has negative entries"):
        strategy.validate(Update("a", UpdateKind.STATISTICS, bad, 3, round=0), 3)


@pytest.mark.parametrize(
    ("matrix", "message"),
    [
        (sp.csr_matrix((0, VOCAB), dtype=np.float32), "no training document"),
        (sp.csr_matrix(np.array([[1.0, -2.0] + [0.0] * (VOCAB - 2)], dtype=np.float32)), "negative or non-finite"),
        (sp.csr_matrix(np.array([[1.0, np.nan] + [0.0] * (VOCAB - 2)], dtype=np.float32)), "negative or non-finite"),
    ],
    ids=["empty", "negative", "nan"],
)
def test_an_organisation_nmf_cannot_factorise_is_named(matrix, message) -> None:
    with pytest.raises(ValueError, match=f"organisation 'b'.*{message}"):
        get_family("nmf_exact").validate_data("b", matrix, _config())


def test_the_sweep_refuses_fedexact_under_dp_before_the_first_model() -> None:
    from fedtopic_pipelines.experiments.config import FedNMFRunConfig
    from fedtopic_pipelines.experiments.fednmf import check_methods
    from fedtopic_pipelines.parameters import with_privacy

    run = FedNMFRunConfig.model_validate(
        {"methods": ["nmf", "fedexact"], "topics": [5], "evaluate": {"curve_topics": 5}}
    )
    dp = {"dp": {"level": "client", "noise_multiplier": 1.0, "clip": 1.0}}
    run = run.replace(train=with_privacy(run.train, dp, "fednmf.train"))
    with pytest.raises(ValueError, match="'fednmf.methods' has 'fedexact'.*privacy.dp"):
        check_methods(run)
