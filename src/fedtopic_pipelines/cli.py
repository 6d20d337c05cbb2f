"""Project CLI: Kedro's own ``run``, plus exporting ``--env`` as ``KEDRO_ENV``.

The organisations (one namespaced pipeline each) and the corpus are configuration, so
``register_pipelines`` must read the same environment as the run. Kedro does not pass
``--env`` to the registry; exporting it as ``KEDRO_ENV`` (which Kedro itself honours)
makes ``kedro run --env=smoke`` and ``KEDRO_ENV=smoke kedro run`` equivalent.
"""

from __future__ import annotations

import os
from typing import Any

import click
from kedro.framework.cli.project import run as kedro_run


@click.group(name="fedtopic_pipelines")
def cli() -> None:
    """Commands of the fedtopic_pipelines project."""


def _run(**kwargs: Any) -> Any:
    if kwargs.get("env"):
        os.environ["KEDRO_ENV"] = kwargs["env"]
    return kedro_run.callback(**kwargs)


cli.add_command(click.Command(name="run", params=kedro_run.params, callback=_run, help=kedro_run.help))
