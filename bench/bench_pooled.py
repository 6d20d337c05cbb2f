"""Pooled BatchNorm's cost and its honest organisations' spread, on the demo (docs/batchnorm.md, section 8).

``cost``: the federated scenario in process for ``--steps`` steps under each of ``layer``,
``batch`` and ``pooled_batch``, alternated ``--reps`` times in one process so that a noisy host
weighs on all three alike; CPU seconds per step (``process_time``, one torch thread), their
ratios pair by pair, the messages per step and the bytes an organisation sent in the last step.

``spread``: ``pooled_batch`` trained with the outlier screen off for ``--steps`` steps, every
exchange's replies read from the in-process engine: how far each honest organisation's values
lie from the round's median (sums per document, both ways; derivatives and gradients by their
norm), as percentiles over the rounds. ``privacy.outlier_factor`` is judged against them.

    python bench/bench_pooled.py cost --steps 300 --reps 3 --json pooled_cost.json
    python bench/bench_pooled.py spread --steps 2800 --json pooled_spread.json
    python bench/bench_pooled.py cost --smoke
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from common import demo_matrices, project_config

from fedtopic_pipelines.core.federated.engine import InProcessEngine
from fedtopic_pipelines.core.federated.pooled import PHASE_KEY, SOLO
from fedtopic_pipelines.core.training import train_scenarios

logger = logging.getLogger("bench_pooled")
KINDS = ("layer", "batch", "pooled_batch")
PERCENTILES = (50, 90, 99, 99.9, 100)


def setup(env: str | None, steps: int, normalization: str | None = None, screen: bool = True):
    """The demo's training matrices and the project's train block for the federated scenario alone."""
    train: dict[str, Any] = {"max_steps": steps, "scenarios": ["federated"], "threads": 1}
    if normalization:
        train["model"] = {"normalization": normalization}
    overrides: dict[str, Any] = {"train": train}
    if not screen:
        overrides["privacy"] = {"outlier_factor": 0}
    params, project = project_config(env, overrides)
    vocabulary, matrices = demo_matrices(params, project)
    return vocabulary, matrices, project.train.replace(privacy=project.blocks["privacy"])


def cost(env: str | None, steps: int, reps: int) -> dict[str, Any]:
    vocabulary, matrices, base = setup(env, steps)
    seconds: dict[str, list[float]] = {kind: [] for kind in KINDS}
    last: dict[str, Any] = {}
    for _ in range(reps):
        for kind in KINDS:
            config = base.replace(model=base.model.replace(normalization=kind))
            start = time.process_time()
            models = train_scenarios(matrices, config, progress=False, vocabulary=vocabulary)
            seconds[kind].append((time.process_time() - start) / steps)
            record = models["federated"].history[-1]
            last[kind] = {"messages": record.exchanges, "bytes_sent": record.client_bytes}
    return {
        "steps": steps,
        "cpu_s_per_step": seconds,
        "pooled_over_layer": [p / q for p, q in zip(seconds["pooled_batch"], seconds["layer"], strict=True)],
        "pooled_over_batch": [p / q for p, q in zip(seconds["pooled_batch"], seconds["batch"], strict=True)],
        "last_step": last,
    }


def spread(env: str | None, steps: int) -> dict[str, Any]:
    vocabulary, matrices, config = setup(env, steps, "pooled_batch", screen=False)
    ratios: dict[int, list[float]] = {}
    broadcast = InProcessEngine.broadcast

    def recording(engine: InProcessEngine, instruction, to=None):
        replies = broadcast(engine, instruction, to)
        phase = instruction.config.get(PHASE_KEY)
        if phase is None or phase == SOLO or len(replies.updates) < 3:
            return replies
        norms = []
        for update in replies.updates:
            norm = float(torch.sqrt(sum((t.double() ** 2).sum() for t in update.tensors.values())))
            norms.append(norm / update.num_examples if phase < 2 else norm)  # sums: per document
        median = float(np.median(norms))
        worst = max(norms) / median
        if phase < 2:
            worst = max(worst, median / min(norms))
        ratios.setdefault(int(phase), []).append(worst)
        return replies

    InProcessEngine.broadcast = recording  # type: ignore[method-assign]
    try:
        train_scenarios(matrices, config, progress=False, vocabulary=vocabulary)
    finally:
        InProcessEngine.broadcast = broadcast  # type: ignore[method-assign]
    names = {0: "sums 1", 1: "sums 2", 2: "derivatives 2", 3: "derivatives 1", 4: "gradient"}
    out: dict[str, Any] = {"steps": steps}
    for phase, values in sorted(ratios.items()):
        array = np.asarray(values)
        out[names.get(phase, str(phase))] = {
            "percentiles": {str(p): round(float(np.percentile(array, p)), 2) for p in PERCENTILES},
            "rounds_over_100": int((array > 100).sum()),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("cost", "spread"))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--reps", type=int, default=3, help="cost: alternations of the three settings")
    parser.add_argument("--env", default=None, help="Kedro environment (default: base)")
    parser.add_argument("--json", type=Path, default=None, help="also write the result to this file")
    parser.add_argument("--smoke", action="store_true", help="smoke environment, a few steps")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.smoke:
        args.env, args.steps, args.reps = "smoke", 4, 1
    result = cost(args.env, args.steps, args.reps) if args.what == "cost" else spread(args.env, args.steps)
    text = json.dumps({args.what: result}, indent=1)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
