"""Core messages <-> Flower records, one to one.

An :class:`Instruction` travels as ``state`` (ArrayRecord) and ``config`` (ConfigRecord,
with the round); an :class:`Update` as ``tensors`` / ``statistics`` / ``row_indices``
(ArrayRecords), ``metrics`` (MetricRecord) and ``meta`` (ConfigRecord: kind and number of
examples). Decoding a reply is strict: an unknown record, a missing one, a kind that does
not exist or a non-integer count raises :class:`MalformedRecord`, which the engine reports
as that organisation's failure. Names, shapes and values are *not* checked here: the
strategy validates them (and rejects NaN, Inf, wrong shapes and unknown names) exactly as
it does for the in-process engine.

The sender's identity is never read from the record: the engine knows which node (and so
which organisation) a reply came from.
"""

from __future__ import annotations

from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from fedtopic_pipelines.core.federated.messages import Instruction, Update, UpdateKind

STATE, CONFIG = "state", "config"
TENSORS, STATISTICS, ROWS, METRICS, META = "tensors", "statistics", "row_indices", "metrics", "meta"
UPDATE_RECORDS = frozenset({TENSORS, STATISTICS, ROWS, METRICS, META})


class MalformedRecord(ValueError):
    """A reply that cannot be read as an update; the message says what is wrong."""


def _arrays(tensors: dict[str, torch.Tensor]) -> ArrayRecord:
    if not tensors:
        return ArrayRecord()
    return ArrayRecord({name: t.detach().cpu().contiguous() for name, t in tensors.items()})


def _tensors(record: ArrayRecord) -> dict[str, torch.Tensor]:
    # Copies: the record's buffers are read-only numpy views.
    return {name: torch.from_numpy(array.numpy().copy()) for name, array in record.items()}


def instruction_to_record(instruction: Instruction) -> RecordDict:
    return RecordDict(
        {STATE: _arrays(instruction.state), CONFIG: ConfigRecord({"round": instruction.round, **instruction.config})}
    )


def record_to_instruction(record: RecordDict) -> Instruction:
    if STATE not in record or CONFIG not in record:
        raise MalformedRecord(f"an instruction needs records '{STATE}' and '{CONFIG}', got {sorted(record)}")
    config: dict[str, Any] = dict(record.config_records[CONFIG])
    round_ = config.pop("round")
    return Instruction(int(round_), _tensors(record.array_records[STATE]), config)


def update_to_record(update: Update) -> RecordDict:
    meta = ConfigRecord({"kind": update.kind.value, "num_examples": update.num_examples})
    content: dict[str, Any] = {
        TENSORS: _arrays(update.tensors),
        STATISTICS: _arrays(update.statistics),
        METRICS: MetricRecord({k: float(v) for k, v in update.metrics.items()}),
        META: meta,
    }
    if update.row_indices:
        content[ROWS] = _arrays(update.row_indices)
    return RecordDict(content)


def record_to_update(record: RecordDict, client_id: str) -> Update:
    """The update ``client_id`` sent, or :class:`MalformedRecord` naming what is wrong."""
    unknown = sorted(set(record) - UPDATE_RECORDS)
    if unknown:
        raise MalformedRecord(f"unknown records {unknown} (expected some of {sorted(UPDATE_RECORDS)})")
    missing = sorted({TENSORS, METRICS, META} - set(record))
    if missing:
        raise MalformedRecord(f"missing records {missing}")
    try:
        meta = record.config_records[META]
        tensors = record.array_records[TENSORS]
        metrics = record.metric_records[METRICS]
        statistics = record.array_records[STATISTICS] if STATISTICS in record else ArrayRecord()
        rows = record.array_records[ROWS] if ROWS in record else ArrayRecord()
    except KeyError as exc:
        raise MalformedRecord(f"record {exc} has the wrong type") from None
    try:
        kind = UpdateKind(meta.get("kind"))
    except ValueError:
        raise MalformedRecord(f"unknown update kind {meta.get('kind')!r}") from None
    num_examples = meta.get("num_examples")
    if isinstance(num_examples, bool) or not isinstance(num_examples, int):
        raise MalformedRecord(f"num_examples must be an integer, got {num_examples!r}")
    return Update(
        client_id,
        kind,
        _tensors(tensors),
        num_examples,
        row_indices=_tensors(rows),
        statistics=_tensors(statistics),
        metrics={k: float(v) for k, v in metrics.items()},
    )
