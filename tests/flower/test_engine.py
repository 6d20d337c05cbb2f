"""The ServerApp's exchange: a round's replies are pulled until the round timeout, arrays included."""

from __future__ import annotations

import time

from flwr.app import ConfigRecord, Error, Message, RecordDict

from fedtopic_pipelines.flower.engine import PULL_DEADLINE, exchange, pull_time_left
from tests.flower.local_grid import set_task_identity

MESSAGE_UNAVAILABLE = 3


class HalfUploadGrid:
    """Node 1's reply never finishes uploading: a pull of it blocks until the pull deadline, as
    Flower's object pull does, and then yields an error reply. Node 2's reply arrives while
    that pull blocks. Only ``push_messages``/``pull_messages`` are used by ``exchange``."""

    def __init__(self, arrive_after_s: float) -> None:
        set_task_identity()
        self.arrive_after_s = arrive_after_s
        self.sent: dict[str, Message] = {}
        self.deadlines: list[float | None] = []

    def push_messages(self, messages):
        ids = []
        for i, message in enumerate(messages):
            message.metadata.__dict__["_message_id"] = f"m{i}"
            self.sent[f"m{i}"] = message
            ids.append(f"m{i}")
        self.pushed_at = time.monotonic()
        return ids

    def pull_messages(self, message_ids):
        """As Flower's: first which replies are there (one request), then each one's arrays."""
        self.deadlines.append(PULL_DEADLINE.get())
        arrived = time.monotonic() - self.pushed_at >= self.arrive_after_s
        out = []
        for mid in sorted(message_ids):  # node 1's reply first
            message = self.sent[mid]
            if message.metadata.dst_node_id == 1:
                time.sleep(pull_time_left(default=60.0))  # Flower retries the arrays until then
                error = Error(MESSAGE_UNAVAILABLE, "Reply message objects are unavailable")
                out.append(Message(error, reply_to=message))
            elif arrived:
                out.append(Message(RecordDict({"reply": ConfigRecord({"ok": 1})}), reply_to=message))
        return out


def messages() -> list[Message]:
    set_task_identity()
    return [Message(RecordDict(), dst_node_id=node, message_type="train.gradients") for node in (1, 2)]


def test_a_reply_that_arrives_while_a_pull_blocks_on_a_half_uploaded_one_still_counts() -> None:
    grid = HalfUploadGrid(arrive_after_s=0.2)
    start = time.monotonic()
    replies, missing = exchange(grid, messages(), timeout_s=1.0)
    elapsed = time.monotonic() - start
    assert replies[1].has_error() and "unavailable" in replies[1].error.reason  # left out, with Flower's reason
    assert not replies[2].has_error()  # arrived at 0.2 s, within the round: not lost behind node 1's pull
    assert missing == {}
    assert 1.0 <= elapsed < 2.0  # the timeout bounds the round, the blocked pull included
    assert all(d is not None for d in grid.deadlines) and PULL_DEADLINE.get() is None  # set only while pulling


def test_a_node_without_a_reply_is_missing_with_the_timeout_named() -> None:
    grid = HalfUploadGrid(arrive_after_s=10.0)
    only_node_2 = [m for m in messages() if m.metadata.dst_node_id == 2]
    replies, missing = exchange(grid, only_node_2, timeout_s=0.3)
    assert replies == {} and missing == {2: "no reply within 0.3 s"}
