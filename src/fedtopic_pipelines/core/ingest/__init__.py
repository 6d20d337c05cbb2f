"""Streaming ingestion of large corpora (Wikipedia dumps, S2ORC shards) into per-organisation shards."""
