"""experiments/ (and the parameter check above it) stay Kedro-free, like core/: importing them loads
no kedro, flwr or mlflow. Their import statements are held by lint-imports (tests/core/test_layers.py)."""

import subprocess
import sys

FORBIDDEN = {"kedro", "kedro_datasets", "kedro_mlflow", "flwr", "mlflow"}


def test_importing_the_experiments_loads_none_of_them() -> None:
    code = (
        "import sys, pkgutil, importlib, fedtopic_pipelines.experiments as e\n"
        "import fedtopic_pipelines.parameters\n"
        "for m in pkgutil.walk_packages(e.__path__, e.__name__ + '.'): importlib.import_module(m.name)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {sorted(FORBIDDEN)!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
