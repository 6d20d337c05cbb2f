"""Core messages <-> Flower records, one to one.

An :class:`Instruction` travels as its ``config`` (ConfigRecord, with the round) and its
``state``; an :class:`Update` as ``meta`` (kind, number of examples), ``metrics``
(MetricRecord) and its ``tensors`` / ``statistics`` / ``row_indices``. Each group of
tensors is packed into one flat array per dtype, with a ``<group>.layout`` ConfigRecord
giving names, dtypes and shapes (see :func:`pack`).

Decoding a reply is strict: an unknown record, a missing one, a kind that does not exist,
a non-integer count or a layout that does not fit its data raises :class:`MalformedRecord`,
which the engine reports as that organisation's failure. Names, shapes and values are
*not* judged here: the strategy validates them (and rejects NaN, Inf, wrong shapes and
unknown names) exactly as it does for the in-process engine.

The sender's identity is never read from the record: the engine knows which node (and so
which organisation) a reply came from.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from fedtopic_pipelines.core.federated.messages import Instruction, Update, UpdateKind

STATE, CONFIG = "state", "config"
TENSORS, STATISTICS, ROWS, METRICS, META = "tensors", "statistics", "row_indices", "metrics", "meta"
LAYOUT = ".layout"  # suffix of the ConfigRecord that names and shapes a packed group
UPDATE_RECORDS = frozenset(
    {TENSORS, STATISTICS, ROWS, METRICS, META} | {g + LAYOUT for g in (TENSORS, STATISTICS, ROWS)}
)


class MalformedRecord(ValueError):
    """A reply that cannot be read as an update; the message says what is wrong."""


def pack(content: dict[str, Any], group: str, tensors: dict[str, torch.Tensor]) -> None:
    """Put ``tensors`` into ``content`` as one flat array per dtype plus a layout record.

    One array per message part instead of one per tensor: fewer objects to push and pull
    (each is an HTTP request), and no two identical arrays in one message, which Flower
    1.41 SuperNodes fail to upload (flwrlabs/flower#8033, fixed after 1.41).
    """
    if not tensors:
        return
    names = list(tensors)
    flat = [tensors[n].detach().cpu().reshape(-1) for n in names]
    dtypes = [str(t.dtype).removeprefix("torch.") for t in flat]
    content[group] = ArrayRecord(
        {
            f"packed.{d}": torch.cat([t for t, dt in zip(flat, dtypes, strict=True) if dt == d])
            for d in dict.fromkeys(dtypes)
        }
    )
    content[group + LAYOUT] = ConfigRecord(
        {
            "names": names,
            "dtypes": dtypes,
            "ndims": [tensors[n].dim() for n in names],
            "shapes": [int(x) for n in names for x in tensors[n].shape] or [0],
        }
    )


def unpack(record: RecordDict, group: str) -> dict[str, torch.Tensor]:
    """The tensors :func:`pack` put under ``group``; :class:`MalformedRecord` if the layout does not fit."""
    if group not in record and group + LAYOUT not in record:
        return {}
    try:
        arrays = record.array_records[group]
        layout = record.config_records[group + LAYOUT]
        names, dtypes = list(layout["names"]), list(layout["dtypes"])
        ndims, dims = [int(n) for n in layout["ndims"]], [int(d) for d in layout["shapes"]]
    except KeyError as exc:
        raise MalformedRecord(f"part '{group}': missing or mistyped {exc}") from None
    if not len(names) == len(dtypes) == len(ndims):
        raise MalformedRecord(f"part '{group}': {len(names)} names, {len(dtypes)} dtypes, {len(ndims)} shapes")
    packed = {name.removeprefix("packed."): torch.from_numpy(a.numpy().copy()) for name, a in arrays.items()}
    offsets = dict.fromkeys(packed, 0)
    out: dict[str, torch.Tensor] = {}
    position = 0
    for name, dtype, ndim in zip(names, dtypes, ndims, strict=True):
        shape = dims[position : position + ndim]
        position += ndim
        if dtype not in packed or ndim < 0 or len(shape) != ndim or any(d < 0 for d in shape):
            raise MalformedRecord(f"part '{group}': tensor '{name}' has a bad layout ({dtype}, shape {shape})")
        size = math.prod(shape)
        chunk = packed[dtype][offsets[dtype] : offsets[dtype] + size]
        if chunk.numel() != size:
            raise MalformedRecord(f"part '{group}': tensor '{name}' runs past the packed data")
        out[name] = chunk.reshape(shape)
        offsets[dtype] += size
    covered = position == len(dims) or (position == 0 and dims == [0])  # [0]: only scalars
    if not covered or any(offsets[d] != packed[d].numel() for d in packed):
        raise MalformedRecord(f"part '{group}': the layout does not cover the packed data")
    return out


def instruction_to_record(instruction: Instruction) -> RecordDict:
    content: dict[str, Any] = {CONFIG: ConfigRecord({"round": instruction.round, **instruction.config})}
    pack(content, STATE, instruction.state)
    return RecordDict(content)


def record_to_instruction(record: RecordDict) -> Instruction:
    if STATE not in record or CONFIG not in record:
        raise MalformedRecord(f"an instruction needs records '{STATE}' and '{CONFIG}', got {sorted(record)}")
    config: dict[str, Any] = dict(record.config_records[CONFIG])
    round_ = config.pop("round")
    return Instruction(int(round_), unpack(record, STATE), config)


def update_to_record(update: Update) -> RecordDict:
    content: dict[str, Any] = {
        META: ConfigRecord({"kind": update.kind.value, "num_examples": update.num_examples}),
        METRICS: MetricRecord({k: float(v) for k, v in update.metrics.items()}),
    }
    pack(content, TENSORS, update.tensors)
    pack(content, STATISTICS, update.statistics)
    pack(content, ROWS, update.row_indices)
    return RecordDict(content)


def record_to_update(record: RecordDict, client_id: str) -> Update:
    """The update ``client_id`` sent, or :class:`MalformedRecord` naming what is wrong."""
    unknown = sorted(set(record) - UPDATE_RECORDS)
    if unknown:
        raise MalformedRecord(f"unknown records {unknown} (expected some of {sorted(UPDATE_RECORDS)})")
    try:
        meta = record.config_records[META]
        metrics = record.metric_records[METRICS]
    except KeyError as exc:
        raise MalformedRecord(f"record {exc} is missing or has the wrong type") from None
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
        unpack(record, TENSORS),
        num_examples,
        row_indices=unpack(record, ROWS),
        statistics=unpack(record, STATISTICS),
        metrics={k: float(v) for k, v in metrics.items()},
    )
