"""Who took part in each round and who was left out, and why: what every run report says."""

from fedtopic_pipelines.core.federated.messages import SECURE_AGGREGATE
from fedtopic_pipelines.core.federated.participation import (
    participation,
    participation_series,
    participation_table,
    round_participation,
)
from fedtopic_pipelines.core.federated.server import RoundRecord

ORGS = ["a", "b", "c"]


def _record(round_: int, used: list[str], **kwargs) -> RoundRecord:
    return RoundRecord(
        round=round_, metrics={"loss": 1.0}, num_examples=8, client_loss=dict.fromkeys(used, 1.0), **kwargs
    )


def test_each_organisation_left_out_is_named_with_why_and_reason() -> None:
    record = _record(4, ["a"], sampled=["a", "b"], failed={"b": "no reply within 6 s"}, rejected={"mallory": "unknown"})
    one = round_participation(record, ORGS)
    assert one["round"] == 4 and one["took_part"] == ["a"]
    assert one["left_out"] == {
        "c": {"why": "sampled_out", "reason": "not sampled this round"},
        "b": {"why": "failed", "reason": "no reply within 6 s"},
        "mallory": {"why": "rejected", "reason": "unknown"},  # an impostor is reported, not hidden
    }


def test_an_organisation_asked_that_neither_answered_nor_failed_is_not_counted_as_taking_part() -> None:
    assert round_participation(_record(0, ["a", "b"]), ORGS)["left_out"] == {
        "c": {"why": "no_update", "reason": "asked; no update and no failure recorded"}
    }


def test_a_secure_round_counts_its_summed_organisations_and_a_rejected_sum_leaves_them_out() -> None:
    summed = _record(0, [SECURE_AGGREGATE], failed={"c": "dropped out"})
    assert round_participation(summed, ORGS)["took_part"] == ["a", "b"]
    refused = _record(1, [], rejected={SECURE_AGGREGATE: "claims too many examples"})
    left = round_participation(refused, ORGS)["left_out"]
    assert round_participation(refused, ORGS)["took_part"] == [] and set(left) == set(ORGS)
    assert left["a"] == {"why": "rejected", "reason": "its secure sum was rejected: claims too many examples"}


def test_the_summary_groups_an_organisations_rounds_by_reason_and_totals_them() -> None:
    records = [
        _record(0, ORGS),
        _record(1, ["a", "b"], failed={"c": "killed"}),
        _record(2, ["a"], failed={"c": "killed"}, rejected={"b": "NaN in 'w'"}),
        _record(3, ["a", "b"], sampled=["a", "b"]),
    ]
    summary = participation(records, ORGS)
    assert summary["rounds"] == 4 and summary["took_part"] == {"a": 4, "b": 3, "c": 1}
    assert summary["left_out"] == {
        "c": [
            {"why": "failed", "reason": "killed", "rounds": [1, 2]},
            {"why": "sampled_out", "reason": "not sampled this round", "rounds": [3]},
        ],
        "b": [{"why": "rejected", "reason": "NaN in 'w'", "rounds": [2]}],
    }
    assert summary["totals"] == {"took_part": 8, "sampled_out": 1, "failed": 2, "rejected": 1, "no_update": 0}
    assert [r["took_part"] for r in participation_table(records, ORGS)] == [ORGS, ["a", "b"], ["a"], ["a", "b"]]


def test_counters_for_the_metrics_store_grow_at_each_round_left_out_and_end_at_the_last_round() -> None:
    records = [_record(0, ORGS), _record(1, ["a", "b"], failed={"c": "killed"}), _record(2, ORGS), _record(3, ORGS)]
    series = participation_series(records, ORGS)
    assert series["participation.c.left_out"] == [{"value": 1, "step": 1}, {"value": 1, "step": 3}]
    assert series["participation.a.left_out"] == [{"value": 0, "step": 3}]  # never left out: still a counter
    assert series["participation.c.took_part"] == [{"value": 3, "step": 3}]
    assert participation_series([], ORGS) == {}
