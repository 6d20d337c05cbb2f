"""The ServerApp's exchange: a round's replies are pulled until the round timeout, arrays included."""

from __future__ import annotations

import threading
import time

import pytest
from flwr.app import ConfigRecord, Error, Message, RecordDict
from flwr.supercore.run import RunNotRunningException

from fedtopic_pipelines.flower.engine import exchange
from tests.flower.local_grid import set_task_identity

MESSAGE_UNAVAILABLE = 3


class HalfUploadGrid:
    """A SuperLink as Flower's grid sees it, for ``exchange`` (only ``push_messages``/``pull_messages``).

    As Flower's, a pull hands out each reply once, and blocks on a reply whose arrays have
    not finished uploading: it retries them with no deadline of ours, here until ``upload_ends``
    is set (never, for a node killed mid-upload), then yields Flower's error reply.
    Node 1's reply is such a reply from the start; the others arrive ``arrive_after_s``
    after the push.
    """

    def __init__(self, arrive_after_s: float) -> None:
        set_task_identity()
        self.arrive_after_s = arrive_after_s
        self.upload_ends = threading.Event()
        self.lock = threading.Lock()  # pulls run in parallel threads, as over Flower's HTTP client
        self.waiting: dict[str, tuple[Message, float]] = {}  # message id -> (message, pushed at)
        self.count = 0
        self.pulls = 0

    def push_messages(self, messages):
        ids = []
        with self.lock:
            for message in messages:
                self.count += 1
                mid = f"m{self.count}"
                message.metadata.__dict__["_message_id"] = mid
                self.waiting[mid] = (message, time.monotonic())
                ids.append(mid)
        return ids

    def pull_messages(self, message_ids):
        with self.lock:
            self.pulls += 1
            now = time.monotonic()
            taken = []
            for mid in sorted(message_ids):
                message, pushed = self.waiting.get(mid, (None, 0.0))
                if message is None:
                    continue
                if message.metadata.dst_node_id == 1 or now - pushed >= self.arrive_after_s:
                    del self.waiting[mid]  # the SuperLink hands a reply out once
                    taken.append(message)
        out = []
        for message in taken:
            if message.metadata.dst_node_id == 1:
                self.upload_ends.wait()  # Flower retries the arrays until they come
                error = Error(MESSAGE_UNAVAILABLE, "Reply message objects are unavailable")
                out.append(Message(error, reply_to=message))
            else:
                out.append(Message(RecordDict({"reply": ConfigRecord({"ok": 1})}), reply_to=message))
        return out


def messages(nodes=(1, 2)) -> list[Message]:
    set_task_identity()
    return [Message(RecordDict(), dst_node_id=node, message_type="train.gradients") for node in nodes]


def test_a_reply_that_arrives_while_a_pull_blocks_on_a_half_uploaded_one_still_counts() -> None:
    grid = HalfUploadGrid(arrive_after_s=0.2)
    took: dict[int, float] = {}
    try:
        start = time.monotonic()
        replies, missing = exchange(grid, messages(), timeout_s=1.5, seconds=took)
        elapsed = time.monotonic() - start
    finally:
        grid.upload_ends.set()
    assert set(replies) == {2} and not replies[2].has_error()  # arrived at 0.2 s, not lost behind node 1's pull
    assert missing == {1: "no reply within 1.5 s"}  # left out: its reply never finished in time
    assert 1.5 <= elapsed < 2.0  # the timeout bounds the round, the blocked pull included
    assert set(took) == {2} and 0.2 <= took[2] < 1.0  # when node 2's reply was in; node 1 has none


def test_a_reply_there_with_a_half_uploaded_one_is_not_held_behind_it() -> None:
    grid = HalfUploadGrid(arrive_after_s=0.0)  # both replies are there at the first pull
    try:
        replies, missing = exchange(grid, messages(), timeout_s=0.6)
    finally:
        grid.upload_ends.set()
    assert set(replies) == {2} and missing == {1: "no reply within 0.6 s"}


def test_a_pull_that_ends_after_its_round_cannot_reach_a_later_round() -> None:
    grid = HalfUploadGrid(arrive_after_s=0.0)
    first, missing = exchange(grid, messages(), timeout_s=0.6)
    assert set(first) == {2} and set(missing) == {1}  # node 1's pull is still blocked, left behind

    def upload_ends_soon() -> None:
        time.sleep(0.2)
        grid.upload_ends.set()  # the first round's blocked pull now returns node 1's old reply

    threading.Thread(target=upload_ends_soon, daemon=True).start()
    second, missing = exchange(grid, messages(nodes=(2, 3)), timeout_s=1.0)
    assert set(second) == {2, 3} and missing == {}
    assert all(not r.has_error() for r in second.values())  # not the first round's error reply
    round_two = {m.metadata.reply_to_message_id for m in second.values()}
    assert round_two == {"m3", "m4"}


def test_a_node_without_a_reply_is_missing_with_the_timeout_named() -> None:
    grid = HalfUploadGrid(arrive_after_s=10.0)
    replies, missing = exchange(grid, messages(nodes=(2,)), timeout_s=0.3)
    assert replies == {} and missing == {2: "no reply within 0.3 s"}
    assert grid.pulls >= 3  # polled, not pulled once and left waiting


def test_all_replies_end_the_exchange_before_the_timeout() -> None:
    grid = HalfUploadGrid(arrive_after_s=0.0)
    start = time.monotonic()
    replies, missing = exchange(grid, messages(nodes=(2, 3, 4)), timeout_s=30.0)
    assert set(replies) == {2, 3, 4} and missing == {}
    assert time.monotonic() - start < 1.0


class StoppedRunGrid(HalfUploadGrid):
    def pull_messages(self, message_ids):
        raise RunNotRunningException


class BrokenReplyGrid(HalfUploadGrid):
    """Node 3's reply cannot be pulled (an object that does not inflate); the others can."""

    def pull_messages(self, message_ids):
        with self.lock:
            nodes = {self.waiting[mid][0].metadata.dst_node_id for mid in message_ids if mid in self.waiting}
        if 3 in nodes:
            raise ValueError("object could not be inflated")
        return super().pull_messages(message_ids)


def test_a_stopped_run_ends_the_exchange() -> None:
    with pytest.raises(RunNotRunningException):
        exchange(StoppedRunGrid(arrive_after_s=0.0), messages(nodes=(2,)), timeout_s=5.0)


def test_any_other_error_of_a_pull_is_only_that_nodes_failure() -> None:
    replies, missing = exchange(BrokenReplyGrid(arrive_after_s=0.0), messages(nodes=(2, 3, 4)), timeout_s=5.0)
    assert set(replies) == {2, 4}
    assert missing == {3: "its reply could not be pulled: ValueError: object could not be inflated"}


class SlowPushGrid(HalfUploadGrid):
    """The in-process test grid runs the ClientApps inside ``push_messages``: the replies are there when it returns."""

    def push_messages(self, messages):
        time.sleep(0.4)
        return super().push_messages(messages)


def test_the_timeout_counts_from_the_end_of_the_push() -> None:
    replies, missing = exchange(SlowPushGrid(arrive_after_s=0.0), messages(nodes=(2, 3)), timeout_s=0.2)
    assert set(replies) == {2, 3} and missing == {}
