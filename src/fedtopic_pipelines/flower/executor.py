"""A long-lived ClientApp executor for a stock ``flower-supernode --isolation process``.

    python -m fedtopic_pipelines.flower.executor --runtime-api-address 127.0.0.1:9094 [--parent-pid PID]

With ``--isolation subprocess`` (Flower's default) the SuperNode starts a SuperExec that
runs every message in a fresh ``flwr-clientapp`` process, which imports flwr, torch and the
app first: seconds per message on 2 cores. ``--isolation process`` is Flower's extension
point for running ClientApps elsewhere: the SuperNode only offers its ClientApp tasks on
its Runtime API, and an executor outside the SuperNode process claims them. This is one:

* it polls ``AcquireTask`` on the Runtime API, as Flower's own ``flower-superexec`` does,
  every ``FEDTOPIC_POLL_S`` (0.05 s) for ``FEDTOPIC_ACTIVE_S`` (30 s) after its last task
  (the next round's message is due) and every ``FEDTOPIC_IDLE_POLL_S`` (1 s) once idle;
* it runs each claimed task in a thread of its own, with the steps of Flower's
  ``run_clientapp``: task heartbeat, pull the task input and the message, call the
  ClientApp, push the reply and the task output; an exception becomes an error reply. The
  ClientApp is loaded once per FAB hash and kept, so the app is imported once. A thread
  per task, as Flower has a process per task: a task that waits for a message's arrays
  that never come must not hold up the next run's tasks;
* it exits when the process ``--parent-pid`` names (its SuperNode) is gone.

It only speaks the Runtime API, with Flower's own client, protobuf messages and helpers;
it changes nothing inside Flower. It runs in a process of its own: the SuperNode's
authentication key stays in the SuperNode process, which never runs app code.

What it cannot change: the stock SuperNode sleeps 3 s after a poll of the SuperLink that
found no message, and waits for a reply in 0.5 s steps (docs/deployment.md, round latency).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
import psutil

logger = logging.getLogger(__name__)

CLIENTAPP_COMPONENT = "flwr-clientapp"  # the name the Runtime API's version check expects of a ClientApp
RETRY_S = 0.2  # the Runtime API is not up yet (the SuperNode is still starting)


def seconds_from_env(name: str, default: float) -> float:
    """A duration from the environment; a value that is not a finite number >= 0 stops the
    executor at start with the variable's name (a typo would otherwise be a bare ValueError)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"environment variable {name}={raw!r}: expected a number of seconds >= 0")
    return value


@dataclass(frozen=True)
class Polling:
    """How often the executor asks its SuperNode for a task."""

    poll_s: float = 0.05  # within active_s of the last task: the next round's message is due
    idle_poll_s: float = 1.0  # otherwise
    active_s: float = 30.0

    @classmethod
    def from_env(cls) -> Polling:
        return cls(
            poll_s=seconds_from_env("FEDTOPIC_POLL_S", cls.poll_s),
            idle_poll_s=seconds_from_env("FEDTOPIC_IDLE_POLL_S", cls.idle_poll_s),
            active_s=seconds_from_env("FEDTOPIC_ACTIVE_S", cls.active_s),
        )

    def wait_s(self, since_task: float) -> float:
        """Seconds to wait after an AcquireTask that found nothing, ``since_task`` seconds after the last task."""
        return self.poll_s if since_task < self.active_s else self.idle_poll_s


class Parent:
    """The SuperNode whose tasks the executor runs; ``alive`` turns False once it has exited.

    A pid alone could be reused by another process after the SuperNode exits, and a killed
    SuperNode stays a zombie until its own parent reaps it: both count as gone.
    """

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self._process = None
        if pid is not None:
            try:
                self._process = psutil.Process(pid)
            except psutil.NoSuchProcess:
                self._process = None

    def alive(self) -> bool:
        if self.pid is None:
            return True  # no parent named: serve until stopped
        if self._process is None:
            return False
        try:
            return self._process.is_running() and self._process.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False


RETRIED_STATUS = frozenset({502, 503, 504})


def transport_retries(max_tries: int = 6, max_time_s: float = 30.0):
    """Retry a Runtime API call that failed in transport, as Flower's own clients do.

    The SuperNode's Runtime API server (uvicorn) closes a keep-alive connection after 5 s
    idle; a task whose ClientApp computed longer then sends its reply on a closed connection
    and gets ``RemoteProtocolError`` ("Server disconnected without sending a response"),
    though the request never reached the server. Without a retry that reply is lost and the
    stock SuperNode waits for it forever (it pushes replies one message at a time). HTTP
    errors other than 502/503/504 are not retried, and nothing here signals the process
    (Flower's ``make_simple_http_retry_invoker`` sends SIGINT to its own process on HTTP 401,
    which here would stop every other task of the executor).
    """
    from flwr.supercore.retry import RetryInvoker, exponential

    def give_up(exc: Exception) -> bool:
        return isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code not in RETRIED_STATUS

    return RetryInvoker(
        lambda: exponential(base_delay=0.01, multiplier=2, max_delay=1),
        (httpx.TransportError, httpx.HTTPStatusError),
        max_tries=max_tries,
        max_time=max_time_s,
        jitter=None,
        should_giveup=give_up,
    )


