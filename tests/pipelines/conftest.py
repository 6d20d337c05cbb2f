"""Helpers for running pipeline slices in memory, Kedro-starter style."""

from __future__ import annotations

from typing import Any

from kedro.io import DataCatalog, MemoryDataset
from kedro.pipeline import Pipeline
from kedro.runner import SequentialRunner


class KeptMemoryDataset(MemoryDataset):
    """A MemoryDataset the runner cannot release, so tests can read intermediate outputs."""

    def _release(self) -> None:
        pass


def run_slice(pipeline: Pipeline, inputs: dict[str, Any]) -> dict[str, Any]:
    """Run ``pipeline`` on in-memory inputs; return the data of every dataset it wrote."""
    written = {d for n in pipeline.nodes for d in n.outputs}
    datasets = {name: KeptMemoryDataset(value) for name, value in inputs.items()}
    datasets.update({name: KeptMemoryDataset() for name in written})
    catalog = DataCatalog(datasets)
    SequentialRunner().run(pipeline, catalog)
    return {name: catalog[name].load() for name in written}
