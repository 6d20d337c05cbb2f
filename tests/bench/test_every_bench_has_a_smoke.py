"""Every benchmark script has a smoke test in tests/bench/."""

from __future__ import annotations

from pathlib import Path

from tests.bench.runner import BENCH

HELPERS = {"common.py", "dumpgen.py", "ctm_runner.py"}  # not benchmarks: ctm_runner.py runs inside the reference's venv


def test_every_benchmark_script_has_a_smoke_test() -> None:
    """A script counts as tested when a smoke test runs it by name (``run_bench("<script>", ...)``)."""
    scripts = {p.name for p in BENCH.glob("*.py")} - HELPERS
    tests = "\n".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    untested = {s for s in scripts if f'run_bench("{s}"' not in tests and f'"{s}"' not in tests}
    assert not untested, untested
