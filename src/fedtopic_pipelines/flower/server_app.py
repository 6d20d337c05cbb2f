"""The ServerApp: reads the job file named in the run config, runs the federation, writes the result.

``flwr run`` has no channel back to the submitter, so the result (vocabulary, trained
model, per-round latencies) is written to ``output-dir`` from the run config, which the
Kedro node that submitted the run reads.

Nothing here changes Flower: the round timeout bounds a reply whose arrays never finish
uploading in ``engine.exchange``, which stops waiting for Flower's pull at the deadline.
"""

from __future__ import annotations

import logging
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedtopic_pipelines.flower.federation import Job, run_flower_federation, save_result

logger = logging.getLogger(__name__)

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    job_file = str(context.run_config.get("job-file", ""))
    output = str(context.run_config.get("output-dir", ""))
    if not job_file or not output:
        raise ValueError("run config needs 'job-file' and 'output-dir' (flwr run ... --run-config \"job-file='...'\")")
    result, engine = run_flower_federation(grid, Job.from_file(Path(job_file)))
    save_result(result, engine, Path(output))
    logger.info("federation finished: %d rounds, result in %s", len(result.model.history), output)
