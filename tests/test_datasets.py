"""The project's own Kedro datasets on real files."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from kedro.io import DatasetError

from fedtopic_pipelines.core.shards import ShardedTable, write_parquet_atomic
from fedtopic_pipelines.datasets import InputFilesDataset, ParquetShardsDataset, WorkFolderDataset


def frame(n: int, start: int = 0) -> pd.DataFrame:
    return pd.DataFrame({"doc_id": [f"d{i}" for i in range(start, start + n)], "text": "x"})


def test_parquet_shards_round_trip_move_link_and_replace(tmp_path) -> None:
    dataset = ParquetShardsDataset(str(tmp_path / "org"))
    assert not dataset.exists()
    with pytest.raises(DatasetError, match="no shards"):
        dataset.load()
    dataset.save(frame(3))
    assert dataset.load().to_frame()["doc_id"].tolist() == ["d0", "d1", "d2"]
    # kept in place (a resumable work folder): linked, the sources stay
    kept = [tmp_path / "work" / f"{i}.parquet" for i in range(2)]
    for i, path in enumerate(kept):
        write_parquet_atomic(frame(2, 10 * i), path)
    dataset.save(ShardedTable(kept))
    loaded = dataset.load()
    assert len(loaded.paths) == 2 and len(loaded) == 4  # the earlier one-shard table is gone
    assert all(p.is_file() for p in kept)
    # staged (temporary): moved, the staging folder removed
    staging = tmp_path / "staging"
    write_parquet_atomic(frame(1, 99), staging / "a.parquet")
    dataset.save(ShardedTable([staging / "a.parquet"], staging=staging))
    assert dataset.load().to_frame()["doc_id"].tolist() == ["d99"]
    assert not staging.exists()


def test_input_files_fallback_and_work_folder(tmp_path) -> None:
    from fedtopic_pipelines.core.ingest.wikipedia import gensim_fragment

    assert InputFilesDataset(str(tmp_path), "*pages-articles*.bz2", "gensim_wikipedia").load() == [gensim_fragment()]
    assert InputFilesDataset(str(tmp_path / "none"), "*.jsonl*").load() == []
    (tmp_path / "b.jsonl").write_text("{}")
    (tmp_path / "a.jsonl.gz").write_bytes(b"")
    assert [p.name for p in InputFilesDataset(str(tmp_path), "*.jsonl*").load()] == ["a.jsonl.gz", "b.jsonl"]
    with pytest.raises(DatasetError, match="unknown fallback"):
        InputFilesDataset(str(tmp_path), "*", "wikipedia_online")
    assert WorkFolderDataset(str(tmp_path / "w" / "x")).load().is_dir()


def test_trained_models_dataset_round_trips_without_pickle(tmp_path) -> None:
    from fedtopic_pipelines.core.config import TrainConfig
    from fedtopic_pipelines.core.training import train_scenarios
    from fedtopic_pipelines.datasets import TrainedModelsDataset
    from tests.conftest import poisson_matrices

    config = TrainConfig.from_params(
        {"model": {"n_topics": 3, "hidden_sizes": [8]}, "batch_size": 8, "max_steps": 3, "device": "cpu"}
    )
    models = train_scenarios(dict(zip("ab", poisson_matrices((20, 18), 25), strict=True)), config, progress=False)
    dataset = TrainedModelsDataset(str(tmp_path / "models"))
    assert not dataset.exists()
    dataset.save(models)
    loaded = dataset.load()
    assert list(loaded) == list(models) and dataset.exists()
    assert all(loaded[n].state["beta"].equal(models[n].state["beta"]) for n in models)
    with pytest.raises(DatasetError, match="no trained models"):
        TrainedModelsDataset(str(tmp_path / "none")).load()
    # read once per process while the files stay as they are (every evaluation node reads them) ...
    again = TrainedModelsDataset(str(tmp_path / "models")).load()
    assert all(again[n] is loaded[n] for n in models)
    # ... and read afresh when another writer replaced a file, or this dataset saved
    import os

    from fedtopic_pipelines.core.model_store import save_models

    first = next(iter(models))
    changed = {**models, first: dataclasses.replace(models[first], state={**models[first].state})}
    changed[first].state["beta"] = changed[first].state["beta"] + 1.0
    save_models(tmp_path / "models", changed)
    path = tmp_path / "models" / f"{first}.safetensors"
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    fresh = TrainedModelsDataset(str(tmp_path / "models")).load()
    assert fresh[first].state["beta"].equal(changed[first].state["beta"])
    dataset.save(models)
    assert dataset.load()[first].state["beta"].equal(models[first].state["beta"])


def test_bow_corpus_dataset_round_trips_without_pickle(tmp_path) -> None:
    import numpy as np
    import scipy.sparse as sp

    from fedtopic_pipelines.core.vocab.consensus import BowCorpus
    from fedtopic_pipelines.datasets import BowCorpusDataset

    bow = BowCorpus(
        sp.csr_matrix(np.array([[1, 0, 2], [0, 3, 0]], dtype=np.float32)),
        np.array(["a:1", "a:2"]),
        np.array(["x", "y"]),
        np.array(["train", "test"]),
        "3f2a9c0d11b4e5a6",
        "77aa00bb11cc22dd",
    )
    dataset = BowCorpusDataset(str(tmp_path / "bow" / "a.npz"))
    dataset.save(bow)
    back = dataset.load()
    assert back.vocabulary == "3f2a9c0d11b4e5a6" == back.subset("test").vocabulary  # the lineage travels
    assert back.tokens == "77aa00bb11cc22dd" == back.subset("train").tokens == back.without_empty_documents()[0].tokens
    assert (back.matrix != bow.matrix).nnz == 0 and back.matrix.dtype == np.float32
    assert back.doc_ids.tolist() == ["a:1", "a:2"] and back.split.tolist() == ["train", "test"]
    assert back.subset("train").labels.tolist() == ["x"]
    (tmp_path / "bow" / "a.parquet").unlink()
    with pytest.raises(DatasetError, match="no bag of words"):
        dataset.load()


def test_word_vectors_dataset_writes_word2vec_text_that_gensim_reads(tmp_path) -> None:
    import numpy as np
    from gensim.models import KeyedVectors

    from fedtopic_pipelines.datasets import WordVectorsDataset

    kv = KeyedVectors(3)
    kv.add_vectors(["alpha", "beta"], np.array([[1.0, 0.5, -2.0], [0.0, 3.0, 1.0]], dtype=np.float32))
    folder = tmp_path / "vectors"
    dataset = WordVectorsDataset(str(folder))
    with pytest.raises(DatasetError, match="no word vectors"):
        dataset.load()
    (folder).mkdir()
    (folder / "stale.txt").write_text("1 3\nold 0 0 0\n")  # another run's model must not survive a save
    dataset.save({"federated": kv, "local__a": kv})
    assert sorted(p.name for p in folder.iterdir()) == ["federated.txt", "local__a.txt"]
    assert (folder / "federated.txt").read_text().splitlines()[0] == "2 3"  # word2vec's text header
    loaded = KeyedVectors.load_word2vec_format(str(folder / "federated.txt"), binary=False)
    assert loaded.index_to_key == ["alpha", "beta"]
    assert np.allclose(loaded["beta"], kv["beta"])
    assert set(dataset.load()) == {"federated", "local__a"}
