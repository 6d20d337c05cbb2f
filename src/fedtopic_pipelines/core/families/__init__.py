"""The registry of federated model families: ``train.model.family`` -> its implementation.

Training, checkpoints, the Kedro nodes, the Flower ServerApp and ClientApp, evaluation and
the contract tests all build a family's model, client and strategy through
:func:`get_family`, never by naming a model class. Registering a family registers its config
model as ``train.model``'s for its name; a family defined outside this package (a plugin, a
test) is added with :func:`register` and nothing else.
"""

from __future__ import annotations

from fedtopic_pipelines.core.config import (
    CombinedTMConfig,
    ConfigError,
    ZeroShotTMConfig,
    register_model_config,
    unregister_model_config,
)
from fedtopic_pipelines.core.families.ctm import ContextualFamily
from fedtopic_pipelines.core.families.lda import LDAFamily
from fedtopic_pipelines.core.families.nmf import NMFFamily
from fedtopic_pipelines.core.families.nmf_exact import ExactNMFFamily
from fedtopic_pipelines.core.families.pctd import PCTDFamily
from fedtopic_pipelines.core.families.prodlda import ProdLDAFamily
from fedtopic_pipelines.core.families.word2vec import Word2VecFamily
from fedtopic_pipelines.core.federated.family import LocalRounds, ModelFamily, Streaming
from fedtopic_pipelines.core.federated.messages import UpdateKind

_REGISTRY: dict[str, ModelFamily] = {}


def register(family: ModelFamily) -> ModelFamily:
    """Add ``family`` under its name, with its config model as ``train.model``'s for that name."""
    if family.name in _REGISTRY:
        raise ValueError(f"model family '{family.name}' is registered twice")
    if family.config_type.model_fields["family"].default != family.name:
        raise ValueError(f"model family '{family.name}': its config class {family.config_type.__name__} is another's")
    check_declaration(family)
    register_model_config(family.config_type)
    _REGISTRY[family.name] = family
    return family


def unregister(name: str) -> None:
    """Remove family ``name`` and its config model (a family registered for a while: tests)."""
    _REGISTRY.pop(name, None)
    unregister_model_config(name)


def check_declaration(family: ModelFamily) -> None:
    """Refuse a family whose declaration and abilities disagree: every round needs either a
    batch stream (:class:`Streaming`) or its own local computation (:class:`LocalRounds`); a
    weights update kind trains under weights rules only."""
    if not isinstance(family, Streaming | LocalRounds):
        raise ValueError(f"model family '{family.name}' has neither a batch stream nor local rounds")
    if family.update_kind == UpdateKind.WEIGHTS and "fedsgd" in family.capabilities.rules:
        raise ValueError(f"model family '{family.name}' sends weights: FedSGD is not one of its rules")


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
register(ExactNMFFamily())
register(PCTDFamily())
register(LDAFamily())
