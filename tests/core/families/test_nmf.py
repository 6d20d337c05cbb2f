"""FedNMF+MI through the engine (seed 004 Algorithm 1): what FedAvg of local steps equals, client
sampling, rejected updates, resume with sampling, and the weights path of a gradient family."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import torch

from fedtopic_pipelines.core.config import TrainConfig
from fedtopic_pipelines.core.families import get_family
from fedtopic_pipelines.core.federated.client import FamilyClient
from fedtopic_pipelines.core.federated.engine import InProcessEngine
from fedtopic_pipelines.core.federated.local import gradient_epochs
from fedtopic_pipelines.core.federated.messages import Instruction, Update
from fedtopic_pipelines.core.federated.server import FederatedServer, StoppingRule
from fedtopic_pipelines.core.federated.strategies import FedSGD
from fedtopic_pipelines.core.federation import run_federation
from fedtopic_pipelines.core.seeds import derive_seed
from fedtopic_pipelines.core.site import MemoryEndpoint
from tests.conftest import poisson_matrices

CPU = torch.device("cpu")


def _nmf(**changes) -> TrainConfig:
    base = {
        "model": {"family": "nmf", "n_topics": 3, "mi_weight": 0.0, "inference_epochs": 2},
        "optimizer": {"name": "sgd", "lr": 1e-3},
        "aggregation": {"rule": "fedavg"},
        "batch_size": 128,
        "max_steps": 6,
        "seed": 11,
        "device": "cpu",
    }
    return TrainConfig.from_params({**base, **changes})


def _vocabulary(size: int) -> pd.DataFrame:
    return pd.DataFrame({"term": [f"w{j}" for j in range(size)]})


def _data(sizes=(30, 21, 45), vocab=40) -> dict[str, sp.csr_matrix]:
    return dict(zip("abcdef", poisson_matrices(sizes, vocab), strict=False))


def test_fedavg_of_one_full_batch_step_per_organisation_is_one_centralized_step() -> None:
    """Eq. 3's loss is a mean over the batch, so the document-weighted average of the organisations'
    W after one full-batch step is one step on the pooled documents (W and H at the same point).
    H's own step scales with 1 / batch size, so only W is compared."""
    family = get_family("nmf")
    config = _nmf()
    data = _data()
    start = family.create_model(40, config, CPU).double()
    ws, hs, sizes = [], [], []
    for i, (org, x) in enumerate(data.items()):
        model = family.create_model(40, config, CPU).double()
        model.load_state_dict(start.state_dict())
        family.init_local(model, x, config, derive_seed(1, i))
        hs.append(model.h.detach().clone())
        ws.append(family.local_update(model, x, config, seed=i).tensors["w"])
        sizes.append(x.shape[0])
        assert float(ws[-1].min()) > 0, org  # no entry reached the projection: the step is linear here
    federated = sum(w * n for w, n in zip(ws, sizes, strict=True)) / sum(sizes)
    pooled = family.create_model(40, config, CPU).double()
    pooled.load_state_dict(start.state_dict())
    pooled.h = torch.nn.Parameter(torch.cat(hs))
    central = family.local_update(pooled, family.concatenate(list(data.values())), config, seed=99).tensors["w"]
    assert float((federated - central).abs().max()) <= 1e-10
    assert float((central - start.w.detach()).abs().max()) > 1e-6  # it moved


def test_an_update_with_negative_weights_is_rejected_and_leaves_the_model_as_if_silent(caplog) -> None:
    config = _nmf(batch_size=8, max_steps=3, optimizer={"name": "sgd", "lr": 0.01})
    data = _data()

    class Negative(MemoryEndpoint):
        def handle(self, instruction: Instruction) -> Update:
            update = super().handle(instruction)
            return dataclasses.replace(update, tensors={**update.tensors, "w": -update.tensors["w"]})

    class Silent(MemoryEndpoint):
        def handle(self, instruction: Instruction) -> Update:
            raise TimeoutError("no reply")

    def run(cls):
        endpoints = [cls(o, d) if o == "b" else MemoryEndpoint(o, d) for o, d in data.items()]
        return run_federation(
            InProcessEngine(endpoints), list(data), config, vocabulary=_vocabulary(40), progress=False
        )

    with caplog.at_level("WARNING"):
        attacked = run(Negative).model
    assert all("negative entries" in r.rejected["b"] for r in attacked.history)
    assert "update from client 'b' rejected: weights 'w' has negative entries" in caplog.text
    silent = run(Silent).model
    assert all(torch.equal(attacked.state[k], silent.state[k]) for k in attacked.state)
    assert float(attacked.state["w"].min()) >= 0


