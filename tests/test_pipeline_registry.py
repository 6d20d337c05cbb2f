"""The registry builds only what a run asks for: ``--pipelines=ingest`` never imports torch."""

from __future__ import annotations

from tests.conftest import run_project_probe

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
    seen = run_project_probe(PROBE)
    assert seen["after_settings"] == [] and seen["after_ingest"] == []
    assert seen["ingest_is_demo"] and seen["default_is_chain"]
    assert {"__default__", "ingest", "preprocess", "train", "evaluate", "synthetic"} <= set(seen["names"])
    assert seen["after_all"] == ["matplotlib", "sklearn", "torch"]  # iterating builds every pipeline
