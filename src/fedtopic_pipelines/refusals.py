"""Why a run cannot start its work, told as a message rather than a traceback (``cli.py``)."""

from __future__ import annotations

from kedro.io import DatasetError


class MissingInputError(DatasetError):
    """An input that another pipeline writes is absent; the message names the pipeline to run."""
