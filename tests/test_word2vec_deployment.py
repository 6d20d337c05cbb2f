"""Word2Vec's federated scenario on a real loopback federation (SuperLink and SuperNodes with TLS
and node authentication) through `kedro run --pipeline=word2vec`: equal to the in-process engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import PROJECT
from tests.test_end_to_end import BIN, _copy_project, _run

pytestmark = [pytest.mark.slow, pytest.mark.deployment]
ORGS = ["computers", "recreation", "science", "politics_religion", "misc_forsale"]


def test_word2vec_engine_switch_trains_on_flower_equal_to_in_process(tmp_path: Path) -> None:
    from fedtopic_pipelines.core.model_store import load_models
    from fedtopic_pipelines.flower.deployment import LocalFederation

    project = _copy_project(tmp_path / "project")
    kedro = str(BIN / "kedro")
    _run([kedro, "run", "--env=smoke", "--pipelines=ingest,preprocess,vocab_consensus"], project)
    wheel = PROJECT / ".cache/benchmarks/hyperhyper-0.3.0-py3-none-any.whl"  # make install's
    steps = (
        "word2vec.train.max_steps=4,word2vec.train.scenarios=[federated],word2vec.reference=none,"
        f"word2vec.evaluate.benchmarks_wheel={wheel}"
    )
    _run([kedro, "run", "--env=smoke", "--pipeline=word2vec", f"--params={steps}"], project)
    history_file = project / "data/07_model_output/word2vec/training_history.json"
    reference = load_models(project / "data/06_models/word2vec_models")["federated"]
    in_process = json.loads(history_file.read_text())["federated"]
    data = {org: project / "data/01_raw/organisations" / org for org in ORGS}
    with LocalFederation(tmp_path / "federation", data) as federation:
        flower = f"{steps},word2vec.train.engine=flower,word2vec.train.flower.federation_dir={federation.root}"
        _run([kedro, "run", "--env=smoke", "--pipeline=word2vec", f"--params={flower}"], project)
    model = load_models(project / "data/06_models/word2vec_models")["federated"]
    assert set(model.state) == set(reference.state) == {"input", "output"}
    worst = max(float((model.state[k] - reference.state[k]).abs().max()) for k in reference.state)
    assert worst == 0.0, f"max abs difference Flower vs in-process: {worst}"
    history = json.loads(history_file.read_text())["federated"]
    assert history["engine"] == "flower" and in_process["engine"] == "in_process"
    assert sorted(history["flower_run"]["nodes"]) == sorted(ORGS)
    assert history["loss"] == in_process["loss"] and len(history["loss"]) == 4
    # the server received the same sparse updates as in process, below the dense tables' bytes
    # (barely, at the smoke vocabulary: a batch touches most rows); that the Flower records carry
    # rows and not tables is tests/flower/test_records.py
    assert history["bytes_sent"] == in_process["bytes_sent"]
    assert all(sent < dense for sent, dense in zip(history["bytes_sent"], history["bytes_dense"], strict=True))
