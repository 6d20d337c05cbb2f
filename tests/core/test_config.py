"""Strict parameter validation: every bad value is refused with the parameter's full name."""

import math
import re

import pytest

from fedtopic_pipelines.core.config import (
    ConfigError,
    ConsensusConfig,
    EvaluateConfig,
    IngestDemoConfig,
    IngestTableConfig,
    OptimizerConfig,
    PreprocessConfig,
    ProdLDAConfig,
    TrainConfig,
    Word2VecRunConfig,
    from_mapping,
)
from fedtopic_pipelines.experiments.config import FedNMFRunConfig, PCTDRunConfig, SyntheticExperimentConfig


def test_unknown_scenario_is_named() -> None:
    with pytest.raises(ConfigError, match=r"parameter 'train.scenarios\[0\]' is 'federatd'"):
        TrainConfig.from_params({"scenarios": ["federatd"]})


def test_unknown_family_is_named() -> None:
    families = r"\['prodlda', 'combinedtm', 'zeroshottm', 'word2vec', 'nmf', 'pctd', 'nmf_exact', 'lda'\]"
    with pytest.raises(ConfigError, match=r"parameter 'train.model.family' is 'hdp'; expected one of " + families):
        TrainConfig.from_params({"model": {"family": "hdp"}})


def test_a_model_block_without_family_is_the_default_family() -> None:
    config = TrainConfig.from_params({"model": {"n_topics": 7}})
    assert isinstance(config.model, ProdLDAConfig) and config.model.family == "prodlda" and config.model.n_topics == 7


def test_unknown_merge_is_named() -> None:
    with pytest.raises(ConfigError, match=r"vocab_consensus.merge.*'union_all'"):
        from_mapping(ConsensusConfig, {"merge": "union_all"}, "vocab_consensus")


def test_unknown_key_is_named_with_its_full_path() -> None:
    with pytest.raises(ConfigError, match=r"unknown parameter 'train.model.n_topic'"):
        TrainConfig.from_params({"model": {"n_topic": 5}})


def test_nested_blocks_are_parsed() -> None:
    config = TrainConfig.from_params({"model": {"n_topics": 7, "hidden_sizes": [10]}, "optimizer": {"lr": 0.1}})
    assert config.model.n_topics == 7
    assert config.model.hidden_sizes == (10,)
    assert config.optimizer.lr == 0.1


# Each probe of issue 12, part 1: got through or failed without naming the parameter before.
PROBES = [
    ({"lr": math.nan}, "optimizer", "train.optimizer.lr", "finite"),
    ({"round_timeout_s": math.inf}, "flower", "train.flower.round_timeout_s", "finite"),
    ({"max_steps": 2.5}, None, "train.max_steps", "integer"),
    ({"max_steps": True}, None, "train.max_steps", "integer"),
    ({"n_topics": 2.5}, "model", "train.model.n_topics", "integer"),
    ({"normalization": "group"}, "model", "train.model.normalization", "'batch', 'pooled_batch', 'layer' or 'none'"),
    ({"betas": [2, -1]}, "optimizer", "train.optimizer.betas[0]", "less than 1"),
    ({"mlflow_every": "10"}, None, "train.mlflow_every", "integer"),
    ({"run_timeout_s": "1h"}, "flower", "train.flower.run_timeout_s", "number"),
    ({"scenarios": "federated"}, None, "train.scenarios", "tuple"),
    ({"batch_size": 1}, None, "train.batch_size", "greater than or equal to 2"),
    ({"seed": -3}, None, "train.seed", "greater than or equal to 0"),
]


@pytest.mark.parametrize(("value", "block", "path", "says"), PROBES, ids=[p[2] for p in PROBES])
def test_each_probe_is_refused_naming_the_parameter(value, block, path, says) -> None:
    raw = {block: value} if block else value
    with pytest.raises(ConfigError, match=rf"parameter '{re.escape(path)}'.*{says}"):
        TrainConfig.from_params(raw)


