"""The registry builds only what a run asks for: ``--pipeline=ingest`` never imports torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import PROJECT

PROBE = """
import json, sys
from kedro.framework.startup import bootstrap_project
bootstrap_project(PROJECT_PATH)  # reads settings.py, hence hooks.py
after_settings = sorted(m for m in ("torch", "sklearn", "matplotlib") if m in sys.modules)
from fedtopic_pipelines.pipeline_registry import register_pipelines, DEFAULT_CHAIN
pipelines = register_pipelines()
ingest = pipelines["ingest"]
after_ingest = sorted(m for m in ("torch", "sklearn", "matplotlib") if m in sys.modules)
chain = set()
for name in DEFAULT_CHAIN:
    chain |= {n.name for n in pipelines[name].nodes}
print(json.dumps({
    "after_settings": after_settings,
    "after_ingest": after_ingest,
    "ingest_is_demo": ingest is pipelines["ingest_demo"],
    "default_is_chain": {n.name for n in pipelines["__default__"].nodes} == chain,
    "names": sorted(pipelines),
    "after_all": sorted(m for m in ("torch", "sklearn", "matplotlib") if m in sys.modules),
}))
"""


def test_ingest_imports_neither_torch_nor_sklearn_and_default_is_the_whole_chain() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE.replace("PROJECT_PATH", repr(str(PROJECT)))],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**{k: v for k, v in os.environ.items() if k != "KEDRO_ENV"}, "KEDRO_DISABLE_TELEMETRY": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["after_settings"] == [] and seen["after_ingest"] == []
    assert seen["ingest_is_demo"] and seen["default_is_chain"]
    assert {"__default__", "ingest", "preprocess", "train", "evaluate", "synthetic"} <= set(seen["names"])
    assert seen["after_all"] == ["matplotlib", "sklearn", "torch"]  # iterating builds every pipeline
