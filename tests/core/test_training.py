import pytest
import torch

from fedtopic_pipelines.core.compute import resolve_device
from fedtopic_pipelines.core.config import ConfigError, ProdLDAConfig, TrainConfig
from fedtopic_pipelines.core.federated.engine import FederationError
from fedtopic_pipelines.core.seeds import hold_out_one
from fedtopic_pipelines.core.training import train_scenarios
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
    assert models["centralized"].organisations == ["a", "b", "c"] and models["local__b"].organisations == ["b"]


def test_only_requested_scenarios_run() -> None:
    models = train_scenarios(_matrices(), CONFIG.replace(scenarios=("federated",)), progress=False)
    assert list(models) == ["federated"]


def test_cuda_requested_without_a_gpu_is_named() -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ValueError, match="train.device"):
        resolve_device("cuda")
    with pytest.raises(ConfigError, match="train.device"):
        TrainConfig.from_params({"device": "tpu"})


def test_an_organisation_with_one_usable_document_is_named() -> None:
    matrices = {**_matrices(), "tiny": poisson_matrices((1,), 40)[0]}
    with pytest.raises(FederationError, match="organisation 'tiny' has 1 training document"):
        train_scenarios(matrices, CONFIG, progress=False)


def test_hold_out_keeps_a_seeded_share_of_each_organisation_aside() -> None:
    matrices = _matrices((40, 21, 8))
    split = {name: hold_out_one(name, m, 0.25, 42, i) for i, (name, m) in enumerate(matrices.items())}
    for name, matrix in matrices.items():
        fit, held = split[name]
        assert fit.shape[0] + held.shape[0] == matrix.shape[0]
        assert fit.sum() + held.sum() == pytest.approx(matrix.sum())
    assert [split[n][1].shape[0] for n in matrices] == [10, 5, 2]
    again = hold_out_one("a", matrices["a"], 0.25, 42, 0)[0]
    assert (again != split["a"][0]).nnz == 0
    with pytest.raises(ValueError, match="organisation 'c' has 3 training documents"):
        hold_out_one("c", matrices["c"][:3], 0.25, 42, 2)


def test_validation_fraction_turns_on_early_stopping_in_every_scenario() -> None:
    config = CONFIG.replace(max_steps=None, max_epochs=30, validation_fraction=0.25, patience=2)
    models = train_scenarios(_matrices((40, 32, 48)), config, progress=False)
    for model in models.values():
        validations = [r.validation_loss for r in model.history if r.validation_loss is not None]
        assert validations and model.best_round is not None
        assert model.history[model.best_round].validation_loss == min(validations)
        assert model.stopped_early == (len(model.history) < 30 * 5)  # epochs of ceil(36 / 8) = 5 steps


KILLED_RUN = """
import sys
from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.training import train_scenarios
from tests.core.test_training import _matrices
train_scenarios(_matrices(), TrainConfig.from_params({params!r}), progress=False)
"""


def test_a_killed_in_process_run_resumes_from_its_last_checkpoint(tmp_path, caplog) -> None:
    """Checkpoints work in process too: a run killed (SIGKILL) mid-training is rerun and resumes
    from its last checkpoint, ending with the uninterrupted run's exact parameters and losses."""
    import os
    import signal
    import subprocess
    import sys
    import time

    steps = 400
    params = {
        **CONFIG.to_params(),
        "scenarios": ["federated"],
        "max_steps": steps,
        "checkpoint_every": 20,
        "checkpoint_dir": str(tmp_path / "ckpt"),
    }
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    process = subprocess.Popen([sys.executable, "-c", KILLED_RUN.format(params=params)], cwd=root)
    deadline = time.monotonic() + 120
    while not list((tmp_path / "ckpt").glob("*.safetensors")) and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert list((tmp_path / "ckpt").glob("*.safetensors")), "no checkpoint was written"

    config = TrainConfig.from_params(params)
    with caplog.at_level("INFO", logger="fedtopic_pipelines.core.federated.checkpoint"):
        resumed = train_scenarios(_matrices(), config, progress=False)["federated"]
    (message,) = [m for m in caplog.messages if "resumed from" in m]
    at = int(message.rsplit(" ", 1)[1])
    assert 0 < at < steps, message  # it resumed mid-run, not from scratch and not after the end
    reference = train_scenarios(_matrices(), config.replace(checkpoint_every=0, checkpoint_dir=None), progress=False)
    expected = reference["federated"]
    assert [r.round for r in resumed.history] == list(range(steps))  # none lost, none repeated
    assert [r.loss for r in resumed.history] == [r.loss for r in expected.history]
    assert all(torch.equal(resumed.state[k], expected.state[k]) for k in expected.state)


def test_a_checkpoint_of_other_data_is_not_resumed(tmp_path) -> None:
    """Same organisations, sizes, vocabulary and parameters, different documents: a finished
    checkpoint of the first data must not be handed back as the model of the second."""
    config = CONFIG.replace(scenarios=("federated",), checkpoint_every=5, checkpoint_dir=str(tmp_path))
    first = _matrices()
    second = dict(zip(("a", "b", "c"), poisson_matrices((30, 21, 45), 40, seed=1), strict=True))
    train_scenarios(first, config, progress=False)
    again = train_scenarios(second, config, progress=False)["federated"]
    fresh = train_scenarios(second, config.replace(checkpoint_every=0, checkpoint_dir=None), progress=False)
    assert all(torch.equal(again.state[k], fresh["federated"].state[k]) for k in again.state)
    assert len(list(tmp_path.glob("federated-*.safetensors"))) == 2  # one per data


def test_word_bias_starts_from_the_consensus_frequencies_in_every_scenario() -> None:
    import numpy as np
    import pandas as pd

    matrices = _matrices()
    frequency = np.asarray(sum(m.sum(axis=0) for m in matrices.values())).ravel() + 1.0
    vocabulary = pd.DataFrame({"term": [f"w{j}" for j in range(40)], "frequency": frequency})
    model = ProdLDAConfig(n_topics=3, hidden_sizes=(8,), normalization="layer", word_bias=True)
    config = CONFIG.replace(model=model, max_steps=1, optimizer={"name": "sgd", "lr": 1e-9})
    models = train_scenarios(matrices, config, progress=False, vocabulary=vocabulary)
    expected = torch.log(torch.as_tensor(frequency / frequency.sum(), dtype=torch.float32))
    for trained in models.values():  # one SGD step of 1e-9 later: still the background
        assert torch.allclose(trained.state["word_bias"], expected, atol=1e-6), trained.name


def test_train_threads_hold_while_training_and_are_restored_after(monkeypatch) -> None:
    from fedtopic_pipelines.core.compute import compute_threads

    before = torch.get_num_threads()
    with pytest.raises(RuntimeError), compute_threads(1):
        assert torch.get_num_threads() == 1
        raise RuntimeError("a failing run")
    assert torch.get_num_threads() == before
    seen: list[int] = []
    real = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (seen.append(n), real(n)))
    train_scenarios(_matrices(), CONFIG.replace(scenarios=("federated",), threads=1), progress=False)
    assert seen == [1, before] and torch.get_num_threads() == before
    seen.clear()
    train_scenarios(_matrices(), CONFIG.replace(scenarios=("federated",)), progress=False)  # None: left alone
    assert seen == []
