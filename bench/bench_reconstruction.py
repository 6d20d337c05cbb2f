"""Benchmark: ProdLDA's reconstruction term on a sparse batch, at the present words only or
through a dense bag of words.

One training step (forward and backward, 1 thread) of the base model on a synthetic sparse
CSR batch of about 60 distinct words per document, with the reconstruction term
-sum_w n_w log softmax(logits)_w computed two ways in the same process, in interleaved blocks
so that machine noise hits both:

* ``dense (before)``: the batch densified and multiplied with the log-softmax of the logits;
* ``sparse (now)``: N lse(logits) - sum_w n_w logits_w, reading the logits at the batch's
  entries only, with the gradient N softmax(logits) - n written at them only
  (``fedtopic_pipelines.core.models.prodlda._SparseCountsNLL``).

Everything else in the step (the sparse first layer, the decoder) is the same code. The
before variant replaces the model module's ``_reconstruction`` for its blocks: this script
compares two formulas of one term, not two versions of the library.

    .venv/bin/python bench/bench_reconstruction.py [--vocab 1976 13729] [--batch 32 64] [--blocks 15] [--smoke]
"""

from __future__ import annotations

import argparse
import logging
import platform
import statistics
import sys
import time

import numpy as np
import scipy.sparse as sp
import torch

from fedtopic_pipelines.core.config import ProdLDAConfig
from fedtopic_pipelines.core.models import prodlda

logger = logging.getLogger("bench")
SPARSE = prodlda._reconstruction


def dense_reconstruction(bow: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """The term as computed before: the library's own dense branch (the batch densified, times
    the log-softmax), which a dense batch still takes."""
    return SPARSE(prodlda.dense_bow(bow), logits)


def step_times(vocab: int, batch: int, blocks: int, steps: int) -> dict[str, list[float]]:
    """Milliseconds per step of each variant, one value per block, blocks interleaved."""
    config = ProdLDAConfig(n_topics=20, hidden_sizes=(100, 100), normalization="layer")
    model = prodlda.ProdLDA.create(vocab, config, 0).train()
    matrix = sp.random(batch, vocab, density=min(1.0, 60 / vocab), random_state=0, format="csr", dtype=np.float32)
    matrix.data = np.ceil(matrix.data * 3)
    bow = prodlda.csr_tensor(matrix)
    generator = torch.Generator().manual_seed(0)
    variants = {"dense (before)": dense_reconstruction, "sparse (now)": SPARSE}

    def run(term, count: int) -> float:
        prodlda._reconstruction = term
        start = time.process_time()
        for _ in range(count):
            model.zero_grad(set_to_none=True)
            model.loss_on_batch(bow, generator).loss.backward()
        return (time.process_time() - start) / count * 1e3

    try:
        for term in variants.values():
            run(term, max(2, steps // 2))  # warm-up: allocator, compiled loops
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(blocks):
            for name, term in variants.items():
                times[name].append(run(term, steps))
    finally:
        prodlda._reconstruction = SPARSE
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", type=int, nargs="+", default=[1976, 13729])
    parser.add_argument("--batch", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--steps", type=int, default=50, help="steps per block")
    parser.add_argument("--smoke", action="store_true", help="a small vocabulary, 2 blocks of 3 steps")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.smoke:
        args.vocab, args.batch, args.blocks, args.steps = [300], [8], 2, 3
    torch.set_num_threads(1)
    lines = [
        f"{platform.machine()}, torch {torch.__version__}, 1 thread; {args.blocks} blocks of {args.steps} steps each",
        "",
        "| words | documents | dense (before) ms/step | sparse (now) ms/step | speed-up per block: median [min, max] |",
        "| --- | --- | --- | --- | --- |",
    ]
    for vocab in args.vocab:
        for batch in args.batch:
            logger.info("%d words, %d documents per batch", vocab, batch)
            times = step_times(vocab, batch, args.blocks, args.steps)
            before, now = times["dense (before)"], times["sparse (now)"]
            ratios = [b / a for b, a in zip(before, now, strict=True)]
            lines.append(
                f"| {vocab} | {batch} | {statistics.median(before):.2f} | {statistics.median(now):.2f} | "
                f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}, {max(ratios):.2f}] |"
            )
    sys.stdout.write("\n".join(lines) + "\n")  # the report, for docs/performance.md


if __name__ == "__main__":
    main()
