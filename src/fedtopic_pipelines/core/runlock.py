"""One run at a time in a project folder.

Two runs in one folder write the same ``data/`` paths: one run's vocabulary ends up beside
the other's bags of words and models. A run therefore holds an exclusive ``flock`` on a file
in the folder for as long as it runs. The kernel drops the lock when the holding process
ends however it ends (SIGKILL, a crash, power loss), so a killed run never leaves the folder
locked; the owner written into the file is only read to say who holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import IO, Any


class ProjectBusyError(RuntimeError):
    """Another live process holds the project folder's run lock."""


class RunLock:
    """An exclusive, non-blocking lock on ``path`` that records its owner in the file."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._handle: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._handle is not None

    def acquire(self, description: str) -> None:
        """Take the lock for this process, or raise :class:`ProjectBusyError` naming its holder."""
        if self._handle is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = self.path.open("a+", encoding="utf-8")  # "a+": opening never wipes the holder's note
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = read_owner(handle)
            handle.close()
            raise ProjectBusyError(busy_message(self.path, holder)) from None
        except BaseException:
            handle.close()
            raise
        owner = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "run": description,
        }
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(owner))
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        """Let the next run in; the owner note stays (it is only read while the lock is held)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()


def read_owner(handle: IO[str]) -> dict[str, Any]:
    """The holder's note (empty when it has not written it yet, or wrote something else)."""
    handle.seek(0)
    try:
        owner = json.loads(handle.read() or "{}")
    except ValueError:
        return {}
    return owner if isinstance(owner, dict) else {}


def busy_message(path: Path, owner: dict[str, Any]) -> str:
    who = (
        f"'{owner.get('run', '?')}' (pid {owner.get('pid', '?')} on {owner.get('host', '?')}, "
        f"started {owner.get('started', '?')})"
        if owner
        else "another process (it has not said which yet)"
    )
    return (
        f"another run holds this project folder: {who}, lock {path}. Two runs in one folder would mix "
        f"their outputs in data/ (one run's vocabulary beside the other's models). Wait for it to end, "
        f"or run in a separate copy of the project. A killed run does not keep the lock."
    )
