"""The Flower app on an in-process grid: the real ClientApp and records, the core federation behind them."""

from __future__ import annotations

import dataclasses
import json
import secrets
from pathlib import Path

import pandas as pd
import pytest
import torch

from fedtopic_pipelines.core import persist
from fedtopic_pipelines.core.config import ConsensusConfig, PreprocessConfig, TrainConfig, from_mapping
from fedtopic_pipelines.core.federated.checkpoint import KIND
from fedtopic_pipelines.core.site import read_raw, run_sites
from fedtopic_pipelines.core.training import train_scenarios
from fedtopic_pipelines.flower.client_app import app as client_app
from fedtopic_pipelines.flower.federation import Job, run_flower_federation
from fedtopic_pipelines.flower.records import decode_config
from tests.flower.local_grid import NO_KEY, LocalGrid, node_environment

PREPROCESS = {"min_df": 1, "max_df": 1.0, "min_token_length": 2, "processes": 1}
CONSENSUS = {"top_n": 50, "min_count": 0, "merge": "union"}
KEYED = {"vocab_k": 2}  # the configured default's keyed exchange (conf/base); the library's is k 1
TRAIN = {
    "scenarios": ["federated"],
    "model": {"family": "prodlda", "n_topics": 3, "hidden_sizes": [8, 8]},
    "batch_size": 8,
    "max_steps": 12,
    "seed": 7,
    "device": "cpu",
}


def write_sites(tables: dict[str, pd.DataFrame], root: Path) -> dict[str, Path]:
    paths = {}
    for org, table in tables.items():
        folder = root / "raw" / org
        folder.mkdir(parents=True)
        table.to_parquet(folder / "part-00000.parquet")
        paths[org] = folder
    return paths


def in_process(paths: dict[str, Path], train: dict) -> tuple[list[str], dict[str, torch.Tensor]]:
    """The same job through the Kedro path: the site steps in one process, then the in-process engine."""
    preprocess = from_mapping(PreprocessConfig, PREPROCESS, "preprocess")
    consensus = from_mapping(ConsensusConfig, CONSENSUS, "vocab_consensus")
    vocabulary, bows = run_sites({org: read_raw(p) for org, p in paths.items()}, preprocess, consensus)
    matrices = {o: b.subset("train").matrix for o, b in bows.items()}
    models = train_scenarios(matrices, TrainConfig.from_params(train), progress=False, vocabulary=vocabulary)
    return vocabulary["term"].tolist(), models["federated"].state


def node_configs(paths: dict[str, Path], root: Path) -> dict[int, dict]:
    return {
        100 + i: {"organisation": org, "data-path": str(path), "cache-dir": str(root / "cache" / org)}
        for i, (org, path) in enumerate(reversed(list(paths.items())))  # node order differs from the job's
    }


def job(orgs: list[str], train: dict) -> Job:
    return Job.from_dict(
        {"organisations": orgs, "preprocess": PREPROCESS, "vocab_consensus": CONSENSUS, "train": train}
    )


def test_same_vocabulary_and_parameters_as_the_kedro_path(tiny_raw_tables, tmp_path) -> None:
    paths = write_sites(tiny_raw_tables, tmp_path)
    terms, expected = in_process(paths, TRAIN)
    result, engine = run_flower_federation(
        LocalGrid(client_app, node_configs(paths, tmp_path)), job(list(paths), TRAIN)
    )
    assert result.vocabulary["term"].tolist() == terms
    assert len(result.model.history) == 12 and len(engine.latencies) == 12
    assert all(torch.equal(result.model.state[k], expected[k]) for k in expected)


