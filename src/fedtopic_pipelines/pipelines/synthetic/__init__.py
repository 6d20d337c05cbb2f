"""``synthetic``: gFedNTM's Fig. 3 on LDA-generated organisations with a known ground truth."""

from fedtopic_pipelines.pipelines.synthetic.pipeline import create_pipeline

__all__ = ["create_pipeline"]