@pytest.mark.parametrize(
    ("cls", "raw", "path"),
    [
        (EvaluateConfig, {"svm_c": -1.0}, "evaluate.svm_c"),
        (EvaluateConfig, {"diversity_top_words": -5}, "evaluate.diversity_top_words"),
        (EvaluateConfig, {"coherence_measures": "c_v"}, "evaluate.coherence_measures"),
        (PreprocessConfig, {"max_df": 0}, "preprocess.max_df"),
        (PreprocessConfig, {"min_df": 1.5}, "preprocess.min_df"),
        (ConsensusConfig, {"top_n": 0}, "vocab_consensus.top_n"),
    ],
)
def test_other_blocks_name_their_parameters(cls, raw, path) -> None:
    where = path.rsplit(".", 1)[0]
    with pytest.raises(ConfigError, match=rf"parameter '{path}'"):
        from_mapping(cls, raw, where)


def test_cross_field_rules_name_the_parameters() -> None:
    with pytest.raises(ConfigError, match="exactly one of 'train.max_steps' and 'train.max_epochs'"):
        TrainConfig.from_params({"max_steps": 10, "max_epochs": 10})
    with pytest.raises(ConfigError, match="'train.checkpoint_every' > 0 needs 'train.checkpoint_dir'"):
        TrainConfig.from_params({"checkpoint_every": 3})
    with pytest.raises(ConfigError, match="repeats a scenario"):
        TrainConfig.from_params({"scenarios": ["federated", "federated"]})


@pytest.mark.parametrize("block", ["pctd", "word2vec"])
def test_a_nested_train_blocks_rule_is_named_by_its_full_path_not_dumped(block) -> None:
    cls = PCTDRunConfig if block == "pctd" else Word2VecRunConfig
    with pytest.raises(ConfigError) as caught:
        from_mapping(cls, {"train": {"model": {"family": block}, "aggregation": {"rule": "fedavg"}}}, block)
    message = str(caught.value)
    assert f"'{block}.train.aggregation.rule' is 'fedavg'" in message
    assert "allowed: null, meaning 'fedsgd', or one of ['fedsgd']" in message
    assert "'scenarios'" not in message and "{" not in message  # the block's other settings are not dumped


def test_a_nested_blocks_own_checks_keep_other_blocks_names() -> None:
    with pytest.raises(ConfigError) as caught:
        from_mapping(FedNMFRunConfig, {"train": {"checkpoint_every": 2}}, "fednmf")
    assert "'fednmf.train.checkpoint_every' > 0 needs 'fednmf.train.checkpoint_dir'" in str(caught.value)
    raw = {"train": {"model": {"normalization": "batch"}, "aggregation": {"rule": "fedavg"}}}
    rule = r"'synthetic.train.aggregation.rule' is 'fedavg' with 'synthetic.train.model.normalization: batch'"
    with pytest.raises(ConfigError, match=rule):
        from_mapping(SyntheticExperimentConfig, raw, "synthetic")
    decoder = {"normalization": "layer", "decoder_normalization": "batch"}
    with pytest.raises(ConfigError, match=r"with 'train.model.decoder_normalization: batch'"):
        from_mapping(TrainConfig, {"model": decoder, "aggregation": {"rule": "fedavg"}}, "train")


