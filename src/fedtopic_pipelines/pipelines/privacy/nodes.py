"""Nodes of ``privacy``: thin glue over :mod:`fedtopic_pipelines.core.audit.report`."""

from __future__ import annotations

from typing import Any

from fedtopic_pipelines.core.audit.report import mlflow_series, privacy_report
from fedtopic_pipelines.core.config import PrivacyConfig, from_mapping
from fedtopic_pipelines.core.model_store import TrainedModel
from fedtopic_pipelines.core.vocab.consensus import BowCorpus


def report_privacy(
    models: dict[str, TrainedModel],
    metrics: dict[str, Any],
    consensus_report: dict[str, Any],
    params: dict[str, Any],
    **bows: BowCorpus,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """privacy.json (defences, epsilon, the membership and vocabulary attacks, pooled quality) and
    its numbers for MLflow (``privacy.<model>.<metric>``). ``bows``: each organisation's bag of
    words, whose train and test splits are the audit's members and non-members."""
    privacy = from_mapping(PrivacyConfig, params, "privacy")
    splits = {org: (bow.subset("train").matrix, bow.subset("test").matrix) for org, bow in bows.items()}
    vocabulary = (consensus_report or {}).get("privacy")
    report = privacy_report(models, splits, privacy, metrics.get("models", {}), vocabulary)
    return report, mlflow_series(report)
