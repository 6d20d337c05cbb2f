"""A project's parameters checked at once (``parameters.py``): the library's blocks and the
experiments' (``fednmf``, ``pctd``, ``synthetic``), every bad value named, no training stack loaded."""

import subprocess
import sys

import pytest

from fedtopic_pipelines.core.config import ConfigError
from fedtopic_pipelines.core.config.aggregation import participants_per_round
from fedtopic_pipelines.experiments.config import FedNMFRunConfig, PCTDRunConfig, SyntheticExperimentConfig
from fedtopic_pipelines.parameters import check_device, check_run, validate_parameters


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
    """The Kedro hook validates before ``--pipelines=ingest`` runs, which must not import torch."""
    code = (
        "import sys\n"
        "from fedtopic_pipelines.parameters import validate_parameters\n"
        "validate_parameters({'fednmf': {}, 'pctd': {}, 'synthetic': {'sweeps': {'A': {}}}})\n"
        "heavy = ('torch', 'sklearn', 'gensim', 'kedro', 'flwr', 'mlflow')\n"
        "print(','.join(sorted(m for m in heavy if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# Checks the parameters and the machine answer before the first node (``check_run``) ---------
FIVE = ["a", "b", "c", "d", "e"]


def _run(params: dict, pipelines: list[str] | None = None) -> None:
    check_run(validate_parameters({"organisations": FIVE, **params}), pipelines)


@pytest.mark.parametrize(
    ("privacy", "train", "refused"),
    [
        ({"robust_rule": "krum", "krum_byzantine": 10}, {}, r"'privacy.krum_byzantine' is 10, but 'train' .* n = 5"),
        ({"robust_rule": "krum", "krum_byzantine": 3}, {}, r"n - f - 2 > 0; set it to at most 2"),
        ({"robust_rule": "krum", "krum_keep": 5}, {}, r"'privacy.krum_keep' is 5, .* at most n - f = 4"),
        ({"robust_rule": "trimmed_mean", "trim_fraction": 0.1}, {}, r"'privacy.trim_fraction' is 0.1, .*at least 0.2"),
        # client sampling: 3 of the 5 organisations per round, so Krum with f = 1 has n - f - 2 = 0
        (
            {"robust_rule": "krum"},
            {"model": {"normalization": "layer"}, "aggregation": {"rule": "fedavg", "client_fraction": 0.6}},
            r"n = 3 .*0.6 x 5",
        ),
    ],
)
def test_a_robust_rule_the_organisations_per_round_cannot_satisfy_is_refused(privacy, train, refused) -> None:
    with pytest.raises(ConfigError, match=refused):
        _run({"train": train, "privacy": privacy}, ["train"])


def test_robust_rules_within_their_bounds_and_runs_that_train_nothing_pass() -> None:
    _run({"train": {}, "privacy": {"robust_rule": "krum", "krum_byzantine": 2, "krum_keep": 3}}, ["train"])
    _run({"train": {}, "privacy": {"robust_rule": "trimmed_mean", "trim_fraction": 0.2}}, ["__default__"])
    _run({"train": {}, "privacy": {"robust_rule": "trimmed_mean", "trim_fraction": 0.0}}, ["train"])  # asked for
    _run({"train": {}, "privacy": {"robust_rule": "krum", "krum_byzantine": 10}}, ["ingest"])  # trains nothing
    # the references alone train without a defence: no federated scenario, nothing to check
    _run({"train": {"scenarios": ["centralized"]}, "privacy": {"robust_rule": "krum", "krum_byzantine": 10}})


def test_every_pipeline_that_trains_under_the_robust_rule_is_checked_with_its_own_federations() -> None:
    krum = {"robust_rule": "krum"}
    # fednmf's default C = 0.2 of 5 organisations: one update per round
    with pytest.raises(
        ConfigError, match=r"'fednmf.train' aggregates n = 1 .*'fednmf.train.aggregation.client_fraction'"
    ):
        _run({"fednmf": {}, "privacy": krum}, ["fednmf"])
    # all five every round, but Fig. 4 partitions the documents again into K = 3: n - f - 2 = 0
    nmf = {"model": {"family": "nmf"}, "optimizer": {"name": "adagrad"}, "aggregation": {"client_fraction": 1.0}}
    fednmf = {"train": nmf, "heterogeneity": {"clients": [3, 10]}}
    with pytest.raises(ConfigError, match=r"'fednmf.train' aggregates n = 3 updates per round \(its 3 organisations"):
        _run({"fednmf": fednmf, "privacy": krum}, ["fednmf"])
    _run({"fednmf": {**fednmf, "heterogeneity": {"clients": [10]}}, "privacy": krum}, ["fednmf"])
    _run({"fednmf": {**fednmf, "heterogeneity": {"clients": [3], "methods": []}}, "privacy": krum}, ["fednmf"])
    # synthetic trains its own generated organisations (5 here) under its own train.privacy
    synthetic = {"sweeps": {"A": {}}, "train": {"privacy": {"robust_rule": "krum", "krum_byzantine": 3}}}
    with pytest.raises(ConfigError, match=r"'privacy.krum_byzantine' is 3, but 'synthetic.train' aggregates n = 5"):
        _run({"synthetic": synthetic}, ["synthetic"])


def test_client_sampling_that_leaves_no_organisation_in_a_round_is_refused_by_its_full_path() -> None:
    with pytest.raises(ConfigError, match=r"'word2vec.train.aggregation.client_fraction' is 0.1: with 5 organisations"):
        _run(
            {"word2vec": {"train": {"model": {"family": "word2vec"}, "aggregation": {"client_fraction": 0.1}}}},
            ["word2vec"],
        )


def test_an_empty_round_names_the_block_whose_client_fraction_it_is() -> None:
    with pytest.raises(ConfigError, match="'fednmf.train.aggregation.client_fraction' is 0.1: with 5 organisations"):
        participants_per_round(5, 0.1, "fednmf.train")
    assert participants_per_round(5, 0.2, "fednmf.train") == 1


def test_a_device_this_machine_lacks_is_refused_before_any_node() -> None:
    import torch

    if torch.cuda.is_available():
        _run({"train": {"device": "cuda"}}, ["train"])
    else:
        with pytest.raises(ConfigError, match=r"parameter 'train.device' is 'cuda', but torch finds no CUDA device"):
            _run({"train": {"device": "cuda"}}, ["train"])
    with pytest.raises(ConfigError, match=r"parameter 'pctd.train.device' is 'cuda:\d+', but torch finds"):
        check_device(f"cuda:{torch.cuda.device_count()}", "pctd.train.device")
    _run({"train": {"device": "cpu"}, "word2vec": {"train": {"model": {"family": "word2vec"}, "device": "cuda"}}})


@pytest.mark.parametrize(
    ("params", "vectors", "trust"),
    [
        ({"realdata": {"word_vectors": "w.kv"}}, "realdata.word_vectors", "realdata.trust_pickle"),
        (
            {"fednmf": {"evaluate": {"word_vectors": "w.model"}}},
            "fednmf.evaluate.word_vectors",
            "fednmf.evaluate.trust_pickle",
        ),
        (
            {"pctd": {"train": {"model": {"family": "pctd", "consistency_vectors": "w.kv"}, "max_steps": 5}}},
            "pctd.train.model.consistency_vectors",
            "pctd.train.model.trust_pickle",
        ),
    ],
)
def test_word_vectors_that_would_be_unpickled_need_their_blocks_opt_in(params: dict, vectors: str, trust: str) -> None:
    with pytest.raises(ConfigError, match=rf"'{vectors}' is 'w\.\w+'.*pickle.*'{trust}: true'"):
        validate_parameters(params)
    block, *inner, key = trust.split(".")
    trusted = params[block]
    for name in inner:
        trusted = trusted[name]
    trusted[key] = True
    validate_parameters(params)


def test_glove_word2vec_files_and_no_vectors_need_no_opt_in() -> None:
    validate_parameters({"realdata": {"word_vectors": "glove-6b-50d"}})
    validate_parameters({"realdata": {"word_vectors": "data/vectors.txt"}})
    validate_parameters({"fednmf": {"evaluate": {"word_vectors": "vectors.bin.gz"}}})
    validate_parameters(
        {"pctd": {"train": {"model": {"family": "pctd", "consistency_vectors": "none"}, "max_steps": 5}}}
    )


def test_compare_checks_every_family_it_trains_under_the_privacy_block_before_any_node() -> None:
    compare = {"families": {"prodlda": {}, "nmf_exact": {}}}
    _run({"compare": compare}, ["compare"])
    with pytest.raises(ConfigError, match=r"'privacy' does not fit 'compare.families.nmf_exact' \(nmf_exact\)"):
        _run({"compare": compare, "privacy": {"robust_rule": "median"}}, ["compare"])
    with pytest.raises(ConfigError, match="'compare.families.nmf'"):
        _run({"compare": {"families": {"nmf": {"optimizer": {"name": "adam"}}}}}, ["compare"])
    _run({"compare": {"families": {"nmf": {"optimizer": {"name": "adam"}}}}}, ["train"])  # not run: not checked
