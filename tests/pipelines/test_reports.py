"""A report's numbers as MLflow metrics."""

from __future__ import annotations

from fedtopic_pipelines.pipelines.reports import metric_series


def test_every_finite_number_becomes_a_dotted_metric_and_nothing_else_does() -> None:
    report = {
        "merged_terms": 4779,
        "floors": {"min_total_count": 50, "min_total_count_lowered_from": None},
        "removed_by_floors": {"total": {"terms": 2803, "proposed_count": 179542}},
        "privacy": {"keyed": True, "attack": "rare_terms", "recall": 0.25, "precision": float("nan")},
        "organisations": ["a", "b"],
    }
    assert metric_series(report) == {
        "merged_terms": [{"step": 0, "value": 4779.0}],
        "floors.min_total_count": [{"step": 0, "value": 50.0}],
        "removed_by_floors.total.terms": [{"step": 0, "value": 2803.0}],
        "removed_by_floors.total.proposed_count": [{"step": 0, "value": 179542.0}],
        "privacy.recall": [{"step": 0, "value": 0.25}],
    }
