"""Dataset names shared by the pipelines.

Private datasets live in an organisation's namespace (``clients.<org>.*``); what
crosses to the server has a flat name (``term_counts__<org>``, ``evaluation__<org>``),
which makes the privacy boundary visible in the catalog.
"""


def client(org: str, dataset: str) -> str:
    """A dataset private to organisation ``org``."""
    return f"clients.{org}.{dataset}"


def shared(dataset: str, org: str) -> str:
    """An aggregate that organisation ``org`` sends to the server."""
    return f"{dataset}__{org}"


def ingestion_outputs(organisations: list[str]) -> dict[str, str]:
    """Outputs of an ingestion node: each organisation's raw table and the ingestion report."""
    return {**{f"raw__{org}": client(org, "raw_documents") for org in organisations}, "report": "ingestion_report"}
