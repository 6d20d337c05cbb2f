"""core/ imports one way down: the import-linter contracts of pyproject.toml hold, and they bite.

The contracts (``[tool.importlinter]``; docs/architecture.md, "Layers") are checked on the
real tree, and on a copy of the package with one bad import planted, which must fail: an
upward import hidden inside a function, an import of Kedro, a new module on no layer, a
cycle between two modules of one package, core/ reaching up into the experiments, and the
experiments importing Kedro.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "fedtopic_pipelines"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(src: Path, config: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` over the package found in ``src`` (only there: not an installed copy)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(config), "--no-cache"],
        cwd=src.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_tree_keeps_every_contract() -> None:
    result = lint_imports(PACKAGE.parent, ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "0 broken" in result.stdout


PLANTED = {
    # text/ (floor 2) reaching the scenarios (floor 5), lazily as the old cycle did
    "upward": (
        "core/text/tokenize.py",
        "\n\ndef _planted():\n    from fedtopic_pipelines.core.training import train_scenarios\n\n"
        "    return train_scenarios\n",
        "core imports one way down BROKEN",
    ),
    "kedro": (
        "core/config/base.py",
        "\nimport kedro  # noqa: F401\n",
        "core imports neither kedro, flwr, mlflow nor the glue around it BROKEN",
    ),
    "unplaced": ("core/helpers.py", '"""A module on no layer."""\n', "core imports one way down BROKEN"),
    # inside one layer's package: the engine's messages importing the engine, which imports them
    "cycle": (
        "core/federated/messages.py",
        "\nfrom fedtopic_pipelines.core.federated import engine  # noqa: E402, F401\n",
        "no cycle between the packages and modules of core BROKEN",
    ),
    # the library reaching up for a paper's run configuration
    "experiments": (
        "core/training.py",
        "\nfrom fedtopic_pipelines.experiments.config import PCTDRunConfig  # noqa: E402, F401\n",
        "the library, its experiments and the parameter check import one way down BROKEN",
    ),
    "experiments_kedro": (
        "experiments/pctd.py",
        "\nimport kedro  # noqa: E402, F401\n",
        "experiments and parameters import no kedro, flwr, mlflow nor the glue BROKEN",
    ),
}


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_a_planted_bad_import_breaks_a_contract(tmp_path: Path, case: str) -> None:
    copy = tmp_path / "src" / "fedtopic_pipelines"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    path, code, broken = PLANTED[case]
    target = copy / path
    target.write_text((target.read_text() if target.exists() else "") + code)
    result = lint_imports(tmp_path / "src", tmp_path / "pyproject.toml")
    assert result.returncode != 0
    assert broken in result.stdout, result.stdout[-3000:]
