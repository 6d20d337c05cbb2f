"""``fednmf``: FedNMF+MI against NMF, LDA and FedLDA on the current corpus (seed 004)."""

from fedtopic_pipelines.pipelines.fednmf.pipeline import create_pipeline

__all__ = ["create_pipeline"]
