"""Core messages <-> Flower records, one to one.

Every message is two records, so that it is few Flower objects (each object is one HTTP
request to the SuperLink, and on a small machine those requests bound a round):

* an :class:`Instruction` is ``config`` (ConfigRecord: the round, the instruction's
  settings and the layout of its state) and ``arrays`` (ArrayRecord: the state);
* an :class:`Update` is ``meta`` (ConfigRecord: kind, number of examples, metrics and the
  layout of its tensors, statistics and row indices) and ``arrays`` (ArrayRecord).

All tensors of a message are packed into one flat array per dtype (see :func:`pack`);
the layout names each tensor's group, name, dtype and shape. One array per dtype also
means no two identical arrays in a message, which Flower 1.41 SuperNodes fail to upload
(flwrlabs/flower#8033, fixed after 1.41).

Decoding a reply is strict: an unknown record, a missing one, a kind that does not exist,
a non-integer count, metrics that are not named numbers or a layout that does not fit its
data raises :class:`MalformedRecord`, which the engine reports as that organisation's
failure. Names, shapes and values are *not* judged here: the strategy validates them (and
rejects NaN, Inf, wrong shapes and unknown names) exactly as it does for the in-process
engine.

The sender's identity is never read from the record: the engine knows which node (and so
which organisation) a reply came from.
"""

from __future__ import annotations

import json
import math
from typing import Any

import torch
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from fedtopic_pipelines.core.federated.messages import Instruction, Update, UpdateKind

CONFIG, META, ARRAYS = "config", "meta", "arrays"
STATE, TENSORS, STATISTICS, ROWS = "state", "tensors", "statistics", "row_indices"
LAYOUT_KEYS = tuple(f"layout.{k}" for k in ("groups", "names", "dtypes", "ndims", "shapes"))
UPDATE_RECORDS = frozenset({META, ARRAYS})


class MalformedRecord(ValueError):
    """A reply that cannot be read as an update; the message says what is wrong."""


def pack(groups: dict[str, dict[str, torch.Tensor]]) -> tuple[ArrayRecord, dict[str, list]]:
    """All tensors of ``groups`` as one flat array per dtype, and the layout that undoes it."""
    entries = [(g, n, t.detach().cpu()) for g, tensors in groups.items() for n, t in tensors.items()]
    dtypes = [str(t.dtype).removeprefix("torch.") for _, _, t in entries]
    arrays = ArrayRecord(
        {
            d: torch.cat([t.reshape(-1) for (_, _, t), dt in zip(entries, dtypes, strict=True) if dt == d])
            for d in dict.fromkeys(dtypes)
        }
    )
    columns = (
        [g for g, _, _ in entries],
        [n for _, n, _ in entries],
        dtypes,
        [t.dim() for _, _, t in entries],
        [int(x) for _, _, t in entries for x in t.shape],
    )
    return arrays, dict(zip(LAYOUT_KEYS, columns, strict=True))


# What a tensor of a message may be: numbers only (a peer's string or object array is refused).
ARRAY_DTYPES = frozenset({"float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"})


def _arrays(arrays: ArrayRecord, dtypes: list[str], ndims: list[int], dims: list[int]) -> dict[str, torch.Tensor]:
    """The packed arrays as tensors, checked before anything is deserialised: numpy-serialised,
    a numeric dtype, and no larger than the layout needs (a peer cannot make the server
    allocate more than the message it declared). Any other problem is :class:`MalformedRecord`."""
    needed: dict[str, int] = {}
    position = 0
    for dtype, ndim in zip(dtypes, ndims, strict=True):
        shape = dims[position : position + max(ndim, 0)]
        position += max(ndim, 0)
        needed[dtype] = needed.get(dtype, 0) + math.prod(max(d, 0) for d in shape)
    packed = {}
    for name, array in arrays.items():
        if name not in ARRAY_DTYPES or getattr(array, "stype", None) != "numpy.ndarray":
            raise MalformedRecord(f"array '{name}' is not a numeric numpy array")
        if array.dtype != name or list(array.shape) != [needed.get(name, 0)]:
            raise MalformedRecord(
                f"array '{name}' declares dtype {array.dtype} and shape {list(array.shape)}; the layout needs "
                f"a flat {name} array of {needed.get(name, 0)} values"
            )
        try:
            values = array.numpy()
        except (TypeError, ValueError, EOFError, OSError) as exc:
            raise MalformedRecord(f"array '{name}' cannot be read: {exc}") from None
        if values.dtype.name != name or values.shape != (needed.get(name, 0),):
            raise MalformedRecord(f"array '{name}' holds {values.dtype} {list(values.shape)}, not what it declared")
        packed[name] = torch.from_numpy(values.copy())
    return packed


