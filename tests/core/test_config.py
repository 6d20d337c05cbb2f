import pytest

from fedtopic_pipelines.core.config import ConfigError, ConsensusConfig, PreprocessConfig, TrainConfig, from_mapping


def test_unknown_scenario_is_named() -> None:
    with pytest.raises(ConfigError, match=r"train.scenarios.*'federatd'"):
        TrainConfig.from_params({"scenarios": ["federatd"]})


def test_unknown_model_is_named() -> None:
    with pytest.raises(ConfigError, match=r"train.model_name.*'lda'"):
        TrainConfig.from_params({"model_name": "lda"})


def test_unknown_merge_is_named() -> None:
    with pytest.raises(ConfigError, match=r"vocab_consensus.merge.*'union_all'"):
        from_mapping(ConsensusConfig, {"merge": "union_all"}, "vocab_consensus")


def test_unknown_key_is_named() -> None:
    with pytest.raises(ConfigError, match=r"train.model.n_topic"):
        TrainConfig.from_params({"model": {"n_topic": 5}})


def test_nested_blocks_are_parsed() -> None:
    config = TrainConfig.from_params({"model": {"n_topics": 7, "hidden_sizes": [10]}, "optimizer": {"lr": 0.1}})
    assert config.model.n_topics == 7
    assert config.model.hidden_sizes == (10,)
    assert config.optimizer.lr == 0.1


def test_preprocess_ranges() -> None:
    with pytest.raises(ConfigError, match="preprocess.max_df"):
        PreprocessConfig(max_df=0)


def test_ingest_blocks_reject_unknown_keys_and_bad_caps() -> None:
    from fedtopic_pipelines.core.config import IngestDemoConfig, IngestTableConfig

    with pytest.raises(ConfigError, match=r"ingest_table.label_colum"):
        from_mapping(IngestTableConfig, {"label_colum": "topic"}, "ingest_table")
    with pytest.raises(ConfigError, match=r"ingest_demo.max_documents.train"):
        from_mapping(IngestDemoConfig, {"max_documents": {"train": 0}}, "ingest_demo")
    with pytest.raises(ConfigError, match=r"ingest_demo.organisations.science"):
        from_mapping(IngestDemoConfig, {"organisations": {"science": []}}, "ingest_demo")
