"""Every benchmark runs in its smoke mode, so none can rot unnoticed (``make bench`` once failed for
weeks on a renamed parameter). Each is its own process running the script as ``__main__`` with the
user's command line, forked from the suite's preloaded server (tests/forked.py), which spares each
script the imports of torch, scipy and scikit-learn. The smoke tests are spread over several files
so that pytest-xdist's workers share them."""

from __future__ import annotations

import os
import subprocess

from tests.conftest import PROJECT
from tests.forked import run_python

BENCH = PROJECT / "bench"


def run_bench(script: str, *args: str, timeout: float = 300) -> str:
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1", "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
    env.pop("KEDRO_ENV", None)
    try:
        result = run_python(BENCH / script, list(args), PROJECT, env, timeout, own_dir=True)
    except subprocess.TimeoutExpired as late:
        printed = (late.stdout or "")[-3000:] + (late.stderr or "")[-5000:]
        raise AssertionError(f"{script} ran past {timeout} s and was killed\n{printed}") from None
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result.stdout
