"""The PC-TD family in the engine: exact without noise, the privacy it records, its bad input."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import torch

from fedtopic_pipelines.core.config import ConfigError, TrainConfig
from fedtopic_pipelines.core.families import get_family
from fedtopic_pipelines.core.families.pctd import noise_multiplier
from fedtopic_pipelines.core.families.word2vec import Sentences
from fedtopic_pipelines.core.federated.engine import FederationError, InProcessEngine
from fedtopic_pipelines.core.federated.messages import Update, UpdateKind
from fedtopic_pipelines.core.federation import run_federation
from fedtopic_pipelines.core.models.pctd import (
    PCTDModel,
    SemanticUnits,
    consistency_matrix,
    e_step,
    server_step,
)
from fedtopic_pipelines.core.privacy.accountant import gaussian_privacy
from fedtopic_pipelines.core.site import MemoryEndpoint
from fedtopic_pipelines.core.training import train_scenarios
from tests.core.federated.test_family_contract import word_sequences

V = 40


def _config(**model) -> TrainConfig:
    return TrainConfig.from_params(
        {
            "model": {"family": "pctd", "n_topics": 3, "consistency_vectors": "none", **model},
            "max_steps": 8,
            "seed": 5,
            "device": "cpu",
            "scenarios": ["federated", "centralized", "non_collaborative"],
        }
    )


def test_without_noise_federated_em_is_em_on_the_pooled_documents() -> None:
    data = word_sequences((30, 21, 45), V)
    config = _config(sigma=0.0)
    models = train_scenarios(data, config, progress=False)
    federated, centralized = models["federated"].state["phi"], models["centralized"].state["phi"]
    assert float((federated - centralized).abs().max()) < 1e-12
    # an independent reference: the model functions' EM loop on the pooled units
    pooled = np.concatenate([d.tokens for d in data.values()])
    lengths = np.concatenate([d.lengths for d in data.values()])
    units = SemanticUnits.from_sequences(pooled, np.concatenate([[0], np.cumsum(lengths)]), V, 3)
    phi = PCTDModel(V, 3, config.seed).phi.detach().numpy().copy()
    theta = np.full((units.n_docs, 3), 1 / 3)
    for _ in range(config.max_steps):
        step = e_step(units, phi, theta, 0.0, np.random.default_rng(0))
        theta, phi = step.doc_topic, server_step(step.statistics, None, 0.0, config.model.beta).topic_word
    assert np.abs(federated.numpy() - phi).max() < 1e-12
    assert np.abs(phi - PCTDModel(V, 3, config.seed).phi.numpy()).max() > 1e-3  # it did move
    # each party alone learns another model
    alone = models["local__a"].state["phi"]
    assert float((alone - federated).abs().max()) > 1e-3
    losses = [r.loss for r in models["federated"].history]
    assert all(b <= a + 1e-9 for a, b in itertools.pairwise(losses))  # EM never lowers the likelihood


def test_with_noise_no_loss_leaves_and_the_history_records_epsilon() -> None:
    data = word_sequences((30, 21, 45), V)
    model = train_scenarios(data, _config(sigma=0.5).replace(scenarios=("federated",)), progress=False)["federated"]
    assert all("loss" not in r.metrics and math.isnan(r.loss) for r in model.history)
    spent = gaussian_privacy(0.5, len(model.history), 1e-5)
    assert model.history[-1].metrics["epsilon_rdp"] == pytest.approx(spent.epsilon_rdp, rel=1e-9)
    epsilons = [r.metrics["epsilon_rdp"] for r in model.history]
    assert epsilons == sorted(epsilons) and epsilons[0] < epsilons[-1]
    assert sum(r.metrics["clipped"] for r in model.history) > 0  # the noise made totals negative: clipped
    phi = model.state["phi"]
    assert torch.allclose(phi.sum(dim=1), torch.ones(3, dtype=phi.dtype)) and bool((phi > 0).all())


def test_a_target_epsilon_chooses_the_noise_for_the_run_s_iterations() -> None:
    config = _config(target_epsilon=5.0)
    sigma = noise_multiplier(config)
    assert gaussian_privacy(sigma, config.max_steps, 1e-5).epsilon_rdp == pytest.approx(5.0, rel=1e-3)
    assert noise_multiplier(config.replace(max_steps=32)) > sigma  # more iterations need more noise
    assert noise_multiplier(_config()) == 0.25  # neither set: the paper's sigma


@pytest.mark.parametrize(
    ("model", "named"),
    [
        ({"sigma": -0.1}, "train.model.sigma"),
        ({"delta": 0.0}, "train.model.delta"),
        ({"delta": 1.0}, "train.model.delta"),
        ({"sigma": 0.5, "target_epsilon": 1.0}, "train.model.sigma"),
        ({"unit_length": 0}, "train.model.unit_length"),
        ({"beta": -1.0}, "train.model.beta"),
    ],
)
def test_bad_settings_name_the_parameter(model, named) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        _config(**model)


def test_an_averaging_rule_and_an_unreachable_target_are_refused_before_any_round() -> None:
    with pytest.raises(ConfigError, match="train.aggregation.rule"):
        TrainConfig.from_params({"model": {"family": "pctd"}, "max_steps": 3, "aggregation": {"rule": "fedavg"}})
    config = _config(target_epsilon=1e-4).replace(max_steps=10_000)
    data = word_sequences((30, 21), V)
    endpoints = [MemoryEndpoint(org, d) for org, d in data.items()]
    vocabulary = pd.DataFrame({"term": [f"w{j}" for j in range(V)]})
    with pytest.raises(ConfigError, match="target_epsilon"):
        run_federation(InProcessEngine(endpoints), list(data), config, vocabulary=vocabulary, progress=False)


def test_an_empty_party_is_an_error_naming_it() -> None:
    data = word_sequences((30, 21), V)
    frequencies = next(iter(data.values())).frequencies
    data["empty"] = Sentences(np.zeros(0, dtype=np.int64), np.zeros(3, dtype=np.int64), frequencies)
    endpoints = [MemoryEndpoint(org, d) for org, d in data.items()]
    vocabulary = pd.DataFrame({"term": [f"w{j}" for j in range(V)]})
    with pytest.raises(FederationError, match="organisation 'empty'.*no word of the common vocabulary"):
        run_federation(InProcessEngine(endpoints), list(data), _config(), vocabulary=vocabulary, progress=False)


def test_the_server_clips_negative_totals_and_rejects_a_wrong_shape() -> None:
    family = get_family("pctd")
    config = _config(sigma=1.0)
    model = family.create_model(V, config, torch.device("cpu"))
    strategy = family.strategy(model, config)
    totals = torch.from_numpy(np.random.default_rng(0).normal(0.0, 1.0, size=(3, V)))
    recorded = strategy.aggregate([Update("a", UpdateKind.STATISTICS, {"phi": totals}, 5)], measure=False)
    assert recorded["clipped"] == float((totals < 0).sum()) > 0
    phi = model.phi.detach()
    assert bool((phi > 0).all()) and torch.allclose(phi.sum(dim=1), torch.ones(3, dtype=phi.dtype))
    from fedtopic_pipelines.core.federated.aggregation import UpdateRejected

    with pytest.raises(UpdateRejected, match="phi"):
        strategy.validate(Update("a", UpdateKind.STATISTICS, {"phi": torch.zeros(3, V - 1)}, 5), capacity=5)


def test_the_consistency_matrix_reads_a_word2vec_file_and_follows_the_vocabulary_order(tmp_path) -> None:
    path = tmp_path / "vectors.txt"
    rows = {"cat": [1.0, 0.1], "dog": [0.9, 0.2], "car": [0.0, 1.0], "bus": [0.1, 0.95], "rare": [1.0, 0.12]}
    path.write_text("5 2\n" + "".join(f"{w} {a} {b}\n" for w, (a, b) in rows.items()))
    terms = ["car", "rare", "cat", "bus", "dog"]
    frequencies = np.array([50.0, 1.0, 40.0, 30.0, 20.0])
    config = _config(consistency_vectors=str(path), consistency_frequent=4, consistency_neighbours=1).model
    r = consistency_matrix(terms, frequencies, config).toarray()
    assert np.allclose(np.diag(r), 1.0) and np.allclose(r, r.T)
    index = {t: i for i, t in enumerate(terms)}
    assert r[index["cat"], index["dog"]] > 0.9 and r[index["car"], index["bus"]] > 0.9
    assert r[index["rare"]].sum() == 1.0  # outside the 4 most frequent words: linked to nothing
    with pytest.raises(ConfigError, match="train.model.consistency_vectors"):
        consistency_matrix(terms, frequencies, _config(consistency_vectors=str(tmp_path / "missing.txt")).model)
    # the same vectors in gensim's pickled format: read only with the block's opt-in
    from gensim.models import KeyedVectors

    pickled = tmp_path / "vectors.kv"
    KeyedVectors.load_word2vec_format(str(path)).save(str(pickled))
    with pytest.raises(ConfigError, match="'train.model.trust_pickle: true'"):
        _config(consistency_vectors=str(pickled))
    trusted = _config(
        consistency_vectors=str(pickled), trust_pickle=True, consistency_frequent=4, consistency_neighbours=1
    )
    assert np.allclose(consistency_matrix(terms, frequencies, trusted.model).toarray(), r)