def _runtime_client(address: str, token: str | None = None):
    """Flower's Runtime API client, as ``flwr-clientapp`` builds it (plain HTTP on loopback),
    with :func:`transport_retries`."""
    from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor, RuntimeVersionHttpInterceptor
    from flwr.supercore.runtime import RuntimeHttpClient

    interceptors = [RuntimeVersionHttpInterceptor(component_name=CLIENTAPP_COMPONENT)]
    if token is not None:
        interceptors.append(RuntimeTokenHttpInterceptor(token))
    return RuntimeHttpClient.from_server_address(
        server_address=address,
        insecure=True,
        root_certificates=None,
        interceptors=interceptors,
        retry_invoker=transport_retries(),
    )


def _task_heartbeat(client):
    """A claimed task's heartbeat, which Flower's ClientApp process sends: without it the
    SuperNode fails any task that runs over 60 s (a vocabulary stage on a large corpus).

    Flower's own heartbeat function signals SIGINT to its process when the task is gone;
    here that process serves other tasks too, so a refused heartbeat is only ignored.
    """
    from flwr.proto.runtime_pb2 import SendTaskHeartbeatRequest

    def beat() -> bool:
        try:
            client.SendTaskHeartbeat(SendTaskHeartbeatRequest())
        except httpx.TransportError:
            return False  # retried with backoff
        except httpx.HTTPStatusError:
            pass  # the task is gone (its run was stopped): nothing left to keep alive
        return True

    return beat


_APPS: dict[str, object] = {}  # FAB hash -> loaded ClientApp (imported once per process)
_APPS_LOCK = threading.Lock()  # tasks run in parallel threads; a FAB is installed once


def _client_app(run, fab):
    """The ClientApp of ``fab``, installed and loaded on its first task, then kept."""
    from flwr.cli.install import install_from_fab
    from flwr.clientapp.utils import get_load_client_app_fn

    with _APPS_LOCK:
        app = _APPS.get(fab.hash_str)
        if app is None:
            install_from_fab(fab.content, skip_prompt=True)
            loader = get_load_client_app_fn(default_app_ref="", app_path=None, multi_app=True)
            app = _APPS[fab.hash_str] = loader(run.fab_id, run.fab_version, fab.hash_str)
        return app


def _pull_task_message(client: Any, context: Any) -> Any:
    """The claimed task's message, arrays included, waiting for the SuperNode to store it (as Flower's pull does)."""
    from flwr.app import Message
    from flwr.proto.node_pb2 import Node
    from flwr.proto.runtime_pb2 import PullAppMessagesRequest
    from flwr.supercore.inflatable.inflatable_protobuf_utils import (
        make_confirm_message_received_fn_protobuf,
        make_pull_object_fn_protobuf,
    )
    from flwr.supercore.inflatable.inflatable_utils import pull_and_inflate_object_from_tree

    pulled = None
    for _ in range(2000):  # the SuperNode creates the task just before it stores the message
        pulled = client.PullMessages(PullAppMessagesRequest())
        if pulled.messages_list:
            break
        time.sleep(0.005)
    if pulled is None or not pulled.messages_list:
        raise RuntimeError("the SuperNode gave a task without a message")
    tree = pulled.message_object_trees[0]
    node = Node(node_id=context.node_id)
    message = pull_and_inflate_object_from_tree(
        tree,
        make_pull_object_fn_protobuf(client.PullObject, node, context.run_id),
        make_confirm_message_received_fn_protobuf(client.ConfirmMessageReceived, node, context.run_id),
        return_type=Message,
        initial_backoff=0.01,  # the SuperNode stores the arrays as it receives them: look again soon
        backoff_cap=1.0,
    )
    message.metadata.__dict__["_message_id"] = tree.object_id  # as Flower's pull_task_input does
    return message