def test_pooled_batchnorm_refuses_what_it_cannot_honour() -> None:
    pooled = {"normalization": "pooled_batch"}
    refused = r"'train.aggregation.rule' is 'fedavg' with 'train.model.normalization: pooled"
    with pytest.raises(ConfigError, match=refused):
        from_mapping(TrainConfig, {"model": pooled, "aggregation": {"rule": "fedavg"}}, "train")
    with pytest.raises(ConfigError, match=r"mix 'batch'.*with 'pooled_batch'"):
        from_mapping(TrainConfig, {"model": {**pooled, "decoder_normalization": "batch"}}, "train")
    secure = {"model": {"normalization": "layer", "decoder_normalization": "pooled_batch"}}
    secure["privacy"] = {"secure_aggregation": True}
    with pytest.raises(ConfigError, match=r"secure_aggregation' is on with 'train.model.decoder_normalization: pooled"):
        from_mapping(TrainConfig, secure, "train")
    robust = {"model": pooled, "privacy": {"robust_rule": "median"}}
    with pytest.raises(ConfigError, match=r"'privacy.robust_rule' is 'median' with 'train.model.normalization: pooled"):
        from_mapping(TrainConfig, robust, "train")
    assert from_mapping(TrainConfig, {"model": pooled}, "train").model.pooled()


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(ValueError, match="device"):
        TrainConfig(device="tpu")


def test_a_block_that_is_not_a_mapping_is_named() -> None:
    with pytest.raises(ConfigError, match="parameter block 'train' must be a mapping"):
        TrainConfig.from_params(["max_steps", 3])


def test_replace_validates_and_round_trips_through_params() -> None:
    config = TrainConfig.from_params({"model": {"n_topics": 4}})
    assert config.replace(max_steps=5).max_steps == 5
    with pytest.raises(ConfigError, match="max_steps"):
        config.replace(max_steps=0)
    assert TrainConfig.from_params(config.to_params()) == config


def test_ingest_blocks_reject_unknown_keys_and_bad_caps() -> None:
    with pytest.raises(ConfigError, match=r"ingest_table.label_colum"):
        from_mapping(IngestTableConfig, {"label_colum": "topic"}, "ingest_table")
    with pytest.raises(ConfigError, match=r"ingest_demo.max_documents.train"):
        from_mapping(IngestDemoConfig, {"max_documents": {"train": 0}}, "ingest_demo")
    with pytest.raises(ConfigError, match=r"ingest_demo.organisations.science"):
        from_mapping(IngestDemoConfig, {"organisations": {"science": []}}, "ingest_demo")


def test_the_flower_schedule_local_steps_replaces_rule_optimizer_and_rounds_only_on_flower() -> None:
    schedule = {"schedule": "local_steps", "local_steps": {"rule": "fedadam", "eta": 0.02, "steps": 8, "rounds": 30}}
    layer = {"normalization": "layer"}  # the code's default, batch, has no average over local steps
    config = TrainConfig.from_params({"max_steps": 2800, "batch_size": 16, "model": layer, "flower": schedule})
    assert config.rule == "fedsgd" and config.max_steps == 2800  # the in-process engine is untouched
    flower = config.flower_training()
    assert (flower.rule, flower.aggregation.eta, flower.aggregation.local_steps) == ("fedadam", 0.02, 8)
    assert (flower.optimizer.name, flower.optimizer.lr, flower.max_steps) == ("sgd", 0.01, 30)
    assert flower.batch_size == 16 and flower.model == config.model and flower.seed == config.seed
    assert flower.flower.schedule == "exact" and flower.flower_training() == flower  # what the nodes run, as is
    exact = config.replace(flower=config.flower.replace(schedule="exact"))
    assert exact.flower_training() == exact
    assert TrainConfig.from_params({}).flower.schedule == "exact"  # a block that names none (Word2Vec's) keeps exact


def test_a_flower_schedule_the_configuration_cannot_take_is_refused_before_any_node() -> None:
    """Local steps need a weights rule: with DP-SGD (FedSGD only) or pooled BatchNorm the Flower engine
    cannot take them, and the error says which setting to change, when the block is read."""
    flower = {"schedule": "local_steps"}
    sample_dp = {"dp": {"level": "sample", "noise_multiplier": 1.0}}
    with pytest.raises(ConfigError, match=r"'train.flower.schedule' is 'local_steps'.*DP-SGD.*schedule: exact"):
        TrainConfig.from_params(
            {"engine": "flower", "flower": flower, "model": {"normalization": "layer"}, "privacy": sample_dp}
        )
    with pytest.raises(ConfigError, match=r"'train.flower.schedule' is 'local_steps'.*BatchNorm"):
        TrainConfig.from_params({"engine": "flower", "flower": flower, "model": {"normalization": "pooled_batch"}})
    exact = TrainConfig.from_params(
        {"engine": "flower", "flower": {"schedule": "exact"}, "model": {"normalization": "layer"}, "privacy": sample_dp}
    )
    assert exact.flower_training().rule == "fedsgd"
    in_process = TrainConfig.from_params({"flower": flower, "model": {"normalization": "pooled_batch"}})
    assert in_process.engine == "in_process"  # the in-process engine never reads the schedule


