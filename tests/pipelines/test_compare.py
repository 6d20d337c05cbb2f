"""The leaderboard's pure parts: the recommendation says what the figures support, the Markdown
shows every row, and each scenario's bytes are what its organisations sent."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from fedtopic_pipelines.core.federated.server import RoundRecord
from fedtopic_pipelines.pipelines.compare.nodes import _bytes_sent, markdown, recommend


def _table(rows: list[tuple[str, str, float | None, float | None]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["family", "scenario", "c_npmi", "macro_f1"])


def test_the_recommendation_names_the_best_federated_family_its_gaps_and_the_seed_caveat() -> None:
    table = _table(
        [
            ("a", "federated", 0.10, 0.50),
            ("a", "centralized", 0.12, 0.55),
            ("a", "non_collaborative", 0.04, 0.40),
            ("b", "federated", 0.07, 0.60),
            ("b", "centralized", 0.30, 0.70),  # a better centralized model does not make b the federated choice
        ]
    )
    text = recommend(table, "c_npmi")
    assert text.startswith("Among federated models, a has the highest pooled c_npmi (0.100), 0.030 above b")
    assert "-0.020 against pooling the documents" in text and "+0.060 against each organisation alone" in text
    assert "by macro-F1 the best federated family is b (0.600)" in text
    assert text.endswith("gaps smaller than a seed's spread are not established.")


def test_no_federated_value_means_no_recommendation() -> None:
    text = recommend(_table([("a", "centralized", 0.1, 0.5), ("a", "federated", None, None)]), "c_npmi")
    assert text == "No federated model has a pooled c_npmi: nothing to recommend from these figures."


def test_the_markdown_has_a_row_per_family_and_scenario_and_says_n_a_for_a_missing_value() -> None:
    table = _table([("a", "federated", 0.1, None), ("a", "centralized", 0.2, 0.5)])
    lines = markdown(table, "a sentence").splitlines()
    assert lines[0] == "| family | scenario | c_npmi | macro_f1 |"
    assert lines[2] == "| a | federated | 0.100 | n/a |" and lines[-1] == "a sentence"


def test_bytes_sent_are_the_accepted_updates_of_each_organisation_and_none_for_the_pooled_baseline() -> None:
    history = [
        RoundRecord(round=0, metrics={}, num_examples=2, client_bytes={"x": 10, "y": 4}),
        RoundRecord(round=1, metrics={}, num_examples=1, client_bytes={"x": 10}),  # y left out
    ]
    trained = SimpleNamespace(history=history)
    assert _bytes_sent({"federated": trained}, "federated", ["x", "y"]) == {"x": 20, "y": 4}
    assert _bytes_sent({}, "non_collaborative", ["x", "y"]) == {"x": 0, "y": 0}
    assert _bytes_sent({"centralized": trained}, "centralized", ["x", "y"]) is None
