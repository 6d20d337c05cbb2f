"""``flower-supernode`` whose ClientApps stay alive: rounds in seconds instead of tens of seconds.

    python -m fedtopic_pipelines.flower.supernode <flower-supernode arguments> --isolation process

Flower 1.41 runs every message in a fresh ``flwr-clientapp`` process (importing flwr,
torch and the app: seconds), and its SuperNode sleeps 3 s between polls when idle and
0.5 s while it waits for a reply. Neither is an option of 1.41 (its warm executor pools
serve only Kubernetes, and not ClientApps). This launcher keeps Flower's SuperNode, its
Fleet protocol to the SuperLink, TLS and node authentication, and changes three things:

* **the executor**: with ``--isolation process`` Flower expects an external executor on
  the SuperNode's runtime API. The one here is a thread of the SuperNode process that
  claims ClientApp tasks there and runs each in a thread of its own, in process, with the
  same steps as Flower's ``run_clientapp`` (task heartbeat, pull the task input and the
  message, call the ClientApp, push the reply and the task output), so the app is
  imported once. A thread per task, as Flower has a process per task: a task that waits
  for a message's arrays that never come (its run was stopped while the message arrived)
  must not hold up the next run's tasks;
* **the waits**: the SuperNode polls the SuperLink every ``FEDTOPIC_POLL_S`` (0.05 s) for
  ``FEDTOPIC_ACTIVE_S`` (30 s) after its last message, and every ``FEDTOPIC_IDLE_POLL_S``
  (1 s) once idle, instead of every 3 s; its waits on its own state (a reply being
  computed) last 10 ms instead of 0.5 s; object pulls start retrying after 10 ms instead of
  1 s. Every poll is an authenticated HTTPS request the SuperLink must serve: five nodes
  polling every 0.05 s kept half a core of the SuperLink busy while no run was going on;
* **replies that wait**: Flower's loop pushes a reply only after it received a message;
  a reply that is ready when nothing new came in is pushed at once.

These are patches of Flower 1.41 internals (``pyproject.toml`` pins ``flwr<1.42``); the
loopback tests, which compare the trained parameters with the in-process engine's, would
catch a Flower change that breaks them.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import os
import sys
import threading
import time
import types

import flwr.supernode.start_client_internal as supernode_loop
from flwr.supercore.inflatable import inflatable_utils

logger = logging.getLogger(__name__)


def seconds_from_env(name: str, default: float) -> float:
    """A duration from the environment; a value that is not a finite number >= 0 stops the
    SuperNode at start with the variable's name (a typo would otherwise be a bare ValueError)."""
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


POLL_S = seconds_from_env("FEDTOPIC_POLL_S", 0.05)
IDLE_POLL_S = seconds_from_env("FEDTOPIC_IDLE_POLL_S", 1.0)
ACTIVE_S = seconds_from_env("FEDTOPIC_ACTIVE_S", 30.0)
LOCAL_WAIT_S = 0.01  # a look at the node's own in-memory state: no request, no reason to wait long
FLOWER_IDLE_SLEEP_S = 3  # Flower 1.41's loop sleeps 3 s after an empty poll, 0.5 s in its local waits
NEW_TASK = threading.Event()
REPLY_WAITING = 0  # not a run id: tells Flower's loop to push the replies that are waiting
_last_message = [float("-inf")]  # time.monotonic() of the last message pulled from the SuperLink


def wait_seconds(requested: float, since_message: float, poll_s: float, idle_poll_s: float, active_s: float) -> float:
    """How long the SuperNode loop waits where Flower 1.41 sleeps ``requested`` seconds.

    Flower sleeps 3 s after an empty poll of the SuperLink; that becomes ``poll_s`` while a
    run is active (a message came less than ``active_s`` ago: the next round's message is
    due) and ``idle_poll_s`` otherwise. Its shorter sleeps wait on the node's own state.
    """
    if requested < FLOWER_IDLE_SLEEP_S:
        return min(requested, LOCAL_WAIT_S)
    return min(requested, poll_s if since_message < active_s else idle_poll_s)


