"""Nodes of ``privacy``: thin glue over :mod:`fedtopic_pipelines.core.audit.report`."""

from __future__ import annotations

from typing import Any

from fedtopic_pipelines.core.audit.report import mlflow_series, privacy_report
from fedtopic_pipelines.core.config import PrivacyConfig, from_mapping
from fedtopic_pipelines.core.lineage import LineageError, models_fingerprint, require_same
from fedtopic_pipelines.core.model_store import TrainedModel
from fedtopic_pipelines.core.vocab.consensus import BowCorpus

RETRAIN = (
    "Run `kedro run --pipelines=train`, then `--pipelines=evaluate` and `--pipelines=privacy` "
    "(or the whole chain): the models must be trained on the current bags of words."
)
REEVALUATE = "Run `kedro run --pipelines=evaluate`, then `--pipelines=privacy`: metrics must score these models."
RECONSENSUS = "Run `kedro run --pipelines=vocab_consensus` again: it writes the report and every bag of words."


def check_privacy_inputs(
    models: dict[str, TrainedModel],
    metrics: dict[str, Any],
    consensus_report: dict[str, Any],
    bows: dict[str, BowCorpus],
) -> None:
    """The audit's inputs are of one run: the bags of words (its members and non-members) and the
    consensus report of one vocabulary, the models trained on it, the metrics of these models.
    Another run's artefact stops here, named, instead of a shape error inside an attack."""
    current = (consensus_report.get("lineage") or {}).get("vocabulary")
    if current is None:  # a report written before fingerprints: the bags of words' own vocabulary
        current = next((b.vocabulary for b in bows.values() if b.vocabulary), None)
    if current is not None:
        bow_vocabularies = {f"clients.{org}.bow": bow.vocabulary for org, bow in bows.items()}
        require_same("vocabulary", current, bow_vocabularies, RECONSENSUS, built_from="vectorised with")
        trained_on = {f"trained model '{name}'": model.vocabulary for name, model in models.items()}
        require_same("vocabulary", current, trained_on, RETRAIN, built_from="trained on")
    for org, bow in bows.items():  # models saved before fingerprints: at least the width
        for name, model in models.items():
            if model.vocab_size != bow.matrix.shape[1]:
                raise LineageError(
                    f"trained model '{name}' has {model.vocab_size} terms but clients.{org}.bow has "
                    f"{bow.matrix.shape[1]}: they come from different runs. {RETRAIN}"
                )
    recorded = (metrics.get("lineage") or {}).get("models")
    require_same("models", models_fingerprint(models), {"metrics": recorded}, REEVALUATE)


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
    check_privacy_inputs(models, metrics, consensus_report or {}, bows)
    splits = {org: (bow.subset("train").matrix, bow.subset("test").matrix) for org, bow in bows.items()}
    vocabulary = (consensus_report or {}).get("privacy")
    report = privacy_report(models, splits, privacy, metrics.get("models", {}), vocabulary)
    return report, mlflow_series(report)
