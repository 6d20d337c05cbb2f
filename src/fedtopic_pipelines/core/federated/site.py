"""One organisation's side of a federation that runs across processes (the Flower engine).

In process, the Kedro catalog hands every organisation's matrix to ``train_scenarios``. On
Flower, each site holds only its own data and takes the same steps itself, with the same
functions: it preprocesses its raw documents (``preprocess_shards``, cached on its disk),
proposes its vocabulary (``propose_terms``), vectorises against the common one
(``vectorize_frames``), holds out validation documents (``hold_out_one``), and answers
training rounds as the ``GradientClient`` that the in-process engine builds for the
organisation at the same index. Only term counts, sizes, gradients and metrics leave it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import scipy.sparse as sp

from fedtopic_pipelines.core.config import ConsensusConfig, PreprocessConfig, TrainConfig
from fedtopic_pipelines.core.federated.client import GradientClient
from fedtopic_pipelines.core.training import hold_out_one, organisation_client, resolve_device

# Text processing (pandas, pyarrow, nltk: seconds of imports) is imported only by the stages
# that need it, not by training messages: a Flower ClientApp may be a fresh process per message.

logger = logging.getLogger(__name__)


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def read_raw(path: Path):
    """An organisation's raw documents (a ``ShardedTable``): a folder of Parquet shards or one Parquet file."""
    from fedtopic_pipelines.core.ingest.common import ShardedTable
    from fedtopic_pipelines.core.text.demo import CorpusError

    if path.is_dir():
        table = ShardedTable.from_directory(path)
        if not table.paths:
            raise CorpusError(f"organisation data folder '{path}' holds no *.parquet shard")
        return table
    if path.is_file() and path.suffix == ".parquet":
        return ShardedTable([path])
    raise CorpusError(f"organisation data '{path}' is neither a folder of Parquet shards nor a .parquet file")


@dataclass(frozen=True)
class Prepared:
    """A site's training data over the common vocabulary."""

    train: sp.csr_matrix
    validation: sp.csr_matrix | None
    report: dict[str, Any]


class Site:
    """An organisation's data folder plus a private cache on its own disk."""

    def __init__(self, name: str, data_path: Path, cache_dir: Path) -> None:
        self.name = name
        self.data_path = Path(data_path)
        self.cache_dir = Path(cache_dir)
        self.shards = sorted(self.data_path.glob("*.parquet")) if self.data_path.is_dir() else [self.data_path]

    @property
    def raw(self):
        return read_raw(self.data_path)

    def fingerprint(self) -> list:
        """What the cached results depend on: every shard's name, size and modification time."""
        return [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in self.shards if p.exists()]

    def _tokens_dir(self, config: PreprocessConfig) -> Path:
        return self.cache_dir / f"tokens-{_digest(self.name, self.fingerprint(), asdict(config))}"

    def preprocess(self, config: PreprocessConfig):
        """Tokens (a ``ShardedTable``) and training-split term counts, computed once per data and parameters."""
        from fedtopic_pipelines.core.ingest.common import ShardedTable
        from fedtopic_pipelines.core.text.preprocess import preprocess_shards

        folder = self._tokens_dir(config)
        done = folder / "term_counts.json"
        if done.is_file():
            logger.info("site %s: preprocessed tokens from the cache %s", self.name, folder)
            return ShardedTable.from_directory(folder), json.loads(done.read_text())
        result = preprocess_shards(self.raw, config)
        staging = folder.with_name(folder.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for k, path in enumerate(result.tokens.paths):
            shutil.move(str(path), staging / f"{k:06d}.parquet")
        result.tokens.discard()
        (staging / "term_counts.json").write_text(json.dumps(result.term_counts))
        (staging / "report.json").write_text(json.dumps(result.report))
        shutil.rmtree(folder, ignore_errors=True)
        staging.rename(folder)
        return ShardedTable.from_directory(folder), result.term_counts

    def proposal(self, preprocess: PreprocessConfig, consensus: ConsensusConfig) -> dict[str, int]:
        """This organisation's vocabulary proposal: its top-N terms and their counts."""
        from fedtopic_pipelines.core.vocab.consensus import propose_terms

        _, counts = self.preprocess(preprocess)
        return propose_terms(counts, consensus.top_n, consensus.min_count)

    def prepare(self, preprocess: PreprocessConfig, terms: list[str], config: TrainConfig, index: int) -> Prepared:
        """The training split over ``terms`` (cached), minus the validation documents held out."""
        tokens_dir = self._tokens_dir(preprocess)
        path = self.cache_dir / f"bow-{_digest(tokens_dir.name, terms)}.npz"
        report_path = path.with_suffix(".json")
        if not (path.is_file() and report_path.is_file()):
            from fedtopic_pipelines.core.vocab.consensus import vectorize_frames

            tokens, _ = self.preprocess(preprocess)
            bow, report = vectorize_frames(tokens.frames(), terms)
            partial = path.with_name(path.stem + ".partial.npz")
            sp.save_npz(partial, bow.subset("train").matrix)
            report_path.write_text(json.dumps(report))
            partial.rename(path)
        report = json.loads(report_path.read_text())
        train = sp.load_npz(path).tocsr()
        validation = None
        if config.validation_fraction > 0:
            train, validation = hold_out_one(self.name, train, config.validation_fraction, config.seed, index)
        return Prepared(train, validation, {**report, "train_rows": int(train.shape[0])})

    def client(self, prepared: Prepared, config: TrainConfig, index: int) -> GradientClient:
        """The same client the in-process engine builds for the organisation at ``index``."""
        if prepared.train.shape[0] < 2:
            raise ValueError(
                f"organisation '{self.name}' has {prepared.train.shape[0]} training document(s) with words of the "
                "common vocabulary; training needs at least 2 (BatchNorm)"
            )
        return organisation_client(
            self.name, index, prepared.train, prepared.validation, config, resolve_device(config.device)
        )