def patch_waits(poll_s: float = POLL_S, idle_poll_s: float = IDLE_POLL_S, active_s: float = ACTIVE_S) -> None:
    """Shorten the SuperNode loop's sleeps and the object-pull backoff (both hard-coded in Flower 1.41)."""

    def sleep(seconds: float) -> None:
        time.sleep(wait_seconds(seconds, time.monotonic() - _last_message[0], poll_s, idle_poll_s, active_s))

    supernode_loop.time = types.SimpleNamespace(sleep=sleep)
    supernode_loop.pull_objects = functools.partial(
        inflatable_utils.pull_objects, initial_backoff=0.01, backoff_cap=1.0
    )
    pull_and_store = supernode_loop._pull_and_store_message

    def pull_store_and_wake(*args, **kwargs):
        run_id = pull_and_store(*args, **kwargs)
        if run_id is not None:
            _last_message[0] = time.monotonic()
            NEW_TASK.set()
            return run_id
        # Flower's loop pushes replies only right after it received a message, and then takes
        # whichever replies are there. A late reply of a stopped run (an error reply for a
        # task that ended after its run) thus takes the place of the next message's reply,
        # which would then wait for yet another message: a deadlock when the server waits for
        # it. Push any reply that is waiting, even when nothing new came in.
        return REPLY_WAITING if _reply_waiting(kwargs["state"]) else None

    supernode_loop._pull_and_store_message = pull_store_and_wake


def _reply_waiting(state) -> bool:
    """Whether a reply waits to be pushed; reads the in-memory NodeState without marking it
    retrieved (``get_messages_legacy`` would, and the push would then miss it)."""
    with state.lock_msg_store:
        return any(
            not entry.is_retrieved and entry.message.metadata.reply_to_message_id for entry in state.msg_store.values()
        )


def _task_heartbeat(client):
    """A claimed task's heartbeat, which Flower's ClientApp process sends: without it the
    SuperNode fails any task that runs over 60 s (a vocabulary stage on a large corpus).

    Flower's own heartbeat function signals SIGINT to its process when the task is gone;
    here that process is the SuperNode, so a refused heartbeat is only ignored.
    """
    import httpx
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


def _runtime_address(argv: list[str]) -> str:
    host, port = "127.0.0.1", "9094"  # flower-supernode's defaults for its runtime API
    for flag, value in itertools.pairwise(argv):
        if flag == "--host":
            host = "127.0.0.1" if value == "0.0.0.0" else value
        elif flag == "--port":
            port = value
    return f"{host}:{port}"


def _runtime_client(address: str, token: str | None = None):
    from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor, RuntimeVersionHttpInterceptor
    from flwr.supercore.runtime import RuntimeHttpClient

    interceptors = [RuntimeVersionHttpInterceptor(component_name="flwr-clientapp")]
    if token is not None:
        interceptors.append(RuntimeTokenHttpInterceptor(token))
    # No retry invoker: Flower's default one signals its own process on HTTP 401, which here is the SuperNode.
    return RuntimeHttpClient.from_server_address(
        server_address=address, insecure=True, root_certificates=None, interceptors=interceptors
    )


_APPS: dict[str, object] = {}  # FAB hash -> loaded ClientApp (imported once per process)
_APPS_LOCK = threading.Lock()  # tasks run in parallel threads; a FAB is installed once


