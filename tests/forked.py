"""Python commands the suite starts (``kedro run``, the benchmark scripts), each in its own process
forked from a server that imported torch, scipy, scikit-learn, pandas, MLflow, matplotlib and
gensim once (multiprocessing's forkserver). A fresh interpreter spent 5 to 7 CPU-s on those
imports before a command's first line of work (`kedro registry list`: 9 s fresh, 2.5 s forked);
the suite starts a few dozen such commands on two cores.

Each child is what the command line would run: its script as ``__main__`` with its arguments, in
its folder, with its environment, its output in files, the interpreter's exit handlers run at the
end (MLflow ends an open run there). The server imports libraries and computes nothing, so no
thread pool is forked. The project's own package is never preloaded: each command imports it
from the project it runs in (a test's copy has its own source tree).
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

PRELOAD = [
    "numpy",
    "scipy.sparse",
    "scipy.optimize",
    "scipy.stats",
    "pandas",
    "torch",
    "sklearn.linear_model",
    "sklearn.svm",
    "mlflow",
    "matplotlib.pyplot",
    "gensim",
]
_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(PRELOAD)


def _main(script: str, args: list[str], cwd: str, env: dict[str, str], out: str, err: str, own_dir: bool) -> None:
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    with open(out, "w") as o, open(err, "w") as e:
        os.dup2(o.fileno(), 1)
        os.dup2(e.fileno(), 2)
    sys.argv = [script, *args]
    if own_dir:  # as `python bench/x.py` puts the script's folder first
        sys.path.insert(0, str(Path(script).parent))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:  # as the interpreter does: None is 0, a message is printed and 1
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException:  # as the interpreter does: the traceback on stderr, exit status 1
        traceback.print_exc()
        code = 1
    finally:
        atexit._run_exitfuncs()  # a forked child skips them; the interpreter would run them
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def run_python(
    script: Path | str, args: list[str], cwd: Path, env: dict[str, str], timeout: float, own_dir: bool = False
) -> subprocess.CompletedProcess:
    """``script`` (a Python file: a benchmark, or a console script such as ``.venv/bin/kedro``) run
    with ``args`` in ``cwd`` under ``env``, forked from the preloaded server; what
    :func:`subprocess.run` with ``capture_output=True, text=True`` returns, or
    :class:`subprocess.TimeoutExpired` after killing it at ``timeout`` seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "out", Path(tmp) / "err"
        process = _CONTEXT.Process(
            target=_main, args=(str(script), list(args), str(cwd), dict(env), str(out), str(err), own_dir)
        )
        process.start()
        process.join(timeout)
        timed_out = process.is_alive()
        if timed_out:
            process.kill()
            process.join()
        stdout, stderr = out.read_text(), err.read_text()
    command = [str(script), *args]
    if timed_out:
        raise subprocess.TimeoutExpired(command, timeout, stdout, stderr)
    return subprocess.CompletedProcess(command, process.exitcode, stdout, stderr)
