"""Who took part in each round of a federation, who was left out and why, for run reports.

A round's record says whom the server asked (``sampled``; everyone without client
sampling), whose updates it used (``client_loss``), which it rejected and which failed.
A report that only counts nodes hides a dead organisation, so every report built from a
history says it per organisation. Kept compact: an organisation gone for a thousand rounds
for one reason is one entry with its rounds, not a thousand.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fedtopic_pipelines.core.federated.messages import SECURE_AGGREGATE
from fedtopic_pipelines.core.federated.server import RoundRecord

SAMPLED_OUT = "sampled_out"  # not asked this round (client sampling)
FAILED = "failed"  # asked, no usable reply: an error, a timeout, a dead node
REJECTED = "rejected"  # replied, the server refused the update
NO_UPDATE = "no_update"  # asked, neither an update nor a failure recorded: said rather than assumed
WHY = (SAMPLED_OUT, FAILED, REJECTED, NO_UPDATE)


def round_participation(record: RoundRecord, organisations: Sequence[str]) -> dict[str, Any]:
    """One round: the organisations whose update was used, and the others by name with why and reason.

    A name the server rejected that is not of the federation (an impostor) is listed too. In
    a secure round the organisations are summed into one update: all asked that did not fail
    took part, unless the sum itself was rejected.
    """
    asked = list(record.sampled) if record.sampled else list(organisations)
    left: dict[str, dict[str, str]] = {
        org: {"why": SAMPLED_OUT, "reason": "not sampled this round"} for org in organisations if org not in asked
    }
    for org, reason in record.failed.items():
        left[org] = {"why": FAILED, "reason": reason}
    for org, reason in record.rejected.items():
        if org != SECURE_AGGREGATE:
            left[org] = {"why": REJECTED, "reason": reason}
    secure_reason = record.rejected.get(SECURE_AGGREGATE)
    secure_used = SECURE_AGGREGATE in record.client_loss
    took_part = []
    for org in asked:
        if org in left:
            continue
        if secure_reason is not None and not secure_used:
            left[org] = {"why": REJECTED, "reason": f"its secure sum was rejected: {secure_reason}"}
        elif org in record.client_loss or secure_used:
            took_part.append(org)
        else:
            left[org] = {"why": NO_UPDATE, "reason": "asked; no update and no failure recorded"}
    return {"round": record.round, "took_part": took_part, "left_out": left}


def participation(records: Sequence[RoundRecord], organisations: Sequence[str]) -> dict[str, Any]:
    """The run's participation, compactly: per organisation the rounds it took part in (a
    count) and the rounds it was left out of, grouped by why and reason; totals by why.

    ``organisations`` is the federation's roster: with it a report can say who never
    answered at all, which the records alone cannot.
    """
    took = dict.fromkeys(organisations, 0)
    groups: dict[str, dict[tuple[str, str], list[int]]] = {}
    totals = dict.fromkeys(WHY, 0)
    for record in records:
        one = round_participation(record, organisations)
        for org in one["took_part"]:
            took[org] = took.get(org, 0) + 1
        for org, entry in one["left_out"].items():
            groups.setdefault(org, {}).setdefault((entry["why"], entry["reason"]), []).append(record.round)
            totals[entry["why"]] += 1
    return {
        "rounds": len(records),
        "organisations": list(organisations),
        "took_part": took,
        "left_out": {
            org: [{"why": why, "reason": reason, "rounds": rounds} for (why, reason), rounds in by_reason.items()]
            for org, by_reason in groups.items()
        },
        "totals": {"took_part": sum(took.values()), **totals},
    }


def participation_table(records: Sequence[RoundRecord], organisations: Sequence[str]) -> list[dict[str, Any]]:
    """Every round's participation (:func:`round_participation`), in order: the long form."""
    return [round_participation(record, organisations) for record in records]


def participation_series(
    records: Sequence[RoundRecord], organisations: Sequence[str]
) -> dict[str, list[dict[str, float]]]:
    """Counters for a metrics store, keyed ``participation.<org>.left_out`` and ``.took_part``:
    the running count of rounds each organisation was left out of (at every round it grew, and
    at the last round, so an organisation never left out still shows 0), and its rounds taken
    part in at the last round."""
    if not records:
        return {}
    last = records[-1].round
    left = dict.fromkeys(organisations, 0)
    took = dict.fromkeys(organisations, 0)
    series: dict[str, list[dict[str, float]]] = {}
    for record in records:
        one = round_participation(record, organisations)
        for org in one["took_part"]:
            took[org] = took.get(org, 0) + 1
        for org in one["left_out"]:
            left[org] = left.get(org, 0) + 1
            series.setdefault(f"participation.{org}.left_out", []).append({"value": left[org], "step": record.round})
    for org, count in left.items():
        points = series.setdefault(f"participation.{org}.left_out", [])
        if not points or points[-1]["step"] != last:
            points.append({"value": count, "step": last})
    for org, count in took.items():
        series[f"participation.{org}.took_part"] = [{"value": count, "step": last}]
    return series
