"""Server checkpoints: a restarted run resumes where the last one stopped, on either engine.

Every ``checkpoint_every`` rounds (and once training has finished) the server's state
is written atomically to ``checkpoint_dir/<name>-<digest>.safetensors``. The digest covers
what the result depends on: the scenario, its organisations in order, the training
parameters (without timeouts, logging, the checkpoint place and interval, or which other
scenarios run), the engine, the vocabulary, and what each organisation declared when it
prepared (its document counts and a fingerprint of its training data: on a Flower node a
keyed hash whose key never leaves the node). A changed job or changed data never resumes
from an unrelated run. Clients rejoin at the checkpoint's round by replaying their batch
streams (``FamilyClient``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedtopic_pipelines.core import lineage, persist
from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.federated.server import FederatedServer

logger = logging.getLogger(__name__)

KIND = "fedtopic.server-checkpoint"


class Checkpoints:
    """Where one federation's checkpoints go, and when."""

    def __init__(
        self,
        config: TrainConfig,
        name: str,
        organisations: Sequence[str],
        terms: Sequence[str],
        declared: Mapping[str, Mapping[str, Any]],
    ) -> None:
        if not config.checkpoint_every or not config.checkpoint_dir:
            raise ValueError("Checkpoints need 'train.checkpoint_every' > 0 and 'train.checkpoint_dir'")
        keys = ("train_rows", "validation_rows", "data_fingerprint")
        data = [[org, *(declared[org].get(k) for k in keys)] for org in organisations]
        what = [name, list(organisations), config.training_key(), list(terms), data]
        self.every = config.checkpoint_every
        self.path = Path(config.checkpoint_dir) / f"{name}-{lineage.digest(what)}.safetensors"

    def load(self) -> dict[str, Any] | None:
        return persist.load(self.path, KIND) if self.path.is_file() else None

    def resume(self, server: FederatedServer) -> bool:
        """Load the last checkpoint into ``server``; whether there was one."""
        saved = self.load()
        if saved is None:
            return False
        server.resume(saved)
        if "checkpointed" in server.context:
            server.context["checkpointed"] = server.next_round
        if server.finished:
            logger.warning(
                "%s: %s holds a finished run of this same job and data (%d rounds): its result is returned "
                "without training; delete the file to train again",
                server.name,
                self.path,
                len(server.history),
            )
        else:
            logger.info("%s: resumed from %s at round %d", server.name, self.path, server.next_round)
        return True

    def maybe_save(self, server: FederatedServer) -> None:
        """After a round: save every ``every`` rounds, and when training has finished."""
        if server.next_round % self.every and not server.finished:
            return
        persist.save(self.path, server.checkpoint(), KIND)
        if "checkpointed" in server.context:  # organisations may now drop copies of older local state
            server.context["checkpointed"] = server.next_round
        logger.info("%s: checkpoint after round %d: %s", server.name, server.next_round - 1, self.path)
