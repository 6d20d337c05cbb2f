"""Real processes on a temporary copy of the project, each test its own: a corpus of one's own
(a table, Wikipedia) through the whole chain, and runs that stop with a message. Apart from
tests/test_end_to_end.py (whose tests share one smoke run) so that the two files run on two
workers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import WORDS
from tests.test_end_to_end import BIN, _copy_project, _run, _run_failing

pytestmark = pytest.mark.slow


def test_bring_your_own_table_by_configuration_only(tmp_path: Path) -> None:
    project = _copy_project(tmp_path)
    rng = np.random.default_rng(0)
    rows = [
        {"content": " ".join(rng.choice(words.split(), 25)), "site": site, "topic": topic}
        for site, (topic, words) in zip(("north", "south", "east"), WORDS.items(), strict=True)
        for _ in range(60)
    ]
    (project / "data/01_raw/table").mkdir(parents=True)
    pd.DataFrame(rows).to_json(project / "data/01_raw/table/sites.jsonl", orient="records", lines=True)
    env_dir = project / "conf" / "mycorpus"
    env_dir.mkdir()
    (env_dir / "parameters.yml").write_text(
        "corpus: table\norganisations: [north, south, east]\n"
        "ingest_table: {text_column: content, organisation_column: site, label_column: topic}\n"
        "preprocess: {min_df: 2, max_df: 0.95}\n"
        # three sites with disjoint words: the consensus floors (a term of >= 2 organisations) would empty it,
        # and so would the vocabulary's k (privacy.vocab_k: 2, the configured default)
        "vocab_consensus: {top_n: 100, min_count: 1, min_organisations: 1, min_total_count: 0}\n"
        "privacy: {vocab_k: 1}\n"
        "train: {model: {n_topics: 3, hidden_sizes: [16]}, batch_size: 16, max_steps: 10}\n"
        "evaluate: {coherence_measures: [c_npmi]}\n"
    )
    (env_dir / "catalog.yml").write_text(
        "document_table:\n  type: fedtopic_pipelines.datasets.DocumentTableDataset\n"
        "  filepath: data/01_raw/table/sites.jsonl\n"
    )
    _run([str(BIN / "kedro"), "run", "--env=mycorpus"], project)
    metrics = json.loads((project / "data/mycorpus/08_reporting/metrics.json").read_text())
    assert set(metrics["models"]["federated"]["organisations"]) == {"north", "south", "east"}
    # a missing text column stops with the file and parameter named
    (env_dir / "parameters.yml").write_text((env_dir / "parameters.yml").read_text().replace("content", "body"))
    output = _run_failing([str(BIN / "kedro"), "run", "--env=mycorpus", "--pipelines=ingest"], project)
    assert "sites.jsonl' has no column 'body'" in output


def test_wikipedia_corpus_out_of_the_box_through_the_whole_chain(tmp_path: Path) -> None:
    """`corpus: wikipedia` with no dump present: gensim's real fragment, then preprocess ... evaluate."""
    project = _copy_project(tmp_path)
    env_dir = project / "conf" / "wikismoke"
    env_dir.mkdir()
    smoke = (project / "conf/smoke/parameters.yml").read_text().split("synthetic:")[0]
    (env_dir / "parameters.yml").write_text(
        (project / "conf/wikipedia/parameters.yml").read_text().split("preprocess:")[0]
        + smoke.replace("preprocess:\n  min_df: 2", "preprocess:\n  min_df: 1\n  max_df: 0.9")
        + "ingest_wikipedia: {processes: 2}\n"
    )
    _run([str(BIN / "kedro"), "run", "--env=wikismoke"], project)
    # an environment without its own globals.yml writes under data/<env>/, apart from the demo's data/
    report = json.loads((project / "data/wikismoke/08_reporting/ingestion_wikipedia.json").read_text())
    assert not (project / "data/08_reporting/metrics.json").exists()
    assert report["documents_read"] == 206 and report["dropped"]["redirect"] == 100
    assert report["resumed_units"] == 0
    metrics = json.loads((project / "data/wikismoke/08_reporting/metrics.json").read_text())
    orgs = {"biology", "finance", "geography", "history", "sports"}
    assert set(metrics["models"]["federated"]["organisations"]) == orgs
    # one shard per work unit that kept biology articles, named in order, holding all of them
    shards = sorted((project / "data/wikismoke/01_raw/organisations/biology").iterdir())
    assert [p.name for p in shards] == [f"part-{k:05d}.parquet" for k in range(len(shards))]
    assert 1 <= len(shards) <= report["units"]
    assert sum(len(pd.read_parquet(p)) for p in shards) == sum(report["kept"]["biology"].values())
    # a second run resumes: finished units are not parsed again
    _run([str(BIN / "kedro"), "run", "--env=wikismoke", "--pipelines=ingest_wikipedia"], project)
    again = json.loads((project / "data/wikismoke/08_reporting/ingestion_wikipedia.json").read_text())
    assert again["resumed_units"] == again["units"] == report["units"]
    assert again["kept"] == report["kept"]
    # organisations that do not match the rules are named before anything runs
    params = env_dir / "parameters.yml"
    params.write_text(params.read_text().replace("[biology, finance,", "[finance, biology,"))
    output = _run_failing([str(BIN / "kedro"), "run", "--env=wikismoke"], project)
    assert "(same names, same order) for corpus 'wikipedia'" in output


def test_a_pipeline_whose_input_is_missing_says_which_pipeline_to_run_without_a_traceback(tmp_path: Path) -> None:
    project = _copy_project(tmp_path)
    output = _run_failing([str(BIN / "kedro"), "run", "--env=smoke", "--pipelines=evaluate"], project)
    assert "kedro run refused (MissingInputError): trained_models: no trained models at" in output
    assert "run the train pipeline first" in output and "Traceback" not in output


def test_unknown_scenario_stops_the_run_naming_the_parameter(tmp_path: Path) -> None:
    project = _copy_project(tmp_path)
    (project / "conf/smoke/parameters.yml").write_text(
        (project / "conf/smoke/parameters.yml")
        .read_text()
        .replace("\ntrain:\n", "\ntrain:\n  scenarios: [fedrated]\n", 1)
    )
    output = _run_failing([str(BIN / "kedro"), "run", "--env=smoke", "--pipelines=train"], project)
    assert "parameter 'train.scenarios[0]' is 'fedrated'" in output
    # a misspelt block is named before anything runs
    output = _run_failing([str(BIN / "kedro"), "run", "--env=smoke", "--params=trian.max_steps=5"], project)
    assert "unknown parameter block(s) ['trian']" in output
    assert "kedro run refused (ConfigError): " in output and "Traceback" not in output  # a message, no traceback
    # the organisations shape the pipelines: they come from an environment, not --params
    output = _run_failing([str(BIN / "kedro"), "run", "--pipelines=train", "--params=corpus=table"], project)
    assert "parameter 'corpus' cannot be changed with --params" in output
