"""Benchmark: time to tokenise one long synthetic document, with two source trees in one run.

Each (tree, size) is timed in a fresh subprocess that imports ``fedtopic_pipelines`` from the
given ``src`` folder and calls ``tokenize_documents([text], PreprocessConfig(...))`` with the
default tokenizer (``regexp``). The document is seeded random words separated by spaces and
newlines. ``max_document_chars`` is set to null so that the whole document is tokenised
(where the tree has the parameter). Results are logged as a Markdown table.

    .venv/bin/python bench/bench_long_document.py --before /work/main/src --after src --sizes-mb 10 20
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys

logger = logging.getLogger("bench_long_document")

CHILD = r"""
import json, sys, time
import numpy as np
from fedtopic_pipelines.core.config import PreprocessConfig
from fedtopic_pipelines.core.text.tokenize import tokenize_documents

n_chars = int(sys.argv[1])
rng = np.random.default_rng(0)
words = np.array(["rocket", "orbit", "launch", "engine", "hockey", "puck", "the", "and", "42", "naive"])
seps = np.array([" ", " ", " ", "\n"])
n = n_chars // 6 + 1
text = "".join(w + s for w, s in zip(rng.choice(words, n), rng.choice(seps, n)))[:n_chars]
fields = PreprocessConfig.model_fields
config = PreprocessConfig(**({"max_document_chars": None} if "max_document_chars" in fields else {}))
start = time.perf_counter()
try:
    tokens = tokenize_documents([text], config)[0]
    result = {"seconds": time.perf_counter() - start, "tokens": len(tokens), "error": None}
except Exception as exc:
    result = {"seconds": time.perf_counter() - start, "tokens": None, "error": f"{type(exc).__name__}: {exc}"[:120]}
print(json.dumps(result))
"""


def run(src: str, n_chars: int) -> dict:
    """Time one tokenisation in a subprocess that imports the package from ``src``."""
    env = {"PYTHONPATH": src, "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(n_chars)], env=env, capture_output=True, text=True)
    if out.returncode:
        return {"seconds": None, "tokens": None, "error": out.stderr.strip().splitlines()[-1][:120]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="src folder of the reference tree")
    parser.add_argument("--after", required=True, help="src folder of the tree under test")
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[10, 20])
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    rows = ["| size | tree | seconds | tokens kept | error |", "|---|---|---|---|---|"]
    for mb in args.sizes_mb:
        for name, src in (("before", args.before), ("after", args.after)):
            r = run(src, int(mb * 1_000_000))
            seconds = "" if r["seconds"] is None else f"{r['seconds']:.1f}"
            rows.append(f"| {mb:g} MB | {name} | {seconds} | {r['tokens'] or ''} | {r['error'] or ''} |")
            logger.info(rows[-1])
    logger.info("\n%s", "\n".join(rows))


if __name__ == "__main__":
    main()
