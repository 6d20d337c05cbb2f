"""Project CLI: Kedro's own ``run``, plus exporting ``--env`` as ``KEDRO_ENV``.

The organisations (one namespaced pipeline each) and the corpus are configuration, so
``register_pipelines`` must read the same environment as the run. Kedro does not pass
``--env`` to the registry; exporting it as ``KEDRO_ENV`` (which Kedro itself honours)
makes ``kedro run --env=smoke`` and ``KEDRO_ENV=smoke kedro run`` equivalent.

A refusal (a bad parameter, a busy project folder, artefacts of another run read together,
an input that another pipeline writes and that is absent) ends the command with its
one-paragraph message on stderr and exit status 2, not a traceback: the message names the
parameter, file or stage and what to do; a traceback of Kedro's and the hooks' frames buries it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from typing import Any

import click
from kedro.framework.cli.project import run as kedro_run

from fedtopic_pipelines.core.config import ConfigError
from fedtopic_pipelines.core.lineage import LineageError
from fedtopic_pipelines.core.runlock import ProjectBusyError
from fedtopic_pipelines.refusals import MissingInputError

REFUSALS = (ConfigError, ProjectBusyError, LineageError, MissingInputError)


def refusal(exc: BaseException) -> BaseException | None:
    """The refusal behind ``exc``: itself, or one it was raised from (Kedro wraps a dataset's
    error in its own ``DatasetError`` naming the dataset)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, REFUSALS):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__
    return None


@click.group(name="fedtopic_pipelines")
def cli() -> None:
    """Commands of the fedtopic_pipelines project."""


PIPED_COLUMNS = "200"


def widen_piped_logs(environ: MutableMapping[str, str], terminal: bool) -> None:
    """A log piped to a file or another program is as wide as ``COLUMNS``, else 200 columns:
    Rich falls back to 80 without a terminal and wraps every line (a node's name, a timing) in
    two. Rich reads ``COLUMNS`` each time it measures, so setting it before the run suffices."""
    if not terminal and "COLUMNS" not in environ:
        environ["COLUMNS"] = PIPED_COLUMNS


def _run(**kwargs: Any) -> Any:
    if kwargs.get("env"):
        os.environ["KEDRO_ENV"] = kwargs["env"]
    widen_piped_logs(os.environ, any(s.isatty() for s in (sys.stdin, sys.stdout, sys.stderr)))
    try:
        return kedro_run.callback(**kwargs)
    except Exception as exc:
        found = refusal(exc)
        if found is None:
            raise
        # the outermost message: Kedro's names the dataset before the dataset's own words
        click.echo(f"kedro run refused ({type(found).__name__}): {exc}", err=True)
        raise SystemExit(2) from None


cli.add_command(click.Command(name="run", params=kedro_run.params, callback=_run, help=kedro_run.help))
