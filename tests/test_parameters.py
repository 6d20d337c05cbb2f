"""A project's parameters checked at once (``parameters.py``): the library's blocks and the
experiments' (``fednmf``, ``pctd``, ``synthetic``), every bad value named, no training stack loaded."""

import subprocess
import sys

import pytest

from fedtopic_pipelines.core.config import ConfigError
from fedtopic_pipelines.experiments.config import FedNMFRunConfig, PCTDRunConfig, SyntheticExperimentConfig
from fedtopic_pipelines.parameters import validate_parameters


def test_an_unknown_top_level_block_is_named() -> None:
    with pytest.raises(ConfigError, match=r"unknown parameter block\(s\) \['trian'\]"):
        validate_parameters({"trian": {"max_steps": 5}, "train": {}})


@pytest.mark.parametrize("organisations", [5, "computers", {"a": 1}, ["a", 3]])
def test_organisations_must_be_a_list_of_names(organisations) -> None:
    with pytest.raises(ConfigError, match="parameter 'organisations' must be a list of names"):
        validate_parameters({"organisations": organisations})


def test_every_block_of_the_project_is_checked_at_once() -> None:
    with pytest.raises(ConfigError, match="parameter 'evaluate.top_words'"):
        validate_parameters({"train": {}, "evaluate": {"top_words": 1}})
    project = validate_parameters({"organisations": ["a", "b"], "train": {"max_steps": 3}})
    assert project.train.max_steps == 3 and project.organisations == ["a", "b"]


def test_the_experiments_blocks_are_checked_with_the_others() -> None:
    project = validate_parameters({"fednmf": {"topics": [5, 100]}, "pctd": {}, "synthetic": {"sweeps": {"A": {}}}})
    assert isinstance(project.blocks["fednmf"], FedNMFRunConfig) and project.blocks["fednmf"].topics == (5, 100)
    assert isinstance(project.blocks["pctd"], PCTDRunConfig)
    assert isinstance(project.synthetic, SyntheticExperimentConfig) and project.synthetic.sweep.name == "A"
    with pytest.raises(ConfigError, match="parameter 'fednmf.mi_weight'"):
        validate_parameters({"fednmf": {"mi_weight": 0}})
    with pytest.raises(ConfigError, match="'pctd.train.model.family'"):
        validate_parameters({"pctd": {"train": {"model": {"family": "prodlda"}}}})
    with pytest.raises(ConfigError, match="parameter 'synthetic.sweep' is 'Z'"):
        validate_parameters({"synthetic": {"sweep": "Z", "sweeps": {"A": {}}}})


def test_validating_every_block_loads_no_training_stack() -> None:
    """The Kedro hook validates before ``--pipeline=ingest`` runs, which must not import torch."""
    code = (
        "import sys\n"
        "from fedtopic_pipelines.parameters import validate_parameters\n"
        "validate_parameters({'fednmf': {}, 'pctd': {}, 'synthetic': {'sweeps': {'A': {}}}})\n"
        "heavy = ('torch', 'sklearn', 'gensim', 'kedro', 'flwr', 'mlflow')\n"
        "print(','.join(sorted(m for m in heavy if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
