"""``make federation-demo`` builds its job from the project's parameters as ``kedro run`` reads them."""

from __future__ import annotations

import pytest

from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.flower.cli import demo_job, project_parameters
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
    if env == "smoke":  # the environment overrides only the keys it names (soft merge)
        assert config.model.n_topics == 5 and config.optimizer.lr == params["train"]["optimizer"]["lr"]
