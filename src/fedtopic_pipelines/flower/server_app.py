"""The ServerApp: reads the job file named in the run config, runs the federation, writes the result.

``flwr run`` has no channel back to the submitter, so the result (vocabulary, trained
model, per-round latencies) is written to ``output-dir`` from the run config, which the
Kedro node that submitted the run reads.
"""

from __future__ import annotations

import logging
from pathlib import Path

import flwr.superlink.grid.http_grid as http_grid
from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.constant import PULL_MAX_TIME
from flwr.supercore.inflatable import inflatable_utils

from fedtopic_pipelines.flower.engine import pull_time_left
from fedtopic_pipelines.flower.federation import Job, run_flower_federation, save_result

logger = logging.getLogger(__name__)


def pull_objects(*args, **kwargs):
    """Flower's object pull, retried from 10 ms (not 1 s, doubling) and only until the round's deadline.

    A reply is visible before its arrays finish uploading, and Flower 1.41 hard-codes the
    retry backoff. The cap stays at 1 s; the deadline (``engine.PULL_DEADLINE``) turns a
    reply whose sender died mid-upload into that node's failure for the round instead of
    minutes of retries.
    """
    kwargs.setdefault("max_time", pull_time_left(PULL_MAX_TIME))
    return inflatable_utils.pull_objects(*args, initial_backoff=0.01, backoff_cap=1.0, **kwargs)


http_grid.pull_objects = pull_objects

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