def test_client_sampling_asks_only_the_sampled_organisations_and_records_them() -> None:
    config = _nmf(batch_size=8, max_steps=8, aggregation={"rule": "fedadam", "client_fraction": 0.5})
    data = _data((12, 10, 14, 9), 40)
    asked: dict[int, list[str]] = {}

    class Recording(MemoryEndpoint):
        def handle(self, instruction: Instruction) -> Update:
            asked.setdefault(instruction.round, []).append(self.name)
            return super().handle(instruction)

    endpoints = [Recording(o, d) for o, d in data.items()]
    result = run_federation(InProcessEngine(endpoints), list(data), config, vocabulary=_vocabulary(40), progress=False)
    history = result.model.history
    assert [r.sampled for r in history] == [asked[r] for r in range(8)]
    assert all(len(s) == 2 for s in asked.values())
    assert len({o for s in asked.values() for o in s}) == 4
    assert all(set(r.client_loss) == set(r.sampled) for r in history)


class Killed(Exception):
    pass


def test_a_resumed_run_with_client_sampling_gives_the_uninterrupted_result(tmp_path) -> None:
    """The organisations' H (never sent) comes back from their own copies, as it was after the
    last round each trained in before the checkpoint; sampling repeats by seed and round."""
    config = _nmf(
        batch_size=8,
        max_steps=9,
        model={"family": "nmf", "n_topics": 3, "mi_weight": 0.1, "inference_epochs": 2},
        optimizer={"name": "adagrad", "lr": 0.05},  # H's Adagrad sums are local state too
        aggregation={"rule": "fedyogi", "client_fraction": 0.5, "local_epochs": 2},
        checkpoint_every=2,
        checkpoint_dir=str(tmp_path / "ckpt"),
    )
    data = _data((12, 10, 14, 9), 40)

    def endpoints():
        return [MemoryEndpoint(o, d) for o, d in data.items()]

    class Killing(InProcessEngine):
        def broadcast(self, instruction, to=None):
            if instruction.round == 7:
                raise Killed
            return super().broadcast(instruction, to)

    plain = config.replace(checkpoint_every=0, checkpoint_dir=None)
    reference = run_federation(
        InProcessEngine(endpoints()), list(data), plain, vocabulary=_vocabulary(40), progress=False
    )
    with pytest.raises(Killed):
        run_federation(Killing(endpoints()), list(data), config, vocabulary=_vocabulary(40), progress=False)
    resumed = run_federation(
        InProcessEngine(endpoints()), list(data), config, vocabulary=_vocabulary(40), progress=False
    )
    assert [r.loss for r in resumed.model.history] == [r.loss for r in reference.model.history]
    assert all(torch.equal(resumed.model.state[k], reference.model.state[k]) for k in reference.model.state)
    kept = sorted((tmp_path / "ckpt" / "organisations").rglob("round-*.safetensors"))
    assert kept and len(kept) <= 4 * 3  # older copies than the last checkpoint needs are removed


