"""Dataset names and the wiring shape the pipelines share.

Private datasets live in an organisation's namespace (``clients.<org>.*``); what
crosses to the server has a flat name (``vocabulary_proposal__<org>``, ``evaluation__<org>``),
which makes the privacy boundary visible in the catalog. Every pipeline that works inside
the organisations instantiates one template per organisation (:func:`inside_each`); the
server reads what they send (:func:`sent_by_each`), and only a node on the boundary's
allow-list reads their own data (:func:`private_of_each`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial, update_wrapper

from kedro.pipeline import Pipeline


def client(org: str, dataset: str) -> str:
    """A dataset private to organisation ``org``."""
    return f"clients.{org}.{dataset}"


def shared(dataset: str, org: str) -> str:
    """An aggregate that organisation ``org`` sends to the server."""
    return f"{dataset}__{org}"


def inside_each(
    organisations: Iterable[str],
    template: Pipeline | Callable[[str], Pipeline],
    *,
    inputs: Mapping[str, str] | Iterable[str] = (),
    parameters: Iterable[str] = (),
    sends: Iterable[str] = (),
) -> Pipeline:
    """``template`` (or ``template(org)``) in each organisation's namespace ``clients.<org>``:
    ``inputs`` and ``parameters`` come from the server side under their own names, and each of
    ``sends`` crosses to the server as ``<name>__<org>``; every other dataset stays inside."""
    sends = list(sends)
    return sum(
        (
            Pipeline(
                template(org) if callable(template) and not isinstance(template, Pipeline) else template,
                namespace=f"clients.{org}",
                inputs=dict(inputs) if isinstance(inputs, Mapping) else set(inputs),
                parameters=set(parameters),
                outputs={name: shared(name, org) for name in sends},
            )
            for org in organisations
        ),
        Pipeline([]),
    )


def for_organisation(func: Callable, org: str) -> Callable:
    """``func`` with its ``organisation`` argument bound to ``org``, under ``func``'s own name: a
    node inside one organisation that needs to know which it is (its seeded streams)."""
    return update_wrapper(partial(func, organisation=org), func)


def sent_by_each(organisations: Iterable[str], dataset: str, prefix: str = "") -> dict[str, str]:
    """A server node's inputs: what each organisation sent (``<dataset>__<org>``), keyed by
    ``prefix + org``."""
    return {prefix + org: shared(dataset, org) for org in organisations}


def private_of_each(organisations: Iterable[str], dataset: str, prefix: str = "") -> dict[str, str]:
    """A server node's inputs: each organisation's own ``dataset``, keyed by ``prefix + org``.
    Only a node on the boundary's allow-list (``pipelines/boundary.py``) may read them."""
    return {prefix + org: client(org, dataset) for org in organisations}


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