def run_task(address: str, token: str) -> None:
    """One claimed ClientApp task: the steps of Flower's ``run_clientapp``, in this process.

    Flower's ``run_clientapp`` also sets ``TaskIdentity`` (one task per process there); it
    is read only when an app creates an instruction message, and a ClientApp creates only
    replies, which take their identity from the message they answer. Threads share a
    process, so it is not set here.
    """
    from flwr.app import Error, Message
    from flwr.clientapp.client_app import LoadClientAppError
    from flwr.common.constant import ErrorCode, SubStatus
    from flwr.common.serde import context_from_proto, fab_from_proto, run_from_proto
    from flwr.proto.runtime_pb2 import PullTaskInputRequest
    from flwr.supercore.heartbeat import HeartbeatSender
    from flwr.supernode.runtime.run_clientapp import push_message, push_task_output

    claimed = time.monotonic()
    client = _runtime_client(address, token)
    message = context = reply = None
    received = computed = None
    status, details = SubStatus.FAILED, "fedtopic executor: unknown failure"
    heartbeat = HeartbeatSender(_task_heartbeat(client))
    heartbeat.start()
    try:
        task = client.PullTaskInput(PullTaskInputRequest())
        context, run, fab = context_from_proto(task.context), run_from_proto(task.run), fab_from_proto(task.fab)
        message = _pull_task_message(client, context)
        received = time.monotonic()
        app = _client_app(run, fab)
        reply = app(message=message, context=context)
        computed = time.monotonic()
        status, details = SubStatus.COMPLETED, ""
    except Exception as exc:  # answer with an error reply, as Flower's own executor does
        logger.exception("ClientApp task failed")
        details = f"{type(exc).__name__}: {exc}"
        loading = isinstance(exc, LoadClientAppError)
        code = ErrorCode.LOAD_CLIENT_APP_EXCEPTION if loading else ErrorCode.CLIENT_APP_RAISED_EXCEPTION
        if message is not None:
            reply = Message(Error(code=code, reason=details), reply_to=message)
    finally:
        try:
            if reply is not None and context is not None:
                push_message(client, reply, context)
        except Exception:
            logger.exception("could not push the reply")
        push_task_output(client=client, context=context, sub_status=status, details=details)
        heartbeat.stop()
        client.close()
        if received is not None and computed is not None and message is not None:
            logger.info(
                "%s: message in %.3f s, ClientApp %.3f s, reply pushed in %.3f s",
                message.metadata.message_type,
                received - claimed,
                computed - received,
                time.monotonic() - computed,
            )


def _run_logged(address: str, token: str) -> None:
    try:
        run_task(address, token)
    except Exception:  # the SuperNode reports the task as failed; the executor serves on
        logger.exception("ClientApp task could not be completed")


def serve(address: str, polling: Polling, parent: Parent, stop: threading.Event | None = None) -> None:
    """Claim ClientApp tasks and start each in a thread, until ``parent`` is gone or ``stop`` is set."""
    from flwr.proto.runtime_pb2 import AcquireTaskRequest
    from flwr.supercore.constant import TaskType

    stop = threading.Event() if stop is None else stop
    claimant = _runtime_client(address)
    request = AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP])
    last_task = -math.inf  # time.monotonic() of the last task claimed
    unreachable_since: float | None = None
    try:
        while not stop.is_set():
            if not parent.alive():
                logger.info("SuperNode (pid %s) is gone: executor exits", parent.pid)
                return
            try:
                task = claimant.AcquireTask(request)
            except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                if unreachable_since is None:
                    unreachable_since = time.monotonic()
                    logger.info("Runtime API at %s not answering (%s); retrying", address, exc)
                stop.wait(RETRY_S)
                continue
            if unreachable_since is not None:
                logger.info("Runtime API at %s answers", address)
                unreachable_since = None
            if task.HasField("task") and task.token:
                last_task = time.monotonic()
                name = f"fedtopic-clientapp-task-{task.task.task_id}"
                threading.Thread(target=_run_logged, args=(address, task.token), daemon=True, name=name).start()
                continue  # another message may be waiting
            stop.wait(polling.wait_s(time.monotonic() - last_task))
    finally:
        claimant.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtime-api-address", required=True, help="the SuperNode's Runtime API, HOST:PORT")
    parser.add_argument("--parent-pid", type=int, default=None, help="exit once this process (the SuperNode) is gone")
    args = parser.parse_args(argv)
    try:
        polling = Polling.from_env()
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(threadName)s: %(message)s")
    for handler in logging.getLogger().handlers:  # Flower's logger prints its records itself
        handler.addFilter(lambda record: not record.name.startswith("flwr"))
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request: 20 a second while polling
    parent = Parent(args.parent_pid)
    logger.info(
        "executor for the SuperNode Runtime API at %s (parent pid %s); polls every %g s, %g s when idle for %g s",
        args.runtime_api_address,
        args.parent_pid,
        polling.poll_s,
        polling.idle_poll_s,
        polling.active_s,
    )
    serve(args.runtime_api_address, polling, parent)


if __name__ == "__main__":
    main()