def run_task(address: str, token: str) -> None:
    """One claimed ClientApp task: the steps of Flower's ``run_clientapp``, in this process."""
    from flwr.app import Error, Message
    from flwr.cli.install import install_from_fab
    from flwr.clientapp.utils import get_load_client_app_fn
    from flwr.common.constant import ErrorCode, SubStatus
    from flwr.common.serde import context_from_proto, fab_from_proto, run_from_proto
    from flwr.proto.node_pb2 import Node
    from flwr.proto.runtime_pb2 import PullAppMessagesRequest, PullTaskInputRequest
    from flwr.supercore.heartbeat import HeartbeatSender
    from flwr.supercore.inflatable.inflatable_protobuf_utils import (
        make_confirm_message_received_fn_protobuf,
        make_pull_object_fn_protobuf,
    )
    from flwr.supercore.inflatable.inflatable_utils import pull_and_inflate_object_from_tree
    from flwr.supercore.task_identity import TaskIdentity
    from flwr.supernode.runtime.run_clientapp import push_message, push_task_output

    client = _runtime_client(address, token)
    message = context = reply = None
    status, details = SubStatus.FAILED, "fedtopic executor: unknown failure"
    heartbeat = HeartbeatSender(_task_heartbeat(client))
    heartbeat.start()
    try:
        task = client.PullTaskInput(PullTaskInputRequest())
        TaskIdentity.task_id, TaskIdentity.run_id = task.task_id, task.run.run_id
        TaskIdentity.node_id = task.context.node_id
        context, run, fab = context_from_proto(task.context), run_from_proto(task.run), fab_from_proto(task.fab)
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
            initial_backoff=0.01,
            backoff_cap=1.0,
        )
        message.metadata.__dict__["_message_id"] = tree.object_id
        with _APPS_LOCK:
            app = _APPS.get(fab.hash_str)
            if app is None:
                install_from_fab(fab.content, skip_prompt=True)
                loader = get_load_client_app_fn(default_app_ref="", app_path=None, multi_app=True)
                app = _APPS[fab.hash_str] = loader(run.fab_id, run.fab_version, fab.hash_str)
        reply = app(message=message, context=context)
        status, details = SubStatus.COMPLETED, ""
    except Exception as exc:  # answer with an error reply, as Flower's own executor does
        logger.exception("ClientApp task failed")
        details = f"{type(exc).__name__}: {exc}"
        if message is not None:
            reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=details), reply_to=message)
    finally:
        try:
            if reply is not None and context is not None:
                push_message(client, reply, context)
        except Exception:
            logger.exception("could not push the reply")
        push_task_output(client=client, context=context, sub_status=status, details=details)
        heartbeat.stop()
        client.close()


def _run_logged(address: str, token: str) -> None:
    try:
        run_task(address, token)
    except Exception:  # the SuperNode reports the task as failed; the executor serves on
        logger.exception("ClientApp task could not be completed")


def serve(address: str, wake: threading.Event) -> None:
    """Claim and run ClientApp tasks for as long as the SuperNode lives."""
    import httpx
    from flwr.proto.runtime_pb2 import AcquireTaskRequest
    from flwr.supercore.constant import TaskType

    claimant = _runtime_client(address)
    request = AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP])
    while True:
        try:
            task = claimant.AcquireTask(request)
        except (httpx.TransportError, httpx.HTTPStatusError):
            time.sleep(0.2)  # the runtime API is not up yet
            continue
        if task.HasField("task") and task.token:
            name = f"fedtopic-clientapp-task-{task.task.task_id}"
            threading.Thread(target=_run_logged, args=(address, task.token), daemon=True, name=name).start()
            continue
        wake.wait(timeout=1.0)
        wake.clear()


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--isolation" not in argv or argv[argv.index("--isolation") + 1 :][:1] != ["process"]:
        raise SystemExit("python -m fedtopic_pipelines.flower.supernode needs '--isolation process'")
    patch_waits()
    threading.Thread(
        target=serve, args=(_runtime_address(argv), NEW_TASK), daemon=True, name="fedtopic-clientapp-executor"
    ).start()
    from flwr.supernode.cli import flower_supernode

    sys.argv = ["flower-supernode", *argv]
    flower_supernode()


if __name__ == "__main__":
    main()
