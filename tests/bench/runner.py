"""Every benchmark runs in its smoke mode, so none can rot unnoticed (``make bench`` once failed for
weeks on a renamed parameter). Each is a real subprocess run of the script, as a user runs it; the
smoke tests are spread over several files so that pytest-xdist's workers share them."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import PROJECT

BENCH = PROJECT / "bench"


def run_bench(script: str, *args: str, timeout: float = 300) -> str:
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1", "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
    env.pop("KEDRO_ENV", None)
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done.stdout
