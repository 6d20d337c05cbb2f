"""Tensors and structures on disk without pickle."""

import pickle

import pytest
import torch

from fedtopic_pipelines.core import persist


def test_nested_structures_round_trip_exactly(tmp_path) -> None:
    generator = torch.Generator().manual_seed(4)
    value = {
        "model": {"w": torch.randn(3, 2, generator=generator), "empty": torch.zeros(0, dtype=torch.int64)},
        "optimizer": {"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{"betas": (0.9, 0.99), "lr": 1e-3}]},
        "history": [{"round": 0, "loss": float("nan"), "best": float("inf"), "note": None, "ok": True}],
        "generator": generator.get_state(),
    }
    path = tmp_path / "x.safetensors"
    persist.save(path, value, "test")
    back = persist.load(path, "test")
    assert torch.equal(back["model"]["w"], value["model"]["w"]) and back["model"]["empty"].shape == (0,)
    assert back["optimizer"]["state"][0]["step"].item() == 3.0  # integer keys survive
    assert back["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.99)  # tuples stay tuples
    assert back["history"][0]["best"] == float("inf") and back["history"][0]["note"] is None
    assert torch.equal(back["generator"], value["generator"])


def test_a_pickle_or_other_kind_is_refused_by_name(tmp_path) -> None:
    evil = tmp_path / "evil.safetensors"
    evil.write_bytes(pickle.dumps({"x": 1}))
    with pytest.raises(persist.PersistError, match="evil.safetensors' is not a readable safetensors file"):
        persist.load(evil, "test")
    persist.save(tmp_path / "a.safetensors", {"x": torch.zeros(1)}, "kind-a")
    with pytest.raises(persist.PersistError, match="holds 'kind-a', expected a 'kind-b' file"):
        persist.load(tmp_path / "a.safetensors", "kind-b")


def test_values_that_cannot_be_stored_are_named() -> None:
    with pytest.raises(TypeError, match="object"):
        persist.flatten({"x": object()})


def test_the_structure_is_in_the_body_not_the_size_capped_header(tmp_path) -> None:
    """safetensors caps its JSON header at 100 MB; a long run's checkpoint history must not live there."""
    history = [{"round": i, "client_loss": {f"organisation_{k}": 70.0 + k for k in range(5)}} for i in range(5_000)]
    path = tmp_path / "long.safetensors"
    persist.save(path, {"history": history, "w": torch.zeros(2)}, "test")
    header_bytes = int.from_bytes(path.read_bytes()[:8], "little")
    assert header_bytes < 1_000 < path.stat().st_size / 100  # the header names tensors and the kind only
    assert persist.load(path, "test")["history"][-1] == history[-1]