def test_fedavg_of_one_local_sgd_step_is_fedsgd_with_server_sgd() -> None:
    """The weights path of a gradient family (ProdLDA): one local SGD step per organisation at lr eta,
    averaged by documents, is FedSGD's step with SGD at eta (each batch all of its documents)."""
    family = get_family("prodlda")
    base = {
        "model": {"family": "prodlda", "n_topics": 3, "hidden_sizes": [8], "normalization": "layer"},
        "optimizer": {"name": "sgd", "lr": 0.1},
        "batch_size": 64,
        "max_steps": 1,
        "seed": 5,
        "device": "cpu",
    }
    fedsgd = TrainConfig.from_params(base)
    fedavg = TrainConfig.from_params({**base, "aggregation": {"rule": "fedavg"}})
    data = _data()
    start = family.create_model(40, fedsgd, CPU).double()
    seeds = [derive_seed(5, i) for i in range(len(data))]

    clients = []
    for (org, x), seed in zip(data.items(), seeds, strict=True):
        model = family.create_model(40, fedsgd, CPU).double()
        clients.append(FamilyClient(org, family, model, family.stream(x, fedsgd, seed, CPU)))
    server_model = family.create_model(40, fedsgd, CPU).double()
    server_model.load_state_dict(start.state_dict())
    FederatedServer(FedSGD(server_model, fedsgd.optimizer), StoppingRule(1)).run(
        InProcessEngine(clients), progress=False
    )

    weights, sizes = [], []
    for x, seed in zip(data.values(), seeds, strict=True):
        model = family.create_model(40, fedavg, CPU).double()
        model.load_state_dict(start.state_dict())
        step = gradient_epochs(family, model, x, fedavg, seed, CPU)
        weights.append(step.tensors)
        sizes.append(step.num_examples)
    for name, value in server_model.state_dict().items():
        if name in weights[0]:
            averaged = sum(w[name] * n for w, n in zip(weights, sizes, strict=True)) / sum(sizes)
            assert float((averaged - value).abs().max()) <= 1e-10, name
    assert float((server_model.beta - start.beta).detach().abs().max()) > 1e-6


def test_prodlda_under_fedadam_with_sampling_gives_the_same_model_on_the_flower_grid(tmp_path) -> None:
    """The weights path through the real ClientApp and records (train.weights messages) and in process."""
    from fedtopic_pipelines.core.config import ConsensusConfig, PreprocessConfig
    from fedtopic_pipelines.core.site import FolderEndpoint
    from fedtopic_pipelines.flower.client_app import app as client_app
    from fedtopic_pipelines.flower.federation import Job, run_flower_federation
    from tests.conftest import make_tiny_raw_tables
    from tests.flower.local_grid import LocalGrid

    preprocess = {"min_df": 1, "max_df": 1.0, "min_token_length": 2, "processes": 1}
    consensus = {"top_n": 50, "min_count": 0, "merge": "union"}
    config = TrainConfig.from_params(
        {
            "model": {"family": "prodlda", "n_topics": 3, "hidden_sizes": [8], "normalization": "layer"},
            "optimizer": {"name": "adam", "lr": 0.01},
            "aggregation": {"rule": "fedadam", "client_fraction": 0.67, "local_epochs": 2},
            "batch_size": 4,
            "max_steps": 4,
            "validation_fraction": 0.25,
            "validation_every": 2,
            "seed": 3,
            "device": "cpu",
        }
    )
    paths = {}
    for org, table in make_tiny_raw_tables().items():
        folder = tmp_path / "raw" / org
        folder.mkdir(parents=True)
        table.to_parquet(folder / "part-00000.parquet")
        paths[org] = folder
    orgs = list(paths)
    endpoints = [FolderEndpoint(o, paths[o], tmp_path / "cache-a" / o) for o in orgs]
    in_process = run_federation(
        InProcessEngine(endpoints),
        orgs,
        config,
        preprocess=PreprocessConfig.model_validate(preprocess),
        consensus=ConsensusConfig.model_validate(consensus),
        progress=False,
    )
    nodes = {
        100 + i: {"organisation": o, "data-path": str(paths[o]), "cache-dir": str(tmp_path / "cache-b" / o)}
        for i, o in enumerate(orgs)
    }
    flower, _ = run_flower_federation(
        LocalGrid(client_app, nodes), Job(orgs, preprocess, consensus, config.to_params())
    )
    assert [r.sampled for r in in_process.model.history] == [r.sampled for r in flower.model.history]
    assert all(len(r.sampled) == 2 for r in flower.model.history)
    assert [r.loss for r in in_process.model.history] == [r.loss for r in flower.model.history]
    assert all(torch.equal(in_process.model.state[k], flower.model.state[k]) for k in in_process.model.state)
    assert np.isfinite([r.validation_loss for r in flower.model.history if r.validation_loss is not None]).all()
