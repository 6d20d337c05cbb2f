"""One run at a time per project folder; a killed holder never leaves the folder locked."""

import os
import signal
import subprocess
import sys

import pytest

from fedtopic_pipelines.core.runlock import ProjectBusyError, RunLock

HOLD = """
import sys, time
from fedtopic_pipelines.core.runlock import RunLock
lock = RunLock(sys.argv[1])
lock.acquire("kedro run, pipeline train@local")
print("held", flush=True)
time.sleep(120)
"""


def test_a_second_holder_is_refused_with_the_first_named_and_a_killed_holder_frees_the_folder(tmp_path) -> None:
    path = tmp_path / ".kedro-run.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ProjectBusyError) as caught:
            RunLock(path).acquire("kedro run, pipeline evaluate@local")
        message = str(caught.value)
        assert f"'kedro run, pipeline train@local' (pid {holder.pid} on " in message and str(path) in message
        os.kill(holder.pid, signal.SIGKILL)  # no clean-up of any kind runs
        holder.wait(timeout=30)
    finally:
        holder.kill()
    lock = RunLock(path)
    lock.acquire("kedro run, pipeline evaluate@local")  # not stuck
    assert lock.held and "evaluate@local" in path.read_text()
    lock.release()
    again = RunLock(path)
    again.acquire("next")
    again.release()
