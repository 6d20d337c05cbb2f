"""``train.model``'s config model per family: the built-in families' are registered here, a
family defined elsewhere (a plugin, a test) registers its own; the block is validated by
the config model of its ``family`` (ProdLDA's when absent)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import PlainValidator, SerializeAsAny
from pydantic_core import PydanticCustomError

from fedtopic_pipelines.core.capabilities import FamilyCapabilities
from fedtopic_pipelines.core.config.family import FamilyConfig
from fedtopic_pipelines.core.config.lda import LDAConfig
from fedtopic_pipelines.core.config.nmf import NMFConfig, NMFExactConfig
from fedtopic_pipelines.core.config.pctd import PCTDConfig
from fedtopic_pipelines.core.config.prodlda import CombinedTMConfig, ProdLDAConfig, ZeroShotTMConfig
from fedtopic_pipelines.core.config.word2vec import Word2VecConfig

DEFAULT_FAMILY = "prodlda"
# train.model's config model per family: the built-in ones below; core/families registers each
# family against its own, and a family defined elsewhere (a plugin, a test) registers both.
MODEL_CONFIGS: dict[str, type[FamilyConfig]] = {}


def register_model_config(cls: type[FamilyConfig]) -> type[FamilyConfig]:
    """Make ``cls`` the config model of ``train.model.family: <its family>``."""
    tag = cls.model_fields["family"].default
    if not isinstance(tag, str) or not tag:
        raise ValueError(f"{cls.__name__}: a family config model names its family by the default of 'family'")
    if MODEL_CONFIGS.get(tag, cls) is not cls:
        raise ValueError(f"family '{tag}' already has the config model {MODEL_CONFIGS[tag].__name__}")
    if not isinstance(getattr(cls, "capabilities", None), FamilyCapabilities):
        raise ValueError(f"{cls.__name__}: a family config model declares its capabilities")
    MODEL_CONFIGS[tag] = cls
    return cls


def unregister_model_config(tag: str) -> None:
    """Forget family ``tag``'s config model (a family registered for a while: tests)."""
    MODEL_CONFIGS.pop(tag, None)


_BUILT_IN = (
    ProdLDAConfig,
    CombinedTMConfig,
    ZeroShotTMConfig,
    Word2VecConfig,
    NMFConfig,
    PCTDConfig,
    NMFExactConfig,
    LDAConfig,
)
for _cls in _BUILT_IN:
    register_model_config(_cls)


def trained_by(pipeline: str) -> list[str]:
    """The families whose config declares that ``pipeline``'s run block trains them."""
    return [tag for tag, cls in MODEL_CONFIGS.items() if pipeline in cls.capabilities.pipelines]


def check_trained_by(pipeline: str, model: FamilyConfig) -> None:
    """Refuse a run block of ``pipeline`` whose ``train.model`` is of a family it does not train."""
    if pipeline not in model.capabilities.pipelines:
        raise ValueError(
            f"'{pipeline}.train.model.family' is {model.family!r}; this pipeline trains {trained_by(pipeline)}"
        )


def _model_config(value: Any) -> FamilyConfig:
    """``train.model``: the config model of the block's ``family`` (default ProdLDA's), looked up
    when the block is validated, so a family registered later is known."""
    if isinstance(value, FamilyConfig) and MODEL_CONFIGS.get(value.family) is type(value):
        return value  # already validated as its registered family's
    if isinstance(value, FamilyConfig):
        value = value.model_dump()
    if not isinstance(value, Mapping):
        raise PydanticCustomError("model_type", "Input should be a mapping of parameters")
    tag = value.get("family", DEFAULT_FAMILY)
    cls = MODEL_CONFIGS.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise PydanticCustomError(
            "union_tag_invalid", "unknown family {tag}", {"tag": tag, "expected": list(MODEL_CONFIGS)}
        )
    return cls.model_validate(dict(value))


ModelConfig = SerializeAsAny[Annotated[FamilyConfig, PlainValidator(_model_config)]]
