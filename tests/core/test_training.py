import pytest
import torch

from fedtopic_pipelines.core.config import ConfigError, ProdLDAConfig, TrainConfig
from fedtopic_pipelines.core.training import hold_out, resolve_device, train_scenarios
from tests.conftest import poisson_matrices

CONFIG = TrainConfig(model=ProdLDAConfig(n_topics=3, hidden_sizes=(8,)), batch_size=8, max_steps=15, device="cpu")


def _matrices(sizes=(30, 21, 45)):
    return dict(zip(("a", "b", "c"), poisson_matrices(sizes, 40), strict=True))


def test_fixed_seed_gives_identical_models() -> None:
    first, second = (
        train_scenarios(_matrices(), CONFIG, progress=False),
        train_scenarios(_matrices(), CONFIG, progress=False),
    )
    assert set(first) == {"federated", "centralized", "local__a", "local__b", "local__c"}
    for name in first:
        assert all(torch.equal(first[name].state[k], second[name].state[k]) for k in first[name].state)


def test_same_number_of_steps_and_examples_seen() -> None:
    # sizes (and their sum) multiples of the batches: no partial batch at an epoch end on either side
    models = train_scenarios(_matrices((32, 24, 40)), CONFIG, progress=False)
    seen = {name: sum(r.num_examples for r in m.history) for name, m in models.items()}
    assert seen["local__a"] + seen["local__b"] + seen["local__c"] == seen["federated"]
    assert seen["centralized"] == seen["federated"] == 15 * 3 * 8
    assert all(len(m.history) == 15 for m in models.values())


def test_only_requested_scenarios_run() -> None:
    models = train_scenarios(
        _matrices(), TrainConfig(**{**CONFIG.__dict__, "scenarios": ("federated",)}), progress=False
    )
    assert list(models) == ["federated"]


def test_cuda_requested_without_a_gpu_is_named() -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ValueError, match="train.device"):
        resolve_device("cuda")
    with pytest.raises(ConfigError, match="train.device"):
        TrainConfig(device="tpu")


def test_an_organisation_with_one_usable_document_is_named() -> None:
    matrices = {**_matrices(), "tiny": poisson_matrices((1,), 40)[0]}
    with pytest.raises(ValueError, match="organisation 'tiny' has 1 training document"):
        train_scenarios(matrices, CONFIG, progress=False)


def test_hold_out_keeps_a_seeded_share_of_each_organisation_aside() -> None:
    matrices = _matrices((40, 21, 8))
    fit, held = hold_out(matrices, 0.25, 42)
    for name, matrix in matrices.items():
        assert fit[name].shape[0] + held[name].shape[0] == matrix.shape[0]
        assert fit[name].sum() + held[name].sum() == pytest.approx(matrix.sum())
    assert [held[n].shape[0] for n in matrices] == [10, 5, 2]
    again, _ = hold_out(matrices, 0.25, 42)
    assert all((again[n] != fit[n]).nnz == 0 for n in matrices)
    with pytest.raises(ValueError, match="organisation 'c' has 3 training documents"):
        hold_out({"c": matrices["c"][:3]}, 0.25, 42)


def test_validation_fraction_turns_on_early_stopping_in_every_scenario() -> None:
    config = TrainConfig(
        **{**CONFIG.__dict__, "max_steps": None, "max_epochs": 30, "validation_fraction": 0.25, "patience": 2}
    )
    models = train_scenarios(_matrices((40, 32, 48)), config, progress=False)
    for model in models.values():
        validations = [r.validation_loss for r in model.history if r.validation_loss is not None]
        assert validations and model.best_round is not None
        assert model.history[model.best_round].validation_loss == min(validations)
        assert model.stopped_early == (len(model.history) < 30 * 5)  # epochs of ceil(36 / 8) = 5 steps
    with pytest.raises(ConfigError, match="exactly one of 'train.max_steps' and 'train.max_epochs'"):
        TrainConfig(max_steps=10, max_epochs=10)
