"""The test files' order under pytest-xdist: the longest files start first (tests/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import pytest_collection_modifyitems


@dataclass
class _Item:
    path: Path
    name: str
    slow: bool = False

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "slow" and self.slow else None


def test_files_with_more_slow_tests_come_first_each_file_whole_and_in_order() -> None:
    a, b, c = Path("tests/test_a.py"), Path("tests/test_b.py"), Path("tests/test_c.py")
    items = [
        _Item(a, "a1"),
        _Item(a, "a2"),
        _Item(b, "b1", slow=True),
        _Item(c, "c1", slow=True),
        _Item(b, "b2"),
        _Item(c, "c2", slow=True),
        _Item(b, "b3", slow=True),
        _Item(a, "a3", slow=True),
    ]
    pytest_collection_modifyitems(None, items)  # type: ignore[arg-type]
    # c and b: two slow tests each, c collected after b; a: one
    assert [i.name for i in items] == ["b1", "b2", "b3", "c1", "c2", "a1", "a2", "a3"]


def test_xdist_keeps_that_order(request: pytest.FixtureRequest) -> None:
    """xdist's default reorders the files by their number of tests, undoing the hook."""
    if not request.config.pluginmanager.hasplugin("xdist"):
        pytest.skip("pytest-xdist is not loaded (-p no:xdist)")
    assert request.config.getoption("loadscopereorder") is False