def test_the_kedro_pipeline_and_the_flower_node_send_the_same_consensus_proposal(shared_raw_tables, tmp_path) -> None:
    """Only the top-N proposal leaves an organisation, and it is the same on both engines (keyed,
    under the configured ``privacy.vocab_k: 2``, with the organisations' key)."""
    from fedtopic_pipelines.pipelines import preprocess, vocab_consensus
    from tests.pipelines.conftest import run_slice

    consensus = {**CONSENSUS, "top_n": 15}  # of 20 terms each: enough held by two organisations
    orgs = list(shared_raw_tables)
    key = secrets.token_hex(32)  # the organisations' key, on both engines
    with node_environment(key):
        kedro = run_slice(
            preprocess.create_pipeline(orgs) + vocab_consensus.create_pipeline(orgs),
            {
                **{f"clients.{o}.raw_documents": t for o, t in shared_raw_tables.items()},
                "params:preprocess": PREPROCESS,
                "params:vocab_consensus": consensus,
                "params:privacy": KEYED,
                "params:train": {},
                "params:evaluate": {},
            },
        )
    paths = write_sites(shared_raw_tables, tmp_path)
    sent = {}
    grid = LocalGrid(
        client_app,
        node_configs(paths, tmp_path),
        vocab_key=key,
        on_send=lambda node, msg, reply: (
            sent.setdefault(node, reply) if msg.metadata.message_type == "query.vocabulary" else None
        ),  # the offer (the reveal follows it)
    )
    spec = {"organisations": orgs, "preprocess": PREPROCESS, "vocab_consensus": consensus, "train": TRAIN}
    run_flower_federation(grid, Job.from_dict({**spec, "train": {**TRAIN, "max_steps": 1, "privacy": KEYED}}))
    configs = node_configs(paths, tmp_path)
    for node, reply in sent.items():
        org = configs[node]["organisation"]
        answer = decode_config(reply.content.config_records["reply"])
        proposal = dict(zip(answer["hashes"], answer["counts"], strict=True))
        assert proposal == kedro[f"vocabulary_proposal__{org}"]
        assert len(proposal) == 15 < len(kedro[f"clients.{org}.term_counts"])  # the full counts stayed
    assert len(sent) == len(orgs)


def test_a_node_without_the_organisations_key_fails_the_vocabulary_stage_naming_it(shared_raw_tables, tmp_path) -> None:
    """Under the configured keyed exchange (``privacy.vocab_k: 2``) a node must hold ``FEDTOPIC_VOCAB_KEY``."""
    from fedtopic_pipelines.core.federated.engine import FederationError
    from fedtopic_pipelines.core.vocab.privacy import KEY_ENV

    paths = write_sites(shared_raw_tables, tmp_path)
    grid = LocalGrid(client_app, node_configs(paths, tmp_path), vocab_key=NO_KEY)
    with pytest.raises(FederationError, match=f"stage 'vocabulary'.*{KEY_ENV} is not set"):
        run_flower_federation(grid, job(list(paths), {**TRAIN, "privacy": KEYED}))


def corrupting(app, org: str, corrupt):
    """A ClientApp that answers like the real one, except that ``org`` corrupts its training replies."""
    from flwr.app import Message

    from fedtopic_pipelines.flower.records import record_to_update, update_to_record

    def handle(message, context):
        reply = app(message, context)
        if context.node_config["organisation"] != org or not message.metadata.message_type.startswith("train"):
            return reply
        update = record_to_update(reply.content, org)
        tensors = corrupt(dict(update.tensors))
        bad = dataclasses.replace(update, tensors=tensors)  # the round it answers stays: only the tensors are bad
        return Message(update_to_record(bad), reply_to=message)

    return handle


def _nan(t):
    name = next(iter(t))
    t[name] = t[name].clone().fill_(float("nan"))
    return t


def _inf(t):
    name = next(iter(t))
    t[name] = t[name].clone().fill_(float("inf"))
    return t


def _shape(t):
    name = next(iter(t))
    t[name] = t[name].reshape(-1)[:-1]
    return t


def _name(t):
    t["backdoor"] = t.pop(next(iter(t)))
    return t


def _half(t):
    name = next(iter(t))
    t[name] = t[name].half()
    return t


@pytest.mark.parametrize(
    ("corrupt", "reason"),
    [
        (_nan, "contains NaN or Inf"),
        (_inf, "contains NaN or Inf"),
        (_shape, "has shape"),
        (_name, "unknown ['backdoor']"),
        (_half, "dtype torch.float16"),
    ],
)
def test_untrusted_updates_are_rejected_and_never_touch_the_model(
    tiny_raw_tables, tmp_path, corrupt, reason, caplog
) -> None:
    train = {**TRAIN, "max_steps": 4, "flower": {"round_timeout_s": 0.5}}
    paths = write_sites(tiny_raw_tables, tmp_path)
    spec = job(list(paths), train)
    attacked, _ = run_flower_federation(
        LocalGrid(corrupting(client_app, "beta", corrupt), node_configs(paths, tmp_path)), spec
    )
    assert all("beta" in r.rejected and reason in r.rejected["beta"] for r in attacked.model.history)
    assert any("rejected" in m and "beta" in m for m in caplog.messages)
    # the same run without beta's node answering at all: identical model, so beta's updates changed nothing
    silent = LocalGrid(
        client_app,
        node_configs(paths, tmp_path / "other"),
        drop=lambda node, m: node == 101 and m.metadata.message_type.startswith("train"),
    )
    without, _ = run_flower_federation(silent, spec)
    assert all(r.failed.get("beta", "").startswith("no reply") for r in without.model.history)
    assert all(torch.equal(attacked.model.state[k], without.model.state[k]) for k in attacked.model.state)


