"""Trained models: weights plus how they were trained, stored without pickle.

A :class:`TrainedModel` is what training returns and what evaluation reads: the model's
full state (CPU tensors), its family's config, the organisations it was trained on and
its per-round history. It is saved as one safetensors file (``core/persist.py``) and
rebuilt through the family registry, so a model file never needs the class that wrote it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fedtopic_pipelines.core import persist
from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.families import get_family
from fedtopic_pipelines.core.federated.family import ModelFamily
from fedtopic_pipelines.core.federated.server import RoundRecord

KIND = "fedtopic.trained-model"
INDEX = "models.json"
NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass
class TrainedModel:
    """A trained model's weights plus how it was trained (CPU tensors)."""

    name: str
    scenario: str
    organisations: list[str]
    vocab_size: int
    config: TrainConfig
    state: dict[str, torch.Tensor]
    history: list[RoundRecord] = field(default_factory=list)
    stopped_early: bool = False
    best_round: int | None = None
    vocabulary: str | None = None  # fingerprint of the vocabulary it was trained on (core/lineage.py)

    @property
    def family(self) -> ModelFamily:
        return get_family(self.config.model.family)

    def to_model(self, device: torch.device | str = "cpu") -> nn.Module:
        """The family's module with these weights, in eval mode (evaluation's ``TopicModel``)."""
        model = self.family.create_model(self.vocab_size, self.config, torch.device(device))
        model.load_state_dict(self.state)
        return model.eval()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "scenario": self.scenario,
            "organisations": list(self.organisations),
            "vocab_size": self.vocab_size,
            "config": self.config.to_params(),
            "state": dict(self.state),
            "history": [r.to_dict() for r in self.history],
            "stopped_early": self.stopped_early,
            "best_round": self.best_round,
            "vocabulary": self.vocabulary,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TrainedModel:
        return cls(
            str(raw["name"]),
            str(raw["scenario"]),
            list(raw["organisations"]),
            int(raw["vocab_size"]),
            TrainConfig.from_params(raw["config"]),
            dict(raw["state"]),
            [RoundRecord.from_dict(r) for r in raw["history"]],
            bool(raw["stopped_early"]),
            raw["best_round"],
            raw.get("vocabulary"),  # absent from models saved before fingerprints: not judged
        )

    def save(self, path: Path) -> None:
        persist.save(path, self.to_dict(), KIND)

    @classmethod
    def load(cls, path: Path) -> TrainedModel:
        try:
            return cls.from_dict(persist.load(path, KIND))
        except (KeyError, TypeError, ValueError) as exc:
            raise persist.PersistError(f"'{path}' is not a trained model: {exc}") from None


def save_models(folder: Path, models: Mapping[str, TrainedModel]) -> None:
    """One ``<name>.safetensors`` per model and ``models.json`` listing them in order; files of
    models not in ``models`` are removed, so the folder is exactly these models."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name in models:
        if not NAME.match(name):
            raise ValueError(f"model name {name!r} cannot be a file name")
    for old in folder.glob("*.safetensors"):
        if old.stem not in models:
            old.unlink()
    for name, model in models.items():
        model.save(folder / f"{name}.safetensors")
    (folder / INDEX).write_text(json.dumps(list(models), indent=2))


def load_models(folder: Path) -> dict[str, TrainedModel]:
    """The models :func:`save_models` wrote, in their order."""
    folder = Path(folder)
    names = json.loads((folder / INDEX).read_text())
    return {name: TrainedModel.load(folder / f"{name}.safetensors") for name in names}
