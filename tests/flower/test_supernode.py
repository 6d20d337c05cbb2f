"""The warm SuperNode's waits (``flower/supernode.py``); its executor is exercised by the loopback tests."""

from __future__ import annotations

import pytest

from fedtopic_pipelines.flower.supernode import LOCAL_WAIT_S, seconds_from_env, wait_seconds

POLL, IDLE, ACTIVE = 0.05, 1.0, 30.0


@pytest.mark.parametrize(
    ("requested", "since_message", "expected"),
    [
        (3, 0.5, POLL),  # an empty poll during a run: the next round's message is due
        (3, 29.9, POLL),
        (3, 30.0, IDLE),  # nothing for ACTIVE seconds: poll the SuperLink less often
        (3, float("inf"), IDLE),  # no message yet since the node started
        (0.5, float("inf"), LOCAL_WAIT_S),  # waits on the node's own state stay short, run or not
        (0.5, 1.0, LOCAL_WAIT_S),
    ],
)
def test_polls_fast_only_while_a_run_is_active(requested: float, since_message: float, expected: float) -> None:
    assert wait_seconds(requested, since_message, POLL, IDLE, ACTIVE) == expected


def test_never_waits_longer_than_flower_asked() -> None:
    assert wait_seconds(3, float("inf"), POLL, idle_poll_s=10.0, active_s=ACTIVE) == 3
    assert wait_seconds(0.001, 0.0, POLL, IDLE, ACTIVE) == 0.001


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
