"""Helpers for running pipeline slices in memory, Kedro-starter style."""

from __future__ import annotations

from typing import Any

from kedro.io import DataCatalog, MemoryDataset
from kedro.pipeline import Pipeline
from kedro.runner import SequentialRunner


def run_slice(pipeline: Pipeline, inputs: dict[str, Any]) -> dict[str, Any]:
    """Run ``pipeline`` on in-memory inputs; return every output's data."""
    catalog = DataCatalog({name: MemoryDataset(value) for name, value in inputs.items()})
    SequentialRunner().run(pipeline, catalog)
    names = pipeline.outputs() | {d for n in pipeline.nodes for d in n.outputs}
    return {name: catalog[name].load() for name in names if name in catalog}
