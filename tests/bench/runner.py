"""Every benchmark runs in its smoke mode, so none can rot unnoticed (``make bench`` once failed for
weeks on a renamed parameter). Each is its own process running the script as ``__main__`` with the
user's command line; the processes are forked from a server that imported torch, scipy,
scikit-learn and pandas once (multiprocessing's forkserver: it runs no computation, so no thread
pool is forked), which spares each script those imports. The smoke tests are spread over several
files so that pytest-xdist's workers share them."""

from __future__ import annotations

import multiprocessing
import os
import runpy
import sys
import tempfile
from pathlib import Path

from tests.conftest import PROJECT

BENCH = PROJECT / "bench"
PRELOAD = ["numpy", "scipy.sparse", "scipy.optimize", "pandas", "torch", "sklearn.linear_model", "sklearn.svm"]
_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(PRELOAD)


def _main(script: str, args: list[str], env: dict[str, str], out: str, err: str) -> None:
    os.environ.clear()
    os.environ.update(env)
    os.chdir(PROJECT)
    with open(out, "w") as o, open(err, "w") as e:
        os.dup2(o.fileno(), 1)
        os.dup2(e.fileno(), 2)
    sys.argv = [script, *args]
    sys.path.insert(0, str(Path(script).parent))  # as `python bench/x.py` puts the script's folder first
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:  # as the interpreter does: None is 0, a message is printed and 1
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def run_bench(script: str, *args: str, timeout: float = 300) -> str:
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1", "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
    env.pop("KEDRO_ENV", None)
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "out", Path(tmp) / "err"
        process = _CONTEXT.Process(target=_main, args=(str(BENCH / script), list(args), env, str(out), str(err)))
        process.start()
        process.join(timeout)
        timed_out = process.is_alive()
        if timed_out:
            process.kill()
            process.join()
        stdout, stderr = out.read_text(), err.read_text()
    assert not timed_out, f"{script} ran past {timeout} s and was killed\n" + stdout[-3000:] + stderr[-5000:]
    assert process.exitcode == 0, stdout[-3000:] + stderr[-5000:]
    return stdout
