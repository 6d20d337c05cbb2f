"""``evaluate``: each organisation scores every model on its own data; the server summarises."""

from fedtopic_pipelines.pipelines.evaluate.pipeline import create_pipeline

__all__ = ["create_pipeline"]
