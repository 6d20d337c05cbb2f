"""The project CLI: a refusal is a message, wherever Kedro wrapped it."""

from __future__ import annotations

from kedro.io import DatasetError

from fedtopic_pipelines.cli import refusal, widen_piped_logs
from fedtopic_pipelines.core.config import ConfigError
from fedtopic_pipelines.refusals import MissingInputError


def _raised(outer: Exception, inner: Exception) -> Exception:
    try:
        try:
            raise inner
        except Exception as exc:
            raise outer from exc
    except Exception as wrapped:
        return wrapped


def test_a_refusal_is_found_through_kedros_wrapping_and_nothing_else_is() -> None:
    missing = MissingInputError("no trained models at 'x': run the train pipeline first")
    wrapped = _raised(DatasetError("trained_models: no trained models ..."), missing)
    assert refusal(wrapped) is missing
    config = ConfigError("parameter 'train.max_steps' is -1")
    assert refusal(config) is config
    assert refusal(_raised(DatasetError("trained_models: corrupt file"), ValueError("bad bytes"))) is None
    assert refusal(RuntimeError("a bug")) is None


def test_a_piped_log_is_200_columns_unless_columns_says_otherwise() -> None:
    piped: dict[str, str] = {}
    widen_piped_logs(piped, terminal=False)
    assert piped == {"COLUMNS": "200"}
    chosen = {"COLUMNS": "120"}
    widen_piped_logs(chosen, terminal=False)
    assert chosen == {"COLUMNS": "120"}
    at_a_terminal: dict[str, str] = {}
    widen_piped_logs(at_a_terminal, terminal=True)  # Rich measures the terminal itself
    assert at_a_terminal == {}