def test_a_replayed_update_is_refused_on_flower_as_in_process(tiny_raw_tables, tmp_path) -> None:
    """beta's node answers every training round after the first with its reply of the round before:
    a well-formed update of another round, refused by the server's round check."""
    from flwr.app import Message

    earlier = {}

    def replaying(message, context):
        reply = client_app(message, context)
        if context.node_config["organisation"] != "beta" or not message.metadata.message_type.startswith("train"):
            return reply
        sent = earlier.get("reply", reply.content)
        earlier["reply"] = reply.content
        return Message(sent, reply_to=message)

    paths = write_sites(tiny_raw_tables, tmp_path)
    result, _ = run_flower_federation(
        LocalGrid(replaying, node_configs(paths, tmp_path)), job(list(paths), {**TRAIN, "max_steps": 3})
    )
    history = result.model.history
    assert "beta" not in history[0].rejected
    assert all("answers round" in r.rejected["beta"] and "replay" in r.rejected["beta"] for r in history[1:])


def _strings(value) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return {s for k, v in value.items() for s in _strings(k) | _strings(v)}
    if isinstance(value, list):
        return {s for v in value for s in _strings(v)}
    return set()


def test_clients_send_only_counts_terms_tensors_sizes_and_metrics(tiny_raw_tables, tmp_path) -> None:
    """Every record every client sends during a run: no document, no token list, no document id."""
    sent: list[tuple[int, object]] = []
    paths = write_sites(tiny_raw_tables, tmp_path)
    grid = LocalGrid(
        client_app, node_configs(paths, tmp_path), on_send=lambda node, msg, reply: sent.append((node, reply))
    )
    result, _ = run_flower_federation(
        grid, job(list(paths), {**TRAIN, "validation_fraction": 0.25, "validation_every": 4})
    )
    texts = {t for table in tiny_raw_tables.values() for t in table["text"]}
    doc_ids = {d for table in tiny_raw_tables.values() for d in table["doc_id"]}
    allowed_records = {"reply", "meta", "arrays"}
    strings: set[str] = set()
    for _, reply in sent:
        assert not reply.has_error()
        assert set(reply.content) <= allowed_records, set(reply.content)
        for name, record in reply.content.config_records.items():
            values = decode_config(record) if name == "reply" else dict(record)
            strings |= _strings(values)
        for record in reply.content.array_records.values():
            assert all(a.numpy().dtype.kind in "fiu" for a in record.values())  # numbers only
    assert not strings & texts and not strings & doc_ids
    assert all(" " not in s for s in strings)  # single terms and names: no sentence
    vocabulary = set(result.vocabulary["term"])
    parameter_names = set(result.model.state)
    layout = {"tensors", "statistics", "row_indices", "float32", "int64"}  # groups and dtypes of packed arrays
    metric_names = {"loss", "kl", "reconstruction", "validation_loss"}
    keys = {"organisation", "documents", "terms", "counts", "hashes", "openings", "train_rows", "validation_rows"}
    keys |= {"round"}  # the round an update answers
    keys |= {"dropped_no_vocabulary_term_train", "dropped_no_vocabulary_term_test", "data_fingerprint"}
    fingerprints = {s for s in strings if len(s) == 64 and set(s) <= set("0123456789abcdef")}
    other = strings - vocabulary - parameter_names - set(paths) - layout - metric_names - keys - fingerprints
    other -= {"gradients", "metrics", "kind", "num_examples", "metric_names", "metric_values"}
    unexplained = {
        s
        for s in other
        if not (s.startswith(("layout.", "{")) or s.endswith((".mean", ".var")) or s in {"train", "test"})
    }
    assert not unexplained, unexplained


