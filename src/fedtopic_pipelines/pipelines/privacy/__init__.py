"""``privacy``: the run's privacy summary (data/08_reporting/privacy.json; docs/privacy.md)."""

from fedtopic_pipelines.pipelines.privacy.pipeline import create_pipeline

__all__ = ["create_pipeline"]
