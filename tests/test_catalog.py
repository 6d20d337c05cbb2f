"""The catalog itself: a folder a dataset empties before writing holds no other dataset."""

from __future__ import annotations

from pathlib import PurePosixPath

import yaml

from tests.conftest import PROJECT


def _location(entry: dict) -> str | None:
    inner = entry.get("dataset") if isinstance(entry.get("dataset"), dict) else {}
    return entry.get("filepath") or entry.get("path") or inner.get("filepath") or inner.get("path")


def test_no_dataset_lies_in_a_folder_that_another_empties_before_writing() -> None:
    """A PartitionedDataset with ``overwrite: true`` deletes its folder's contents first: a dataset
    saved there earlier in the same run would be lost (fednmf's metrics.json once was)."""
    catalog = yaml.safe_load((PROJECT / "conf/base/catalog.yml").read_text())
    locations = {name: _location(entry) for name, entry in catalog.items() if isinstance(entry, dict)}
    emptied = {
        name: PurePosixPath(entry["path"])
        for name, entry in catalog.items()
        if isinstance(entry, dict) and entry.get("type") == "partitions.PartitionedDataset" and entry.get("overwrite")
    }
    assert emptied  # the check has something to check
    clashes = [
        (name, other)
        for name, folder in emptied.items()
        for other, where in locations.items()
        if other != name and where and folder in PurePosixPath(where).parents
    ]
    assert not clashes, clashes
