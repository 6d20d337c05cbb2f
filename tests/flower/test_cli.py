"""``make federation-demo`` builds its job from the project's parameters as ``kedro run`` reads them."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.flower.cli import demo_job, exact_job, project_parameters
from fedtopic_pipelines.flower.federation import Job


@pytest.mark.parametrize("env", [None, "smoke"])
def test_the_demo_job_is_a_valid_job_of_the_project_parameters(env) -> None:
    params = project_parameters(env)
    job = demo_job(params, rounds=4)
    again = Job.from_dict(job.to_dict())  # what the ServerApp reads from the job file
    config = TrainConfig.from_params(again.train)  # raises on a key the nodes would not know
    assert config.scenarios == ("federated",) and config.max_steps == 4
    assert again.organisations == list(params["organisations"])
    assert config.batch_size == params["train"]["batch_size"]
    schedule = params["train"]["flower"]["local_steps"]  # the Flower engine's schedule, not train.optimizer
    assert (config.rule, config.aggregation.local_steps) == (schedule["rule"], schedule["steps"])
    assert config.optimizer.lr == schedule["optimizer"]["lr"] and config.flower.schedule == "exact"
    if env == "smoke":  # the environment overrides only the keys it names (soft merge)
        assert config.model.n_topics == 5


def test_the_demo_trains_by_the_schedule_and_scores_beside_the_exact_in_process_model() -> None:
    """Without --rounds the schedule's rounds (far fewer than FedSGD's); the reference the demo
    scores its model beside is the federated scenario `kedro run` trains in process."""
    params = project_parameters()
    _, _, flower = demo_job(params).configs()
    _, _, exact = exact_job(params).configs()
    assert flower.max_steps == params["train"]["flower"]["local_steps"]["rounds"]
    assert exact.rule == "fedsgd" and exact.engine == "in_process" and exact.max_steps == params["train"]["max_steps"]
    assert flower.max_steps * 5 < exact.max_steps
    _, _, fedsgd = demo_job(params, rounds=3, schedule="exact").configs()  # the exact option, named as such
    assert fedsgd.rule == "fedsgd" and fedsgd.optimizer == exact.optimizer


def test_sigterm_runs_the_cleanup_of_a_program_that_owns_a_federation(tmp_path) -> None:
    """`make federation-demo` or the benchmark stopped with SIGTERM still stops its federation."""
    marker = tmp_path / "stopped"
    program = (
        "import time\n"
        "from fedtopic_pipelines.flower.deployment import exit_on_sigterm\n"
        "exit_on_sigterm()\n"
        "try:\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(60)\n"
        "finally:\n"
        f"    open({str(marker)!r}, 'w').write('stop() ran')\n"
    )
    process = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    started = time.monotonic()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 128 + signal.SIGTERM
    assert marker.read_text() == "stop() ran" and time.monotonic() - started < 30
