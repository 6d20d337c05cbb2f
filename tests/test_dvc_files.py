"""Every dvc.yaml of the project names sources that exist and parameters that are set, read
without DVC (fast): a renamed module or parameter key breaks this before a `dvc repro` does."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

PROJECT = Path(__file__).resolve().parents[1]
FILES = sorted([PROJECT / "dvc.yaml", *(PROJECT / "experiments").glob("*/dvc.yaml")])


def _stages(path: Path):
    for name, stage in yaml.safe_load(path.read_text())["stages"].items():
        yield name, stage, (path.parent / stage.get("wdir", ".")).resolve()


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PROJECT)))
def test_every_stage_reads_sources_that_exist_and_parameters_that_are_set(path: Path) -> None:
    for name, stage, root in _stages(path):
        for dep in stage.get("deps", []):
            if dep.startswith(("data/", ".cache/")):  # another stage's output, or what `make install` fetches
                continue
            assert (root / dep).exists(), f"{path.name} stage '{name}': dependency '{dep}' does not exist"
        for entry in stage.get("params", []):
            for file, keys in entry.items() if isinstance(entry, dict) else [("params.yaml", [entry])]:
                values = yaml.safe_load((root / file).read_text())
                for key in keys:
                    value = values
                    for part in key.split("."):
                        assert isinstance(value, dict) and part in value, (
                            f"{path.name} stage '{name}': {file} has no '{key}'"
                        )
                        value = value[part]
