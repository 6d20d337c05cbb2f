"""The registry of federated model families: ``train.model.family`` -> its implementation.

Training, checkpoints, the Kedro nodes, the Flower ServerApp and ClientApp, evaluation and
the contract tests all build a family's model, client and strategy through
:func:`get_family`, never by naming a model class. Each family's config class lives in
``core/config.py`` (the ``train.model`` discriminated union).
"""

from __future__ import annotations

from fedtopic_pipelines.core.config import FAMILY_TAGS, CombinedTMConfig, ConfigError, ZeroShotTMConfig
from fedtopic_pipelines.core.families.ctm import ContextualFamily
from fedtopic_pipelines.core.families.nmf import NMFFamily
from fedtopic_pipelines.core.families.pctd import PCTDFamily
from fedtopic_pipelines.core.families.prodlda import ProdLDAFamily
from fedtopic_pipelines.core.families.word2vec import Word2VecFamily
from fedtopic_pipelines.core.federated.family import ModelFamily

_REGISTRY: dict[str, ModelFamily] = {}


def register(family: ModelFamily) -> ModelFamily:
    """Add ``family`` under its name; its config class must be one of ``train.model``'s union."""
    if family.name in _REGISTRY:
        raise ValueError(f"model family '{family.name}' is registered twice")
    if family.name not in FAMILY_TAGS:
        raise ValueError(f"model family '{family.name}' has no config class in core/config.py (FAMILY_TAGS)")
    if family.config_type.model_fields["family"].default != family.name:
        raise ValueError(f"model family '{family.name}': its config class {family.config_type.__name__} is another's")
    _REGISTRY[family.name] = family
    return family


def get_family(name: str) -> ModelFamily:
    """The family registered as ``name``; the error names the parameter and the choices."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"parameter 'train.model.family' is {name!r}; expected one of {sorted(_REGISTRY)}") from None


def families() -> list[str]:
    """Every registered family's name (the contract tests run over them)."""
    return sorted(_REGISTRY)


register(ProdLDAFamily())
register(ContextualFamily("combinedtm", CombinedTMConfig))
register(ContextualFamily("zeroshottm", ZeroShotTMConfig))
register(Word2VecFamily())
register(NMFFamily())
register(PCTDFamily())
