"""What a model family declares about itself, so that nobody else asks for its name.

Configuration, privacy, the engine and the pipelines need to know a few things about the
family a run trains: what its organisations' data are, which aggregation rules, local
optimisers and privacy defences it honours (and why not the others), which pipelines train
it, and what evaluation can read from it. Each family's config model carries one
:class:`FamilyCapabilities` (``capabilities``); the family exposes the same object. Code
outside the families reads these fields instead of testing ``family == "..."``.

Standard library only: the config models on the ground floor import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

WEIGHT_RULES = ("fedavg", "fedadagrad", "fedyogi", "fedadam")
PRIVACY_DEFENCES = frozenset({"dp", "robust", "secure_aggregation"})


class DataKind(StrEnum):
    """What an organisation's training data are for the family."""

    BAG_OF_WORDS = "bag_of_words"
    CONTEXTUAL = "contextual"  # a bag of words and each document's sentence embedding, row for row
    SEQUENCES = "sequences"  # common-vocabulary id sequences (word order kept)


@dataclass(frozen=True)
class FamilyCapabilities:
    """A family's declaration (see the module docstring).

    ``rules``: the aggregation rules it trains under, ``default_rule`` the one a null
    ``train.aggregation.rule`` means; ``rule_refusal`` the reason given for any other (a
    template over ``{rule}`` and ``{rules}``). ``optimizers``: its local optimisers (None:
    any), refused with ``optimizer_refusal`` (over ``{name}``). ``privacy``: the defences of
    the ``privacy`` block it honours (``dp``, ``robust``, ``secure_aggregation``), refused with
    ``privacy_refusal``. ``in_default_chain``: whether the default chain's ``train`` node
    trains it; ``pipelines``: the run blocks of other pipelines that train it (``word2vec``,
    ``fednmf``, ``pctd``). ``probabilistic``: it gives each document a word distribution (perplexity);
    ``membership_audit``: the privacy audit's membership-inference attack reads its
    per-document loss. ``reads_broadcast``: its client may read the broadcast tensors in place
    (no copy) because a local step never writes them. ``local_steps``: under a weights rule its
    local update can stop after ``train.aggregation.local_steps`` batches (not whole epochs).
    """

    data_kind: DataKind
    rules: frozenset[str] = frozenset({"fedsgd", *WEIGHT_RULES})
    default_rule: str = "fedsgd"
    rule_refusal: str = "'train.aggregation.rule' is {rule!r}; this family trains with one of {rules}"
    optimizers: frozenset[str] | None = None
    optimizer_refusal: str = "'train.optimizer.name' is {name!r}; this family's local optimisers are {optimizers}"
    privacy: frozenset[str] = PRIVACY_DEFENCES
    privacy_refusal: str = ""
    in_default_chain: bool = True
    pipelines: frozenset[str] = frozenset()
    probabilistic: bool = True
    membership_audit: bool = False
    reads_broadcast: bool = False
    local_steps: bool = True
    every_round: bool = False

    def __post_init__(self) -> None:
        if self.default_rule not in self.rules:
            raise ValueError(f"a family's default rule {self.default_rule!r} must be one of its rules {self.rules}")
        if not self.privacy <= PRIVACY_DEFENCES:
            raise ValueError(f"unknown privacy defences {sorted(self.privacy - PRIVACY_DEFENCES)}")
        if self.privacy != PRIVACY_DEFENCES and not self.privacy_refusal:
            raise ValueError("a family that refuses a privacy defence says why (privacy_refusal)")

    def trained_elsewhere(self) -> str | None:
        """Where a family the default chain does not train is trained (None: the chain trains it)."""
        if self.in_default_chain:
            return None
        pipeline = sorted(self.pipelines)[0]
        return (
            f"it trains with `kedro run --pipelines={pipeline}` from the '{pipeline}.train' block (docs/{pipeline}.md)"
        )

    def refuse_rule(self, rule: str) -> str | None:
        """The reason ``rule`` is refused, or None when the family trains under it."""
        if rule in self.rules:
            return None
        allowed = [r for r in ("fedsgd", *WEIGHT_RULES) if r in self.rules]
        refusal = self.rule_refusal.format(rule=rule, rules=allowed)
        if "{rules}" in self.rule_refusal:
            return refusal
        # a reason alone leaves the user guessing what to write instead
        return f"{refusal} (allowed: null, meaning {self.default_rule!r}, or one of {allowed})"

    def refuse_optimizer(self, name: str) -> str | None:
        """The reason local optimiser ``name`` is refused, or None."""
        if self.optimizers is None or name in self.optimizers:
            return None
        return self.optimizer_refusal.format(name=name, optimizers=sorted(self.optimizers))

    def refuse_privacy(self, asked: set[str]) -> str | None:
        """The reason the defences ``asked`` are refused, or None when the family honours them all."""
        return None if asked <= self.privacy else self.privacy_refusal
