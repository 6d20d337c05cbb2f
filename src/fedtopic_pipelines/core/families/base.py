"""What every family shares: it reads its declaration from its config model."""

from __future__ import annotations

from fedtopic_pipelines.core.capabilities import FamilyCapabilities
from fedtopic_pipelines.core.config import FamilyConfig


class Declared:
    """A family whose :class:`~fedtopic_pipelines.core.capabilities.FamilyCapabilities` are its
    config model's: the config rules and the family read the same declaration."""

    config_type: type[FamilyConfig]

    @property
    def capabilities(self) -> FamilyCapabilities:
        return self.config_type.capabilities
