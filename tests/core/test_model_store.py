"""Trained models saved without pickle and rebuilt through the family registry."""

import torch

from fedtopic_pipelines.core.config import ProdLDAConfig, TrainConfig
from fedtopic_pipelines.core.lineage import vocabulary_fingerprint
from fedtopic_pipelines.core.model_store import TrainedModel, load_models, save_models
from fedtopic_pipelines.core.training import train_scenarios
from tests.conftest import poisson_matrices


def test_models_round_trip_with_config_history_and_order(tmp_path) -> None:
    config = TrainConfig(
        model=ProdLDAConfig(n_topics=3, hidden_sizes=(8,)), batch_size=8, max_steps=4, device="cpu", tolerance=1e-9
    )
    matrices = dict(zip("ab", poisson_matrices((20, 16), 30), strict=True))
    models = train_scenarios(matrices, config, progress=False)
    save_models(tmp_path / "models", models)
    back = load_models(tmp_path / "models")
    assert list(back) == list(models)
    for name, model in models.items():
        again = back[name]
        assert again.config == model.config and again.organisations == model.organisations
        assert (
            again.vocabulary
            == model.vocabulary
            == vocabulary_fingerprint([f"w{j}" for j in range(matrices["a"].shape[1])])
        )
        assert [r.metrics for r in again.history] == [r.metrics for r in model.history]
        assert all(torch.equal(again.state[k], model.state[k]) for k in model.state)
        bow = torch.from_numpy(matrices["a"][:5].toarray())
        assert torch.equal(again.to_model().doc_topic(bow), model.to_model().doc_topic(bow))
    save_models(tmp_path / "models", {"federated": models["federated"]})  # the folder is exactly these models
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["federated.safetensors", "models.json"]
    assert isinstance(TrainedModel.load(tmp_path / "models" / "federated.safetensors"), TrainedModel)
