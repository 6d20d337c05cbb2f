"""The ``flower`` engine of the Kedro ``train`` node: the federated scenario runs on a federation.

The node writes the job (its parameter blocks and the organisations in order), submits it
to the federation that ``make federation-up`` started (``train.flower.federation_dir``),
waits for the run to end and reads back the model. The run's vocabulary must equal the
catalog's ``common_vocabulary``: both come from the same documents and parameters, so a
difference means the SuperNodes read other data than the pipeline did, and evaluating the
model against the catalog's matrices would be wrong.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any

from fedtopic_pipelines.core.model_store import TrainedModel
from fedtopic_pipelines.flower.deployment import LocalFederation
from fedtopic_pipelines.flower.federation import FederationError, Job, load_result

logger = logging.getLogger(__name__)


def train_on_flower(
    job: Job, vocabulary: list[str], federation_dir: Path, run_timeout_s: float
) -> tuple[TrainedModel, dict[str, Any]]:
    """Submit ``job``; return the trained model and the run's facts (nodes, round latencies)."""
    federation = LocalFederation.attach(federation_dir)
    runs = federation.root / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=runs))  # never two jobs in one folder
    (folder / "job.json").write_text(json.dumps(job.to_dict(), indent=2))
    logger.info("federated scenario on the Flower federation at %s (job %s)", federation.address, folder / "job.json")
    run_id = federation.submit({"job-file": str(folder / "job.json"), "output-dir": str(folder / "out")}, run_timeout_s)
    table, model, facts = load_result(folder / "out")
    terms = table["term"].tolist()
    if terms != list(vocabulary):
        raise FederationError(
            f"the federation's vocabulary ({len(terms)} terms) differs from the catalog's common_vocabulary "
            f"({len(vocabulary)} terms): the SuperNodes read other data or parameters than this pipeline "
            f"(run {run_id}, {folder})"
        )
    return model, {"run_id": run_id, "folder": str(folder), **facts}
