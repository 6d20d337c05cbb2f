"""The ServerApp: reads the job file named in the run config, runs the federation, writes the result.

``flwr run`` has no channel back to the submitter, so the result (vocabulary, trained
model, per-round latencies) is written to ``output-dir`` from the run config, which the
Kedro node that submitted the run reads.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import flwr.superlink.grid.http_grid as http_grid
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.inflatable import inflatable_utils

from fedtopic_pipelines.flower.federation import Job, run_federation, save_result

logger = logging.getLogger(__name__)

# A reply is visible before its arrays finish uploading; Flower 1.41 then retries the pull
# after 1 s, doubling (hard-coded). Start at 10 ms: rounds are meant to take less than 1 s.
# The cap stays at 1 s so that Flower's 500 tries still tolerate a slow upload (minutes, not 50 s).
http_grid.pull_objects = functools.partial(inflatable_utils.pull_objects, initial_backoff=0.01, backoff_cap=1.0)

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    job_file = str(context.run_config.get("job-file", ""))
    output = str(context.run_config.get("output-dir", ""))
    if not job_file or not output:
        raise ValueError("run config needs 'job-file' and 'output-dir' (flwr run ... --run-config \"job-file='...'\")")
    result = run_federation(grid, Job.from_file(Path(job_file)))
    save_result(result, Path(output))
    logger.info("federation finished: %d rounds, result in %s", len(result.model.history), output)
