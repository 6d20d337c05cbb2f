"""One run's privacy summary (``data/08_reporting/privacy.json``; docs/privacy.md).

What the run's ``privacy`` switch set, the privacy it spent (epsilon at delta, by RDP and PLD,
from the federated model's history), what a curious server could learn after it, and what the
models are worth (the pooled metrics evaluation computed). The attack measured here is (c),
membership inference on each topic model the server holds, against every organisation's own
held-out documents, and (d), the vocabulary attack the consensus stage recorded. Attacks (a)
and (b) need the server's record of individual updates during training: ``bench/bench_privacy.py``
measures them, with every defence.

Scoring the attacks needs ground truth that only the organisations hold (which documents they
trained on): this is an audit, run where the whole run is visible (Kedro's single process),
not something the server of a deployment computes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from fedtopic_pipelines.core.audit.attacks import membership, prodlda_document_losses
from fedtopic_pipelines.core.capabilities import DataKind
from fedtopic_pipelines.core.config import PrivacyConfig
from fedtopic_pipelines.core.model_store import TrainedModel

logger = logging.getLogger(__name__)

EPSILON_KEYS = ("epsilon_rdp", "epsilon_pld", "sigma")


def _sample(rows: int, most: int, rng: np.random.Generator) -> np.ndarray:
    return np.sort(rng.choice(rows, size=most, replace=False)) if rows > most else np.arange(rows)


def membership_audit(
    model: TrainedModel,
    splits: Mapping[str, tuple[Any, Any]],
    most: int = 300,
    seed: int = 0,
) -> dict[str, Any]:
    """Attack (c) on ``model``: per organisation, its training documents (members) against its
    held-out ones (non-members), balanced to at most ``most`` of each, scored by ROC AUC of the
    document's loss; ``pooled`` scores all organisations' documents together."""
    network = model.to_model("cpu").eval()
    rng = np.random.default_rng(seed)
    per_org, members, non_members = {}, [], []
    for org, (train, test) in splits.items():
        n = min(train.shape[0], test.shape[0], most)
        if n < 2:
            per_org[org] = {"skipped": f"{n} document(s) to compare"}
            continue
        inside = prodlda_document_losses(network, train[_sample(train.shape[0], n, rng)], seed=seed, per_word=True)
        outside = prodlda_document_losses(network, test[_sample(test.shape[0], n, rng)], seed=seed, per_word=True)
        per_org[org] = _finite(membership(inside, outside).as_dict())
        members.append(inside)
        non_members.append(outside)
    pooled = _finite(membership(np.concatenate(members), np.concatenate(non_members)).as_dict()) if members else None
    return {"pooled": pooled, "per_organisation": per_org}


def _finite(values: Mapping[str, float]) -> dict[str, float | None]:
    """JSON has no NaN: an unset score (no threshold given) is null."""
    return {k: (v if math.isfinite(v) else None) for k, v in values.items()}


def spent(model: TrainedModel) -> dict[str, Any] | None:
    """The privacy the model's federated training spent: the last round's epsilon (DP runs record
    it at their last round), or None without DP."""
    for record in reversed(model.history):
        if "epsilon_rdp" in record.metrics:
            values = {k: float(record.metrics[k]) for k in EPSILON_KEYS if k in record.metrics}
            dp = model.config.privacy.dp
            # what one (epsilon, delta) is about: an organisation's whole update, or one of its documents
            protects = "one document of an organisation" if dp.level == "sample" else "one organisation's data"
            return {**values, "rounds": len(model.history), "delta": dp.delta, "protects": protects}
    return None


def privacy_report(
    models: Mapping[str, TrainedModel],
    splits: Mapping[str, tuple[Any, Any]],
    privacy: PrivacyConfig,
    quality: Mapping[str, Mapping[str, Any]],
    vocabulary: Mapping[str, Any] | None = None,
    most: int = 300,
) -> dict[str, Any]:
    """The run's summary: defences, epsilon per model, attack (c) per model (when
    ``privacy.attacks``), attack (d) from the consensus (``vocabulary``), and each model's
    pooled quality (``quality``: metrics.json's models)."""
    report: dict[str, Any] = {
        "defences": privacy.to_params(),
        "epsilon": {},
        "attacks": {"membership": {}, "vocabulary": vocabulary},
        "quality": {},
        "not_measured_here": "attacks (a) gradient words and (b) Word2Vec rows: bench/bench_privacy.py",
    }
    keep = ("c_npmi", "c_v", "u_mass", "topic_diversity")
    for name, model in models.items():
        report["quality"][name] = {k: quality.get(name, {}).get(k) for k in keep}
        epsilon = spent(model)
        if epsilon is not None:
            report["epsilon"][name] = epsilon
    if not privacy.attacks:
        report["attacks"]["membership"] = "off (privacy.attacks: false)"
        return report
    audited = [n for n, m in models.items() if m.config.model.capabilities.membership_audit]
    for name, model in models.items():
        if name not in audited:
            family = model.config.model.family
            contextual = model.config.model.capabilities.data_kind == DataKind.CONTEXTUAL
            why = "needs each document's embedding" if contextual else "no per-document loss"
            report["attacks"]["membership"][name] = {"skipped": f"family {family}: {why}"}
    for name in tqdm(audited, desc="privacy audit", leave=False):
        report["attacks"]["membership"][name] = membership_audit(models[name], splits, most)
        pooled = report["attacks"]["membership"][name]["pooled"]
        if pooled is not None:
            logger.info("privacy audit %s: membership AUC %.3f (0.5: nothing learnt)", name, pooled["auc"])
    return report


def mlflow_series(report: Mapping[str, Any]) -> dict[str, list[dict[str, float]]]:
    """The report's numbers as MLflow metrics (``privacy.<model>.<name>``), one step each."""
    out: dict[str, list[dict[str, float]]] = {}

    def put(key: str, value: Any) -> None:
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(float(value)):
            out[key] = [{"step": 0, "value": float(value)}]

    for name, values in report["epsilon"].items():
        for key, value in values.items():
            put(f"{name}.{key}", value)
    membership = report["attacks"]["membership"]
    if isinstance(membership, Mapping):
        for name, result in membership.items():
            pooled = result.get("pooled") if isinstance(result, Mapping) else None
            if isinstance(pooled, Mapping):
                put(f"{name}.membership_auc", pooled.get("auc"))
    return out
