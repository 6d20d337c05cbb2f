"""Dataset names shared by the pipelines.

Private datasets live in an organisation's namespace (``clients.<org>.*``); what
crosses to the server has a flat name (``vocabulary_proposal__<org>``, ``evaluation__<org>``),
which makes the privacy boundary visible in the catalog.
"""


def client(org: str, dataset: str) -> str:
    """A dataset private to organisation ``org``."""
    return f"clients.{org}.{dataset}"


def shared(dataset: str, org: str) -> str:
    """An aggregate that organisation ``org`` sends to the server."""
    return f"{dataset}__{org}"


def ingestion_outputs(organisations: list[str], corpus: str) -> dict[str, str]:
    """Outputs of an ingestion node: each organisation's raw documents, the report and its MLflow metrics."""
    return {
        **{f"raw__{org}": client(org, "raw_documents") for org in organisations},
        "report": f"ingestion_report_{corpus}",
        "metrics": "ingestion_metrics_mlflow",
    }


def report_metrics(report: dict) -> dict[str, list[dict[str, float]]]:
    """The ingestion report's counts as MLflow metrics (``ingest.<key>``), one step each."""
    kept_total = sum(sum(splits.values()) for splits in report["kept"].values())
    metrics = {"documents_read": report["documents_read"], "kept_total": kept_total}
    metrics.update({f"dropped.{reason}": n for reason, n in report["dropped"].items()})
    for org, splits in report["kept"].items():
        metrics.update({f"kept.{org}.{split}": n for split, n in splits.items()})
    return {key: [{"value": float(value), "step": 0}] for key, value in metrics.items()}


def ingestion_result(tables: dict, report: dict) -> dict:
    """What an ingestion node returns for :func:`ingestion_outputs`: tables, report, metrics."""
    return {
        **{f"raw__{org}": table for org, table in tables.items()},
        "report": report,
        "metrics": report_metrics(report),
    }
