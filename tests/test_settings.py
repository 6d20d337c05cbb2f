"""Project settings: each corpus's artefacts under its own data root."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from fedtopic_pipelines.settings import CONFIG_LOADER_ARGS, ProjectConfigLoader, data_root
from tests.conftest import PROJECT

INPUTS = {"document_table", "wikipedia_dumps", "s2orc_records", "s2orc_pdf_parses", "text_archives", "demo_corpus"}


def _catalog(env: str | None, conf: Path = PROJECT / "conf") -> dict:
    return ProjectConfigLoader(str(conf), env=env, **CONFIG_LOADER_ARGS)["catalog"]


@pytest.mark.parametrize(
    ("env", "root"),
    [
        (None, "data"),
        ("local", "data"),
        ("wikipedia", "data/wikipedia"),
        ("sms_spam", "data/sms_spam"),
        ("smoke", "data"),
    ],
)
def test_an_environment_writes_under_its_own_root_the_demo_and_smoke_under_data(env, root) -> None:
    catalog = _catalog(env)
    assert catalog["common_vocabulary"]["filepath"] == f"{root}/05_model_input/vocabulary.parquet"
    assert catalog["compare_headline"]["path"] == f"{root}/08_reporting/compare/headline"
    # the inputs a user provides stay where the docs say, shared by every environment
    assert catalog["wikipedia_dumps"]["path"] == "data/01_raw/wikipedia"
    assert catalog["document_table"]["filepath"] == "data/01_raw/table/documents.csv"


def test_every_written_path_of_the_catalog_follows_the_root() -> None:
    """Every catalog entry but the inputs names its location through ``globals:data_root``."""
    raw = yaml.safe_load((PROJECT / "conf/base/catalog.yml").read_text())
    for name, entry in raw.items():
        if not isinstance(entry, dict) or name in INPUTS:
            continue
        inner = entry.get("dataset") if isinstance(entry.get("dataset"), dict) else {}
        where = entry.get("filepath") or entry.get("path") or inner.get("filepath") or inner.get("path")
        if where is None:  # not a file: an MLflow metrics dataset
            continue
        assert where.startswith("${globals:data_root}/"), (name, where)


def test_a_root_set_in_the_environments_globals_wins(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    shutil.copytree(PROJECT / "conf/base", conf / "base")
    (conf / "mine").mkdir()
    (conf / "mine/globals.yml").write_text("data_root: /srv/corpora/mine\n")
    (conf / "yours").mkdir()
    assert (
        _catalog("mine", conf)["common_vocabulary"]["filepath"] == "/srv/corpora/mine/05_model_input/vocabulary.parquet"
    )
    assert _catalog("yours", conf)["common_vocabulary"]["filepath"] == "data/yours/05_model_input/vocabulary.parquet"
    assert data_root(None) == data_root("local") == data_root("base") == "data"


def test_a_loader_resolves_its_own_root_after_another_loader_was_created() -> None:
    """OmegaConf's globals resolver is process-wide: the registry's and a hook's loaders, created
    after the session's, must not lend it their environment's root."""
    wikipedia = ProjectConfigLoader(str(PROJECT / "conf"), env="wikipedia", **CONFIG_LOADER_ARGS)
    ProjectConfigLoader(str(PROJECT / "conf"), env="base", **CONFIG_LOADER_ARGS)
    assert wikipedia["catalog"]["metrics"]["dataset"]["filepath"] == "data/wikipedia/08_reporting/metrics.json"
