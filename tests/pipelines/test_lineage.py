"""Mixed runs: every pipeline that reads another run's artefacts refuses them, naming what is stale.

The chain runs once on the tiny corpus (the real pipelines, in memory); then one upstream
pipeline runs again with other parameters, as ``kedro run --pipelines=<name> --params=...``
would, and each consuming pipeline is run on what the catalog would then hold.
"""

from __future__ import annotations

import pytest

from fedtopic_pipelines.core.lineage import LineageError
from fedtopic_pipelines.pipelines import evaluate, preprocess, privacy, train, vocab_consensus, word2vec
from tests.conftest import make_tiny_raw_tables
from tests.pipelines.conftest import run_slice
from tests.pipelines.test_word2vec import WORD2VEC

ORGS = ["alpha", "beta", "gamma"]
PRE = {"min_df": 2, "max_df": 0.9}
OTHER_PRE = {**PRE, "min_token_length": 5}  # drops moon, nasa, disk...: other tokens (min_df changes none here)
VOCAB = {"top_n": 50, "min_count": 1, "merge": "union"}
TRAIN = {"model": {"n_topics": 3, "hidden_sizes": [8]}, "batch_size": 8, "max_steps": 10, "mlflow_every": 5}
EVAL = {"coherence_measures": ["c_npmi"], "top_words": 5, "diversity_top_words": 5}
PARAMS = {
    "params:preprocess": PRE,
    "params:vocab_consensus": VOCAB,
    "params:train": TRAIN,
    "params:evaluate": EVAL,
    "params:privacy": {"attacks": False, "vocab_k": 1},
    "params:organisations": ORGS,
    "params:word2vec": WORD2VEC,
}


def _raw() -> dict:
    return {f"clients.{o}.raw_documents": t for o, t in make_tiny_raw_tables().items()}


@pytest.fixture(scope="module")
def catalog() -> dict:
    """What ``kedro run`` leaves in the catalog: preprocess, vocab_consensus, train, evaluate, privacy
    (embeddings: none, ProdLDA reads none)."""
    from fedtopic_pipelines.core.families.ctm import DocumentEmbeddings

    chain = (
        preprocess.create_pipeline(ORGS)
        + vocab_consensus.create_pipeline(ORGS)
        + train.create_pipeline(ORGS)
        + evaluate.create_pipeline(ORGS)
        + privacy.create_pipeline(ORGS)
    )
    embeddings = {f"clients.{o}.embeddings": DocumentEmbeddings.none() for o in ORGS}
    return {**_raw(), **PARAMS, **embeddings, **run_slice(chain, {**_raw(), **PARAMS, **embeddings})}


def _rerun(catalog: dict, pipeline, **params: dict) -> dict:
    """The catalog after ``kedro run --pipelines=<pipeline> --params=<params>``."""
    inputs = {**catalog, **{f"params:{name}": value for name, value in params.items()}}
    return {**inputs, **run_slice(pipeline, {k: v for k, v in inputs.items() if k in pipeline.inputs()})}


def _run(pipeline, catalog: dict) -> dict:
    return run_slice(pipeline, {k: v for k, v in catalog.items() if k in pipeline.inputs()})


def test_one_run_passes_and_its_lineage_names_every_organisations_tokens(catalog) -> None:
    from fedtopic_pipelines.core.lineage import tokens_fingerprint  # new with this check

    lineage = catalog["metrics"]["lineage"]
    assert lineage["tokens"] == {o: tokens_fingerprint([catalog[f"clients.{o}.tokens"]]) for o in ORGS}
    assert all(catalog[f"clients.{o}.bow"].tokens == lineage["tokens"][o] for o in ORGS)
    assert catalog["consensus_report"]["lineage"]["vocabulary"] == lineage["vocabulary"]
    assert "defences" in catalog["privacy_report"]  # the audit ran on the run's own artefacts


def test_evaluate_refuses_tokens_of_another_preprocessing(catalog) -> None:
    """Before: rc 0, the scores changed, the lineage block did not."""
    mixed = _rerun(catalog, preprocess.create_pipeline(ORGS), preprocess=OTHER_PRE)
    assert not mixed["clients.alpha.tokens"].equals(catalog["clients.alpha.tokens"])
    with pytest.raises(
        LineageError, match=r"clients\.\w+\.bow was counted from clients\.\w+\.tokens .*vocab_consensus"
    ):
        _run(evaluate.create_pipeline(ORGS), mixed)


def test_privacy_refuses_models_of_another_vocabulary(catalog) -> None:
    """Before: ``mat1 and mat2 shapes cannot be multiplied`` inside the membership attack."""
    mixed = _rerun(catalog, vocab_consensus.create_pipeline(ORGS), vocab_consensus={**VOCAB, "top_n": 5})
    assert len(mixed["common_vocabulary"]) < len(catalog["common_vocabulary"])
    with pytest.raises(LineageError, match=r"trained model 'federated'.* were trained on vocabulary .*pipelines=train"):
        _run(privacy.create_pipeline(ORGS), {**mixed, "params:privacy": {"vocab_k": 1}})


def test_privacy_refuses_metrics_of_other_models(catalog) -> None:
    retrained = _rerun(catalog, train.create_pipeline(ORGS), train={**TRAIN, "max_steps": 4})
    with pytest.raises(LineageError, match=r"metrics was built from models .*pipelines=evaluate"):
        _run(privacy.create_pipeline(ORGS), retrained)


def test_word2vec_refuses_tokens_the_common_vocabulary_was_not_agreed_on(catalog) -> None:
    mixed = _rerun(catalog, preprocess.create_pipeline(ORGS), preprocess=OTHER_PRE)
    with pytest.raises(
        LineageError, match=r"clients\.\w+\.bow was counted from clients\.\w+\.tokens .*vocab_consensus"
    ):
        _run(word2vec.create_pipeline(ORGS), mixed)
