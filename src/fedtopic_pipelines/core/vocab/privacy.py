"""The vocabulary stage under an honest-but-curious server: keyed proposals, count noise, attack (d).

Without a defence every organisation sends its top-N terms with their counts in the clear,
so the server reads each organisation's *rare* terms: those no other organisation proposes
(a product code, a client's name, a signature). :func:`rare_term_attack` measures that leak
on what the server received (its *view*), against the truth only the experimenter has.

The defence (``privacy.vocab_k``, ``privacy.vocab_keyed``; docs/vocabulary.md) sends keyed
digests instead of terms. Every organisation holds one secret key, the server does not. A
term's *opening* is ``HMAC-SHA256(key, term)``; its *digest* is ``SHA-256(opening || term)``.
The server counts holders per digest, keeps the digests that pass the privacy rule and the
consensus floors, and asks the organisations to reveal those alone (term and opening): it
checks each reveal against the digest it received, so an organisation that reveals another
term than it proposed is caught by name, and it never reads a term it did not keep. Without
the key the server cannot test a guess against a digest (a dictionary attack needs the key);
an opening reveals nothing of any other term (HMAC is a pseudo-random function).

``privacy.vocab_count_noise`` > 0 adds Laplace noise of that scale to each proposed count
before it is sent (:func:`noisy_counts`): it blurs *how often* an organisation uses a term.
It does not hide *which* terms it proposes (the set of terms leaks without k), and the top-N
selection itself reads the exact counts, so no formal differential-privacy guarantee is
claimed for the proposal.

This module is plain Python (``hmac``, ``hashlib`` from the standard library, numpy).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

KEY_ENV = "FEDTOPIC_VOCAB_KEY"  # every organisation's node holds it; the server must not
MIN_KEY_BYTES = 16
_DOMAIN = b"fedtopic-vocabulary-term-v1\x00"
_NOISE_DOMAIN = b"fedtopic-vocabulary-count-noise-v1\x00"
# In one process every party is this process: the key cannot be hidden from the "server" there,
# so a fixed, public key is used when none is set (the exchange runs, the protection does not).
IN_PROCESS_KEY = hashlib.sha256(b"fedtopic in-process vocabulary key: public, protects nothing").digest()
_warned: list[bool] = []  # the public key is announced once per process


class VocabularyPrivacyError(ValueError):
    """A vocabulary message breaks the keyed exchange; the message names the organisation."""


def vocabulary_key(environ: Mapping[str, str] | None = None, *, required: bool = False) -> bytes:
    """The organisations' shared key, from the environment variable ``FEDTOPIC_VOCAB_KEY``.

    ``required``: a node in its own process (Flower) must have it; otherwise (one process plays
    every party: Kedro, the in-process engine) a missing key falls back to :data:`IN_PROCESS_KEY`,
    which is public, said once in the log.
    """
    environ = os.environ if environ is None else environ
    raw = environ.get(KEY_ENV, "")
    if not raw:
        if required:
            raise VocabularyPrivacyError(
                f"'privacy.vocab_keyed' is true but the environment variable {KEY_ENV} is not set on this "
                f"organisation's node: every organisation's node needs the same secret key (the server must not "
                f"have it), e.g. {KEY_ENV}=$(python -c 'import secrets; print(secrets.token_hex(32))')"
            )
        if not _warned:
            _warned.append(True)
            # INFO, not a warning: the configured default (vocab_k 2) runs this in every in-process run,
            # where no key could hide anything from a server that is this same process
            logger.info(
                "%s is not set: in one process every party is this process, so the vocabulary exchange uses a "
                "public key (its digests and count noise hide nothing here; docs/vocabulary.md)",
                KEY_ENV,
            )
        return IN_PROCESS_KEY
    key = raw.encode()
    if len(key) < MIN_KEY_BYTES:
        raise VocabularyPrivacyError(
            f"the environment variable {KEY_ENV} holds {len(key)} bytes; use at least {MIN_KEY_BYTES} random "
            "bytes (a short key lets the server try keys and terms until a digest matches)"
        )
    return key


def term_opening(key: bytes, term: str) -> str:
    """``HMAC-SHA256(key, term)`` (hex): what an organisation reveals with a kept term."""
    return hmac.new(key, _DOMAIN + term.encode("utf-8"), hashlib.sha256).hexdigest()


def digest_of(opening: str, term: str) -> str:
    """``SHA-256(opening || term)`` (hex): the digest a term travels as before it is kept."""
    return hashlib.sha256(bytes.fromhex(opening) + term.encode("utf-8")).hexdigest()


def term_digest(key: bytes, term: str) -> str:
    """The keyed digest of ``term``: the same for every organisation holding ``key``."""
    return digest_of(term_opening(key, term), term)


def noise_seed(secret: bytes, proposal: Mapping[str, int]) -> int:
    """A seed for an organisation's count noise: from a secret it holds and its exact proposal, so
    the same proposal always gets the same noise, and whoever lacks either cannot recompute it."""
    body = json.dumps(sorted((str(t), int(c)) for t, c in proposal.items())).encode()
    return int.from_bytes(hmac.new(secret, _NOISE_DOMAIN + body, hashlib.sha256).digest()[:8], "big")


def noisy_counts(proposal: Mapping[str, int], scale: float, seed: int) -> dict[str, int]:
    """Each count plus Laplace(0, ``scale``) noise, rounded and floored at 0 (deterministic under
    ``seed``; the terms keep their order). ``scale`` 0 returns the counts unchanged."""
    if scale < 0:
        raise ValueError(f"'privacy.vocab_count_noise' is {scale}; it must be >= 0")
    if scale == 0:
        return {t: int(c) for t, c in proposal.items()}
    noise = np.random.default_rng(seed).laplace(0.0, scale, size=len(proposal))
    return {t: max(0, round(float(c + e))) for (t, c), e in zip(proposal.items(), noise, strict=True)}


def check_reveal(org: str, requested: Iterable[str], offered: Iterable[str], reveal: Mapping[str, Any]) -> dict:
    """The server's check of one organisation's reveal: ``reveal`` maps a digest to ``(term,
    opening)``; it must open exactly the ``requested`` digests the organisation ``offered``, each
    to a term whose digest it is. Returns ``{digest: term}``; a lie raises naming ``org``."""
    due = set(requested) & set(offered)
    extra = sorted(set(reveal) - due)
    missing = sorted(due - set(reveal))
    if extra or missing:
        raise VocabularyPrivacyError(
            f"organisation '{org}' revealed {len(reveal)} digests; {len(due)} were asked of it "
            f"({len(missing)} not revealed, {len(extra)} it was not asked for or never proposed)"
        )
    terms = {}
    for digest, pair in reveal.items():
        term, opening = pair if isinstance(pair, list | tuple) and len(pair) == 2 else (None, None)
        if not isinstance(term, str) or not isinstance(opening, str) or not _opens(digest, term, opening):
            raise VocabularyPrivacyError(
                f"organisation '{org}' revealed a term that does not match the digest it proposed ({digest[:12]}...): "
                "its reveal is refused"
            )
        terms[digest] = term
    return terms


def _opens(digest: str, term: str, opening: str) -> bool:
    try:
        return hmac.compare_digest(digest_of(opening, term), digest)
    except ValueError:  # an opening that is not hex
        return False


def server_view(
    offers: Mapping[str, Mapping[str, int]],
    keyed: bool,
    revealed: Mapping[str, Mapping[str, str]] | None = None,
    vocabulary: Iterable[str] = (),
) -> dict[str, Any]:
    """What the server legitimately received, as JSON: each organisation's offer (terms, or
    digests when ``keyed``, with the counts as sent), the terms revealed for kept digests (per
    organisation) and the published vocabulary."""
    return {
        "keyed": bool(keyed),
        "offers": {org: {str(t): int(c) for t, c in offer.items()} for org, offer in offers.items()},
        "revealed": {org: dict(r) for org, r in (revealed or {}).items()},
        "vocabulary": list(vocabulary),
    }


def rare_terms(truth: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """Each organisation's terms that no other organisation holds."""
    sets = {org: set(terms) for org, terms in truth.items()}
    held = Counter(t for terms in sets.values() for t in terms)
    return {org: {t for t in terms if held[t] == 1} for org, terms in sets.items()}


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def rare_term_attack(view: Mapping[str, Any], truth: Mapping[str, Iterable[str]]) -> dict[str, Any]:
    """Attack (d): from the server's ``view`` (:func:`server_view`), guess each organisation's
    rare terms; score the guesses against ``truth`` (each organisation's proposed terms).

    The attacker counts the organisations that sent each token (a term, or a digest) and, for
    every organisation, guesses the tokens only it sent that it can read: a plain term, or a
    digest some organisation opened. Precision is the share of guesses that are rare terms of
    that organisation (None without a guess), recall the share of its rare terms guessed (None
    when it has none); ``pooled`` sums over organisations.
    """
    offers = view["offers"]
    keyed = bool(view.get("keyed", False))
    readable: dict[str, str] = {}
    if keyed:
        for opened in view.get("revealed", {}).values():
            readable.update(opened)
    holders = Counter(token for offer in offers.values() for token in set(offer))
    rare = rare_terms(truth)
    per: dict[str, dict[str, Any]] = {}
    for org in truth:
        tokens = [t for t in offers.get(org, {}) if holders[t] == 1]
        guesses = {readable.get(t) if keyed else t for t in tokens} - {None}
        correct = len(guesses & rare[org])
        per[org] = {
            "rare_terms": len(rare[org]),
            "guesses": len(guesses),
            "correct": correct,
            "precision": _ratio(correct, len(guesses)),
            "recall": _ratio(correct, len(rare[org])),
        }
    totals = {k: sum(p[k] for p in per.values()) for k in ("rare_terms", "guesses", "correct")}
    pooled = {
        **totals,
        "precision": _ratio(totals["correct"], totals["guesses"]),
        "recall": _ratio(totals["correct"], totals["rare_terms"]),
    }
    return {"attack": "rare_terms", "keyed": keyed, "organisations": per, "pooled": pooled}
