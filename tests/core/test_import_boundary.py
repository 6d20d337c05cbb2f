"""core/ is a plain library: it must not import kedro, flwr or mlflow."""

import ast
import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "src" / "fedtopic_pipelines" / "core"
FORBIDDEN = {"kedro", "kedro_datasets", "kedro_mlflow", "flwr", "mlflow"}


def test_no_forbidden_import_statement() -> None:
    offenders = []
    for path in CORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert not offenders


def test_importing_core_loads_none_of_them() -> None:
    code = (
        "import sys, pkgutil, importlib, fedtopic_pipelines.core as c\n"
        "for m in pkgutil.walk_packages(c.__path__, c.__name__ + '.'): importlib.import_module(m.name)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {sorted(FORBIDDEN)!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
