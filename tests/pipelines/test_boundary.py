"""The organisation boundary on the pipeline graph: every registered pipeline, and a planted violation."""

from __future__ import annotations

import pytest
from kedro.pipeline import Node, Pipeline

from fedtopic_pipelines.core.config import ConfigError
from fedtopic_pipelines.pipelines.boundary import ALLOWED, check_boundary, crossings
from fedtopic_pipelines.pipelines.naming import client
from tests.conftest import run_project_probe

PROBE = """
import json
from kedro.framework.startup import bootstrap_project
bootstrap_project(PROJECT_PATH)
from fedtopic_pipelines.pipeline_registry import register_pipelines
from fedtopic_pipelines.pipelines.boundary import crossings, unused_entries
pipelines = register_pipelines()
built = {name: pipelines[name] for name in pipelines}  # building refuses a crossing pipeline
readers = sorted({
    node.name for p in built.values() for node in p.nodes
    if any(d.startswith("clients.") for d in node.inputs) and not (node.namespace or "").count("clients.")
})
print(json.dumps({
    "crossings": {name: [str(c) for c in crossings(p)] for name, p in built.items() if crossings(p)},
    "unused": sorted(unused_entries(built.values())),
    "server_readers": readers,
}))
"""


def _identity(*x: object) -> object:
    return x


def test_every_registered_pipeline_keeps_the_boundary_and_every_allowance_is_used() -> None:
    seen = run_project_probe(PROBE)
    assert seen["crossings"] == {}
    assert seen["unused"] == []  # a stale entry would widen the boundary silently
    # the server-side readers are exactly the allow-list: simulations, pooled baselines, the audit
    assert set(seen["server_readers"]) == set(ALLOWED)
    assert {"evaluate_pctd", "pctd_figures", "summarise_fednmf"}.isdisjoint(seen["server_readers"])


def test_a_planted_server_node_reading_an_organisations_data_is_found_and_refused() -> None:
    inside = Pipeline(
        [Node(_identity, "bow", "scores", name="score_inside")],
        namespace="clients.alpha",
        outputs={"scores": "scores__alpha"},
    )
    planted = Node(_identity, client("alpha", "bow"), "stolen", name="summarise_scores")
    assert crossings(inside) == []
    found = crossings(inside + Pipeline([planted]))
    assert [str(c) for c in found] == ["node 'summarise_scores' in the server (no namespace) reads 'clients.alpha.bow'"]
    with pytest.raises(
        ConfigError, match="pipeline 'planted' breaks the organisation boundary: node 'summarise_scores'"
    ):
        check_boundary("planted", inside + Pipeline([planted]))


def test_another_organisations_namespace_is_outside_too_and_an_allowance_covers_only_its_datasets() -> None:
    beta_reads_alpha = Pipeline(
        [Node(_identity, "clients.alpha.tokens", "x", name="peek")],
        namespace="clients.beta",
        inputs={"clients.alpha.tokens"},
    )
    assert [c.dataset for c in crossings(beta_reads_alpha)] == ["clients.alpha.tokens"]
    # realdata's evaluation sits in realdata.clients.<org>: still inside the organisation
    nested = Pipeline(
        [Node(_identity, "clients.alpha.bow", "y", name="evaluate")],
        namespace="realdata.clients.alpha",
        inputs={"clients.alpha.bow"},
    )
    assert crossings(nested) == []
    # train_models may read bags of words and embeddings, not tokens
    train = Pipeline([Node(_identity, ["clients.alpha.bow", "clients.alpha.tokens"], "m", name="train_models")])
    assert [c.dataset for c in crossings(train)] == ["clients.alpha.tokens"]


def test_every_allowance_gives_its_reason() -> None:
    assert all(datasets and len(reason) > 40 for datasets, reason in ALLOWED.values())