# compare: each family's training block from the train block ------------------------------
def test_a_compared_family_keeps_the_train_model_keys_it_has_and_its_entry_replaces_whole_blocks() -> None:
    from fedtopic_pipelines.core.config import CompareConfig

    train = {"model": {"n_topics": 7, "hidden_sizes": [16]}, "optimizer": {"name": "adam", "lr": 0.01}, "max_steps": 9}
    compare = CompareConfig(
        families={
            "combinedtm": {},
            "nmf_exact": {"max_steps": 3},
            "nmf": {"optimizer": {"name": "adagrad"}, "model": {"inference_epochs": 2}},
        },
        scenarios=("federated",),
    )
    configs = compare.train_configs(train)
    assert configs["combinedtm"].model.hidden_sizes == (16,) and configs["combinedtm"].max_steps == 9
    assert configs["nmf_exact"].model.n_topics == 7 and configs["nmf_exact"].max_steps == 3
    nmf = configs["nmf"]
    assert (nmf.model.n_topics, nmf.model.inference_epochs, nmf.optimizer.name) == (7, 2, "adagrad")
    assert nmf.optimizer.lr == OptimizerConfig(name="adagrad").lr != 0.01  # the whole block replaced: no lr 0.01
    assert all(c.scenarios == ("federated",) and c.engine == "in_process" for c in configs.values())


@pytest.mark.parametrize(
    ("families", "refused"),
    [
        ({"hdp": {}}, r"'compare.families' names 'hdp'; registered families: \["),
        (
            {"word2vec": {}},
            r"'word2vec', which scores otherwise: it trains with `kedro run --pipelines=word2vec`",
        ),
        ({"nmf": {"optimizer": {"name": "adam"}}}, r"'compare.families.nmf'.*'train.optimizer.name' is 'adam'"),
        ({"prodlda": {"max_step": 3}}, r"unknown parameter 'compare.families.prodlda.max_step'"),
    ],
)
def test_a_compared_family_that_cannot_train_is_refused_by_its_entry(families: dict, refused: str) -> None:
    from fedtopic_pipelines.core.config import CompareConfig

    with pytest.raises(ConfigError, match=refused):
        CompareConfig(families=families).train_configs({})


def test_the_compare_block_refuses_a_repeated_scenario_and_an_empty_family_list() -> None:
    from fedtopic_pipelines.core.config import CompareConfig

    with pytest.raises(ConfigError, match="'compare.scenarios' repeats a scenario"):
        from_mapping(CompareConfig, {"scenarios": ["federated", "federated"]}, "compare")
    with pytest.raises(ConfigError, match=r"compare.families"):
        from_mapping(CompareConfig, {"families": {}}, "compare")


def test_a_family_outside_the_default_chain_says_which_pipeline_trains_it() -> None:
    from fedtopic_pipelines.core.config import MODEL_CONFIGS

    assert MODEL_CONFIGS["prodlda"].capabilities.trained_elsewhere() is None
    assert MODEL_CONFIGS["word2vec"].capabilities.trained_elsewhere() == (
        "it trains with `kedro run --pipelines=word2vec` from the 'word2vec.train' block (docs/word2vec.md)"
    )
    assert "--pipelines=pctd" in MODEL_CONFIGS["pctd"].capabilities.trained_elsewhere()
