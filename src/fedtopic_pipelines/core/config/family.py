"""The base of a family's ``train.model`` block (discriminated on ``family``; ``registry.py``)."""

from __future__ import annotations

from typing import ClassVar

from fedtopic_pipelines.core.capabilities import FamilyCapabilities
from fedtopic_pipelines.core.config.base import ConfigModel


class FamilyConfig(ConfigModel):
    """A family's ``train.model`` block: ``family`` names it, ``capabilities`` is what the family
    declares about itself (``core/capabilities.py``), which the rules below read instead of
    the family's name."""

    block: ClassVar[str] = "train.model"
    capabilities: ClassVar[FamilyCapabilities]

    family: str

    def batch_coupled(self) -> bool:
        """Whether a document's forward pass reads its batch's other documents (BatchNorm): then
        neither local epochs nor DP can treat a batch's statistics as the accountant would."""
        return False

    def pooled(self) -> bool:
        """Whether that coupling spans every organisation's batch of a step (pooled BatchNorm): then
        each step exchanges statistics in the clear before its update."""
        return False

    def batch_setting(self) -> str:
        """The setting that couples a batch's documents, for messages (``batch_coupled``)."""
        return "the model's batch normalisation"
