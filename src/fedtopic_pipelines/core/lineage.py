"""Content fingerprints that tie each artefact to what it was built from.

A bag of words is only meaningful over the vocabulary it was counted with and the tokens it
counted, a model only over
the vocabulary it was trained on, an organisation's co-occurrence counts only for the
candidate words the server asked for. Each of these artefacts records the fingerprint of
its inputs, and the stage that reads them compares the fingerprints before any index is
used: inputs left by another run (another vocabulary, other models, other evaluation
parameters) stop the stage with a message naming both artefacts and what to run again,
instead of an ``IndexError`` deep in a node, or silently wrong scores.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

WIDTH = 16  # hex digits kept: 64 bits, ample to tell two runs' artefacts apart


class LineageError(ValueError):
    """Artefacts read together were built from different inputs (different runs)."""


def digest(value: Any) -> str:
    """Fingerprint of a JSON-able value (keys sorted; other objects by their ``str``)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:WIDTH]


def vocabulary_fingerprint(terms: Sequence[str]) -> str:
    """Fingerprint of a vocabulary: its terms in column order (the order is the index)."""
    return digest(["vocabulary", [str(t) for t in terms]])


TOKEN_COLUMNS = ("doc_id", "tokens", "label", "split")  # what a bag of words and an evaluation read of them


class TokensHasher:
    """Fingerprint of an organisation's token table, fed shard by shard: each document's id,
    tokens, label and split in order. Rows are hashed one by one, so how the table is cut into
    shards does not matter; another preprocessing (other parameters, other raw documents)
    changes it. Fed while a stage reads the shards anyway, so no shard is read twice."""

    def __init__(self) -> None:
        self._hasher = hashlib.sha256(json.dumps(["tokens", TOKEN_COLUMNS]).encode())

    def update(self, frame: pd.DataFrame) -> None:
        if len(frame):
            rows = frame[list(TOKEN_COLUMNS)].astype(str)
            self._hasher.update(pd.util.hash_pandas_object(rows, index=False).to_numpy().tobytes())

    def hexdigest(self) -> str:
        return self._hasher.hexdigest()[:WIDTH]


def tokens_fingerprint(frames: Iterable[pd.DataFrame]) -> str:
    """Fingerprint of a token table given as its shards (or one DataFrame in a list)."""
    hasher = TokensHasher()
    for frame in frames:
        hasher.update(frame)
    return hasher.hexdigest()


def _tensor_bytes(tensor: Any) -> bytes:
    import torch  # here, not at import: vocabulary and text stages never load torch for this

    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def models_fingerprint(models: Mapping[str, Any]) -> str:
    """Fingerprint of trained models (``TrainedModel``): their names and order, configs,
    vocabularies and exact weights; any retraining changes it."""
    hasher = hashlib.sha256()
    for name, model in models.items():
        head = [name, model.scenario, model.vocab_size, model.vocabulary, model.config.to_params()]
        hasher.update(json.dumps(head, sort_keys=True, default=str).encode())
        for key in sorted(model.state):
            tensor = model.state[key]
            hasher.update(json.dumps([key, str(tensor.dtype), list(tensor.shape)]).encode())
            hasher.update(_tensor_bytes(tensor))
    return hasher.hexdigest()[:WIDTH]


def candidates_fingerprint(candidates: Mapping[str, Any]) -> str:
    """Fingerprint of the coherence candidates (their words and pairs, not their lineage)."""
    pairs = np.asarray(candidates["pairs"], dtype=np.int64).reshape(-1, 2).tolist()
    return digest(["candidates", [str(w) for w in candidates["words"]], pairs])


def require_same(
    what: str, expected: str, artefacts: Mapping[str, str | None], remedy: str, *, built_from: str = "built from"
) -> None:
    """Stop unless every artefact's recorded ``what`` fingerprint is ``expected``.

    ``artefacts`` maps a name a user can find (a catalog entry, a file) to the fingerprint
    it recorded; ``None`` (written before fingerprints existed) is not judged. The error
    names each disagreeing artefact and says what to run again.
    """
    wrong: dict[str, list[str]] = {}
    for name, found in artefacts.items():
        if found is not None and found != expected:
            wrong.setdefault(found, []).append(name)
    if wrong:
        listed = "; ".join(
            f"{', '.join(names)} {'was' if len(names) == 1 else 'were'} {built_from} {what} {found}"
            for found, names in wrong.items()
        )
        raise LineageError(
            f"inputs from different runs: {listed}, but the current {what} is {expected}. "
            f"They would be read with each other's indices. {remedy}"
        )
