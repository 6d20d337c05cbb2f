"""Tensors on disk without pickle: safetensors for the arrays, a JSON header for the rest.

A trained model or a server checkpoint is a nested structure (state dicts, optimizer
state, histories, generator states) of tensors and plain values. :func:`flatten` splits it
into named tensors and a JSON skeleton that refers to them; :func:`save` writes both into
one ``.safetensors`` file (the skeleton as UTF-8 bytes in a tensor of its own, since the
format caps its metadata header at 100 MB and a long run's history can outgrow that; the
header names only the kind of file); :func:`load` reads them back and :func:`unflatten`
rebuilds the structure. Loading never executes code from the
file, unlike ``torch.load(weights_only=False)``, so a file written by a peer (a Flower
result, a checkpoint in a shared folder) can only be wrong data, which the reader checks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

HEADER_KEY = "fedtopic"
SKELETON = "__skeleton__"  # the tensor holding the JSON skeleton
TENSOR = "__tensor__"
TUPLE = "__tuple__"


class PersistError(ValueError):
    """A file that is not what the reader expects; the message names the file."""


def flatten(value: Any, tensors: dict[str, torch.Tensor] | None = None, prefix: str = "t") -> tuple[Any, dict]:
    """``value`` as a JSON-able skeleton plus the tensors it refers to (by generated name).

    Dicts must have string or integer keys (optimizer states use integers); tuples are
    kept as tuples. Tensors are stored contiguous on the CPU.
    """
    tensors = {} if tensors is None else tensors
    if isinstance(value, torch.Tensor):
        name = f"{prefix}.{len(tensors)}"
        tensors[name] = value.detach().cpu().contiguous()
        return {TENSOR: name}, tensors
    if isinstance(value, Mapping):
        items = []
        for key, item in value.items():
            if not isinstance(key, str | int) or isinstance(key, bool):
                raise TypeError(f"cannot store a dict key of type {type(key).__name__}: {key!r}")
            skeleton, _ = flatten(item, tensors, prefix)
            items.append([key, skeleton])
        return {"__dict__": items}, tensors
    if isinstance(value, tuple | list):
        skeletons = [flatten(item, tensors, prefix)[0] for item in value]
        return ({TUPLE: skeletons} if isinstance(value, tuple) else skeletons), tensors
    if value is None or isinstance(value, bool | int | float | str):
        return value, tensors
    raise TypeError(f"cannot store a value of type {type(value).__name__}")


def unflatten(skeleton: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    """The structure :func:`flatten` took apart."""
    if isinstance(skeleton, dict):
        if TENSOR in skeleton:
            return tensors[skeleton[TENSOR]]
        if TUPLE in skeleton:
            return tuple(unflatten(s, tensors) for s in skeleton[TUPLE])
        return {key: unflatten(item, tensors) for key, item in skeleton["__dict__"]}
    if isinstance(skeleton, list):
        return [unflatten(s, tensors) for s in skeleton]
    return skeleton


def save(path: Path, value: Any, kind: str) -> None:
    """Write ``value`` to ``path`` atomically (a temporary file, then a rename); ``kind`` names what it is."""
    skeleton, tensors = flatten(value)
    tensors[SKELETON] = torch.frombuffer(bytearray(json.dumps(skeleton).encode()), dtype=torch.uint8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    save_file(tensors, str(partial), metadata={HEADER_KEY: json.dumps({"kind": kind})})
    os.replace(partial, path)


def load(path: Path, kind: str) -> Any:
    """Read what :func:`save` wrote; :class:`PersistError` if it is not a ``kind`` file."""
    path = Path(path)
    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            header = json.loads((handle.metadata() or {}).get(HEADER_KEY, "null"))
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 (not a dict)
    except (OSError, ValueError, json.JSONDecodeError) as exc:
        raise PersistError(f"'{path}' is not a readable safetensors file: {exc}") from None
    except Exception as exc:  # safetensors raises its own SafetensorError on a corrupt header
        raise PersistError(f"'{path}' is not a readable safetensors file: {exc}") from None
    if not isinstance(header, dict) or header.get("kind") != kind:
        found = header.get("kind") if isinstance(header, dict) else None
        raise PersistError(f"'{path}' holds {found!r}, expected a {kind!r} file")
    try:
        skeleton = json.loads(bytes(tensors.pop(SKELETON).numpy()).decode())
        return unflatten(skeleton, tensors)
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as exc:
        raise PersistError(f"'{path}' has a damaged skeleton: {exc!r}") from None
