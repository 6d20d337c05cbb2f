"""The ClientApp executor's polling, its environment and its exit with the SuperNode
(``flower/executor.py``); the tasks it runs are exercised by the loopback tests."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time

import pytest

from fedtopic_pipelines.flower import executor
from fedtopic_pipelines.flower.executor import Parent, Polling, seconds_from_env, serve

POLLING = Polling(poll_s=0.05, idle_poll_s=1.0, active_s=30.0)


@pytest.mark.parametrize(
    ("since_task", "expected"),
    [
        (0.0, 0.05),  # a task just came: the next round's message is due
        (29.9, 0.05),
        (30.0, 1.0),  # nothing for active_s: ask the SuperNode less often
        (math.inf, 1.0),  # no task yet since the executor started
    ],
)
def test_polls_fast_only_while_a_run_is_active(since_task: float, expected: float) -> None:
    assert POLLING.wait_s(since_task) == expected


def test_the_defaults_are_the_documented_ones(monkeypatch) -> None:
    for name in ("FEDTOPIC_POLL_S", "FEDTOPIC_IDLE_POLL_S", "FEDTOPIC_ACTIVE_S"):
        monkeypatch.delenv(name, raising=False)
    assert Polling.from_env() == Polling(poll_s=0.05, idle_poll_s=1.0, active_s=30.0)
    monkeypatch.setenv("FEDTOPIC_IDLE_POLL_S", "2.5")
    monkeypatch.setenv("FEDTOPIC_ACTIVE_S", "0")
    assert Polling.from_env() == Polling(poll_s=0.05, idle_poll_s=2.5, active_s=0.0)


@pytest.mark.parametrize("raw", ["0.05s", "-1", "nan", "inf", ""])
def test_a_bad_wait_in_the_environment_names_the_variable(monkeypatch, raw: str) -> None:
    monkeypatch.setenv("FEDTOPIC_POLL_S", raw)
    with pytest.raises(ValueError, match=r"FEDTOPIC_POLL_S=.*seconds >= 0"):
        seconds_from_env("FEDTOPIC_POLL_S", 0.05)


def test_waits_come_from_the_environment_or_default(monkeypatch) -> None:
    monkeypatch.delenv("FEDTOPIC_ACTIVE_S", raising=False)
    assert seconds_from_env("FEDTOPIC_ACTIVE_S", 30.0) == 30.0
    monkeypatch.setenv("FEDTOPIC_ACTIVE_S", "0.5")
    assert seconds_from_env("FEDTOPIC_ACTIVE_S", 30.0) == 0.5


def test_a_bad_wait_stops_the_executor_at_start_naming_the_variable() -> None:
    args = [sys.executable, "-m", "fedtopic_pipelines.flower.executor", "--runtime-api-address", "127.0.0.1:9"]
    env = {"FEDTOPIC_IDLE_POLL_S": "1s", "PATH": ""}
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 2
    assert "FEDTOPIC_IDLE_POLL_S='1s'" in done.stderr


def test_a_parent_that_exited_is_gone_even_as_an_unreaped_zombie() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    parent = Parent(child.pid)
    deadline = time.monotonic() + 30
    while parent.alive() and time.monotonic() < deadline:  # not reaped yet: a zombie until wait()
        time.sleep(0.05)
    assert not parent.alive()
    child.wait()
    assert not parent.alive()  # reaped (its pid may even be reused by now)
    assert Parent(None).alive()  # no parent named: serve until stopped


class FakeRuntime:
    """Counts AcquireTask calls; never has a task."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def AcquireTask(self, request):  # Flower's method name
        from flwr.proto.runtime_pb2 import AcquireTaskResponse

        self.calls.append(time.monotonic())
        return AcquireTaskResponse()

    def close(self) -> None:
        pass


def test_serve_polls_at_the_idle_rate_and_returns_once_the_parent_is_gone(monkeypatch) -> None:
    runtime = FakeRuntime()
    monkeypatch.setattr(executor, "_runtime_client", lambda address, token=None: runtime)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        worker = threading.Thread(target=serve, args=("fake", Polling(0.01, 0.1, 0.0), Parent(child.pid)))
        worker.start()
        time.sleep(1.0)
        calls_while_alive = len(runtime.calls)
        child.kill()
        worker.join(timeout=5)
    finally:
        child.kill()
        child.wait()
    assert not worker.is_alive(), "serve() must return once its SuperNode is gone"
    # idle: about every 0.1 s (10 calls), not every 0.01 s (100); wide bounds for a busy machine
    assert 2 <= calls_while_alive <= 30, calls_while_alive


def test_runtime_calls_are_retried_after_a_closed_keep_alive_connection_but_not_after_a_refusal() -> None:
    """A reply pushed on a connection the SuperNode closed while the ClientApp computed (its
    server drops keep-alive connections idle for 5 s) must not be lost: the stock SuperNode
    would wait for it forever. An HTTP refusal is not retried, and nothing signals the process."""
    import httpx

    from fedtopic_pipelines.flower.executor import transport_retries

    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return "pushed"

    assert transport_retries().invoke(flaky) == "pushed" and len(calls) == 3
    request = httpx.Request("POST", "http://127.0.0.1/x")
    refused = httpx.HTTPStatusError("401", request=request, response=httpx.Response(401, request=request))
    tries = []

    def unauthorised():
        tries.append(1)
        raise refused

    with pytest.raises(httpx.HTTPStatusError):
        transport_retries().invoke(unauthorised)
    assert len(tries) == 1
