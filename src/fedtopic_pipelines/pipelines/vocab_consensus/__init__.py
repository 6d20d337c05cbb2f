"""``vocab_consensus``: server-side merge of term counts, client-side vectorisation."""

from fedtopic_pipelines.pipelines.vocab_consensus.pipeline import create_pipeline

__all__ = ["create_pipeline"]
