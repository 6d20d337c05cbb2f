"""``preprocess``: one template pipeline per organisation (namespace ``clients.<org>``)."""

from fedtopic_pipelines.pipelines.preprocess.pipeline import create_pipeline

__all__ = ["create_pipeline"]
