"""``realdata``: gFedNTM's real-data experiment (Fig. 4): AMWMD between nodes' and federated models' topics."""

from fedtopic_pipelines.pipelines.realdata.pipeline import create_pipeline

__all__ = ["create_pipeline"]