class ServerKilled(Exception):
    """Stands for the ServerApp process being killed."""


class KillingGrid(LocalGrid):
    """Raises (as a killed ServerApp would stop) when the server sends training round ``at``."""

    def __init__(self, *args, at: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.at = at

    def push_messages(self, messages):
        messages = list(messages)
        for message in messages:
            config = message.content.config_records.get("config")
            if message.metadata.message_type.startswith("train") and config is not None and config["round"] == self.at:
                raise ServerKilled
        return super().push_messages(messages)


@pytest.mark.parametrize("validation", [0.0, 0.25])
def test_a_restarted_server_resumes_from_its_checkpoint_without_losing_or_repeating_rounds(
    tiny_raw_tables, tmp_path, validation
) -> None:
    train = {**TRAIN, "max_steps": 10, "validation_fraction": validation, "validation_every": 3}
    paths = write_sites(tiny_raw_tables, tmp_path)
    checkpointed = {**train, "checkpoint_every": 3, "checkpoint_dir": str(tmp_path / "ckpt")}
    reference, _ = run_flower_federation(
        LocalGrid(client_app, node_configs(paths, tmp_path / "a")), job(list(paths), train)
    )
    with pytest.raises(ServerKilled):
        run_flower_federation(
            KillingGrid(client_app, node_configs(paths, tmp_path / "b"), at=8), job(list(paths), checkpointed)
        )
    (saved,) = (tmp_path / "ckpt").glob("*.safetensors")
    assert persist.load(saved, KIND)["next_round"] == 6
    # a new run (fresh node contexts, as after a restart; the nodes' disks and caches are the same):
    # rounds 6.. only, the nodes replay their streams to round 6
    trained = []
    grid = LocalGrid(
        client_app,
        node_configs(paths, tmp_path / "b"),
        on_send=lambda node, msg, reply: (
            trained.append(msg.metadata.message_type) if msg.metadata.message_type.startswith("train") else None
        ),
    )
    resumed, _ = run_flower_federation(grid, job(list(paths), checkpointed))
    assert len(trained) == (10 - 6) * len(paths)  # only the rounds after the checkpoint were run again
    assert [r.round for r in resumed.model.history] == list(range(10))
    assert [r.loss for r in resumed.model.history] == [r.loss for r in reference.model.history]
    assert all(torch.equal(resumed.model.state[k], reference.model.state[k]) for k in reference.model.state)


def test_a_bad_job_is_refused_before_any_node_is_asked(tmp_path) -> None:
    spec = {"organisations": ["a"], "preprocess": PREPROCESS, "vocab_consensus": CONSENSUS, "train": TRAIN}
    with pytest.raises(ValueError, match="parameter 'train.max_steps' is 2.5"):
        Job.from_dict({**spec, "train": {**TRAIN, "max_steps": 2.5}})
    with pytest.raises(RuntimeError, match=r"unknown entries \['flower'\]"):
        Job.from_dict({**spec, "flower": {}})
    assert Job.from_dict(json.loads(json.dumps(spec))).to_dict() == spec


def test_sample_level_dp_on_the_grid_is_the_in_process_run(tiny_raw_tables, tmp_path) -> None:
    """``privacy.dp.level: sample`` travels in the instruction (flat keys): every node runs DP-SGD on
    its own documents with its seeded noise, and the grid's ClientApps, rebuilt for each message,
    train the in-process engine's model exactly."""
    model = {**TRAIN["model"], "normalization": "layer"}  # DP refuses BatchNorm
    dp = {"dp": {"level": "sample", "clip": 0.5, "noise_multiplier": 1.0}}
    train = {**TRAIN, "model": model, "max_steps": 4, "privacy": dp}
    paths = write_sites(tiny_raw_tables, tmp_path)
    _, expected = in_process(paths, train)
    plain = in_process(paths, {**train, "privacy": {}})[1]
    result, _ = run_flower_federation(LocalGrid(client_app, node_configs(paths, tmp_path)), job(list(paths), train))
    assert all(torch.equal(result.model.state[k], expected[k]) for k in expected)
    assert any(not torch.equal(plain[k], expected[k]) for k in expected)
    assert result.model.history[-1].metrics["epsilon_rdp"] > 0