def unpack(arrays: ArrayRecord, layout: dict[str, Any], groups: tuple[str, ...]) -> dict[str, dict[str, torch.Tensor]]:
    """The tensors :func:`pack` packed, by group; :class:`MalformedRecord` if the layout does not fit."""
    try:
        group_of, names, dtypes, ndims, dims = (list(layout[k]) for k in LAYOUT_KEYS)
        ndims, dims = [int(n) for n in ndims], [int(d) for d in dims]
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedRecord(f"layout: missing or mistyped {exc}") from None
    if not len(group_of) == len(names) == len(dtypes) == len(ndims):
        raise MalformedRecord(
            f"layout: {len(group_of)} groups, {len(names)} names, {len(dtypes)} dtypes, {len(ndims)} shapes"
        )
    unknown = sorted(set(group_of) - set(groups))
    if unknown:
        raise MalformedRecord(f"layout: unknown groups {unknown} (expected some of {list(groups)})")
    packed = _arrays(arrays, dtypes, ndims, dims)
    offsets = dict.fromkeys(packed, 0)
    out: dict[str, dict[str, torch.Tensor]] = {g: {} for g in groups}
    position = 0
    for group, name, dtype, ndim in zip(group_of, names, dtypes, ndims, strict=True):
        shape = dims[position : position + ndim]
        position += ndim
        if dtype not in packed or ndim < 0 or len(shape) != ndim or any(d < 0 for d in shape):
            raise MalformedRecord(f"{group}: tensor '{name}' has a bad layout ({dtype}, shape {shape})")
        size = math.prod(shape)
        chunk = packed[dtype][offsets[dtype] : offsets[dtype] + size]
        if chunk.numel() != size:
            raise MalformedRecord(f"{group}: tensor '{name}' runs past the packed data")
        out[group][name] = chunk.reshape(shape)
        offsets[dtype] += size
    if position != len(dims) or any(offsets[d] != packed[d].numel() for d in packed):
        raise MalformedRecord("layout: it does not cover the packed data")
    return out


JSON_SUFFIX = ".json"


def encode_config(values: dict[str, Any]) -> ConfigRecord:
    """A query's payload or answer as a ConfigRecord: scalars and flat lists as they are, nested
    values (a parameter block) as JSON strings under ``<key>.json``."""
    record: dict[str, Any] = {}
    for key, value in values.items():
        flat = isinstance(value, str | int | float | bool) or (
            isinstance(value, list) and all(isinstance(v, str | int | float | bool) for v in value) and value
        )
        if flat:
            record[key] = value
        else:
            record[key + JSON_SUFFIX] = json.dumps(value)
    return ConfigRecord(record)


def decode_config(record: ConfigRecord | None) -> dict[str, Any]:
    """What :func:`encode_config` encoded; :class:`MalformedRecord` for a missing record or bad JSON."""
    if record is None:
        raise MalformedRecord("no record to decode")
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key.endswith(JSON_SUFFIX):
            try:
                out[key.removesuffix(JSON_SUFFIX)] = json.loads(str(value))
            except json.JSONDecodeError as exc:
                raise MalformedRecord(f"'{key}' is not JSON: {exc}") from None
        else:
            out[key] = list(value) if isinstance(value, list) else value
    return out


def instruction_to_record(instruction: Instruction) -> RecordDict:
    arrays, layout = pack({STATE: instruction.state})
    config = ConfigRecord({"round": instruction.round, **instruction.config, **layout})
    return RecordDict({CONFIG: config, ARRAYS: arrays})


def record_to_instruction(record: RecordDict) -> Instruction:
    if ARRAYS not in record or CONFIG not in record:
        raise MalformedRecord(f"an instruction needs records '{ARRAYS}' and '{CONFIG}', got {sorted(record)}")
    config: dict[str, Any] = dict(record.config_records[CONFIG])
    round_ = config.pop("round")
    layout = {k: config.pop(k) for k in LAYOUT_KEYS if k in config}
    return Instruction(int(round_), unpack(record.array_records[ARRAYS], layout, (STATE,))[STATE], config)


def update_to_record(update: Update) -> RecordDict:
    arrays, layout = pack({TENSORS: update.tensors, STATISTICS: update.statistics, ROWS: update.row_indices})
    meta = {
        "kind": update.kind.value,
        "num_examples": update.num_examples,
        "round": -1 if update.round is None else update.round,
        "metric_names": list(update.metrics),
        "metric_values": [float(v) for v in update.metrics.values()],
        **layout,
    }
    return RecordDict({META: ConfigRecord(meta), ARRAYS: arrays})


def record_to_update(record: RecordDict, client_id: str) -> Update:
    """The update ``client_id`` sent, or :class:`MalformedRecord` naming what is wrong."""
    unknown = sorted(set(record) - UPDATE_RECORDS)
    if unknown:
        raise MalformedRecord(f"unknown records {unknown} (expected {sorted(UPDATE_RECORDS)})")
    try:
        meta = record.config_records[META]
        arrays = record.array_records[ARRAYS]
    except KeyError as exc:
        raise MalformedRecord(f"record {exc} is missing or has the wrong type") from None
    try:
        kind = UpdateKind(meta.get("kind"))
    except ValueError:
        raise MalformedRecord(f"unknown update kind {meta.get('kind')!r}") from None
    num_examples = meta.get("num_examples")
    if isinstance(num_examples, bool) or not isinstance(num_examples, int):
        raise MalformedRecord(f"num_examples must be an integer, got {num_examples!r}")
    round_ = meta.get("round", -1)  # -1: none named; the server refuses it (as an in-process update without one)
    if isinstance(round_, bool) or not isinstance(round_, int) or round_ < -1:
        raise MalformedRecord(f"round must be the instruction's round, an integer >= 0, got {round_!r}")
    names, values = meta.get("metric_names", []), meta.get("metric_values", [])
    if (
        not isinstance(names, list)
        or not isinstance(values, list)
        or len(names) != len(values)
        or not all(isinstance(n, str) for n in names)
        or not all(isinstance(v, float) for v in values)
    ):
        raise MalformedRecord(f"metrics must be names with float values, got {names!r} and {values!r}")
    parts = unpack(arrays, dict(meta), (TENSORS, STATISTICS, ROWS))
    return Update(
        client_id,
        kind,
        parts[TENSORS],
        num_examples,
        row_indices=parts[ROWS],
        statistics=parts[STATISTICS],
        metrics=dict(zip(names, values, strict=True)),
        round=None if round_ == -1 else round_,
    )
