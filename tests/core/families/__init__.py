"""Helpers the families' own tests share: organisations' bags of words federated in process."""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp

from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.federated.engine import InProcessEngine
from fedtopic_pipelines.core.federation import run_federation
from fedtopic_pipelines.core.site import MemoryEndpoint


def vocabulary_of(data: dict[str, sp.csr_matrix]) -> pd.DataFrame:
    """The consensus's table for these organisations: every column a term, its summed count."""
    counts = np.asarray(sum(m.sum(axis=0) for m in data.values())).ravel()
    return pd.DataFrame({"term": [f"w{j}" for j in range(len(counts))], "frequency": counts})


def federate(config: TrainConfig, data: dict[str, sp.csr_matrix]):
    """The federation in process: one endpoint per organisation, the server's rounds."""
    engine = InProcessEngine([MemoryEndpoint(org, m) for org, m in data.items()])
    return run_federation(engine, list(data), config, vocabulary=vocabulary_of(data), progress=False)
