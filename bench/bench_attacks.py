"""Benchmark: what one hostile organisation out of the demo's five does to the others' model, per family.

Every cell is one federated run in process (``core/federation.py``'s ``run_federation``, the
entry point the pipelines call) on the non-IID demo corpus split as ``ingest_demo`` splits it
(newsgroup hierarchy -> organisation, ``--env``'s caps: the smoke environment by default, 150
training documents each), through the pipelines' site steps (preprocess, vocabulary consensus,
vectorise). One organisation (``--attacker``, default the first) is wrapped in
``core/audit/poisoning.py``'s :class:`Hostile`; the others are honest.

Families (rows), each with the block its pipeline trains, federated only, on the CPU:

* ``prodlda``: the environment's ``train`` block (FedSGD), ``--rounds`` rounds.
* ``nmf``: the ``fednmf`` block's FedAvg method at its first number of topics, ``--local-rounds``
  rounds of its local epochs, every organisation in every round (client_fraction 1: with
  sampling the attacker would sit out rounds at random and the cells would not compare).
* ``word2vec``: the ``word2vec`` block, ``--rounds`` rounds.
* ``pctd``: the ``pctd`` block (its noise, sigma 0.25, included), ``--local-rounds`` EM iterations.

Validation is off in every run (``validation_fraction: 0``) so that the measured model is the
last round's, not the best one early stopping would restore.

Attacks (columns; ``core/audit/poisoning.py`` says what each sends): ``none`` (the attacker
is honest), ``silent`` (it prepares, then never answers a round: the four honest organisations'
own federation, the reference), ``scale1000``, ``signflip1000`` (every tensor of its update
x1000 / x-1000; a weights update's change from the broadcast), ``capacity1e9`` (declares 1e9
training documents and claims 1e9 examples per update), ``replay`` (resends its first update
every round).

**Honest loss** (what the table reports): the final global model evaluated by the family's own
``validation_loss`` on each honest organisation's *training* documents, averaged with their
document counts as weights (the attacker's documents are left out). Per family that is
ProdLDA's negative ELBO per document (eval mode, one seeded sample), NMF's least-squares
reconstruction error per document with H fitted to the final W, Word2Vec's mean negative-sampling
loss over up to ``validation_pairs`` of the documents' skip-gram pairs, PC-TD's log completion
perplexity. ``ratio`` is the cell's honest loss over the ``silent`` cell's (1.00: the attacker did
no more harm than staying out; < 1: its documents helped). A run that cannot finish (every update
of a round rejected, e.g. after the global model became non-finite) is reported as its error.

Defences: the ``privacy`` block as ``kedro run`` builds it for ``--env`` (main's defaults when
no override: ``robust_rule: mean`` after the screen, ``outlier_factor: 100``), with ``--privacy KEY=VALUE``
overrides (dotted keys for nested blocks: ``--privacy robust_rule=median dp.level=off``),
applied to each family's block as the pipelines apply it (``parameters.with_privacy``); a
family that refuses a setting (Word2Vec and PC-TD take no robust rule) shows the refusal.
Per run the server's history gives, per organisation, the rounds whose update it rejected
and those it failed in; the screen (``privacy.outlier_factor``) the rounds it left it out.

Markdown table on stdout (and ``--out`` with ``.md``), every number in ``--out`` (JSON).

    .venv/bin/python bench/bench_attacks.py                                  # ~5 minutes on 2 cores
    .venv/bin/python bench/bench_attacks.py --privacy robust_rule=median
    .venv/bin/python bench/bench_attacks.py --rounds 300 --families prodlda  # the probe's 300 rounds
    .venv/bin/python bench/bench_attacks.py --smoke                          # seconds
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

logger = logging.getLogger("bench_attacks")

FAMILIES = ("prodlda", "nmf", "word2vec", "pctd")
# column -> (Hostile's attack, its factor)
ATTACKS: dict[str, tuple[str, float]] = {
    "none": ("none", 1.0),
    "silent": ("silent", 1.0),
    "scale1000": ("scale", 1000.0),
    "signflip1000": ("sign_flip", 1000.0),
    "capacity1e9": ("capacity", 1.0),
    "replay": ("replay", 1.0),
}
LOCAL_ROUNDS = ("nmf", "pctd")  # a round is a pass over all of an organisation's documents


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--attacks", nargs="+", default=list(ATTACKS), choices=list(ATTACKS))
    parser.add_argument("--rounds", type=int, default=100, help="FedSGD rounds (prodlda, word2vec)")
    parser.add_argument("--local-rounds", type=int, default=10, help="rounds of NMF's local epochs, PC-TD's EM")
    parser.add_argument("--env", default="smoke", help="the parameters' environment (base: none)")
    parser.add_argument("--train-docs", type=int, default=None, help="training documents per organisation (cap)")
    parser.add_argument("--attacker", default=None, help="the hostile organisation (default: the first)")
    parser.add_argument(
        "--privacy", nargs="*", default=[], metavar="KEY=VALUE", help="privacy overrides, e.g. robust_rule=median"
    )
    parser.add_argument("--out", type=Path, default=ROOT / ".cache/bench/attacks.json")
    parser.add_argument("--smoke", action="store_true", help="a few rounds of every cell (seconds each)")
    parser.add_argument("--verbose", action="store_true", help="keep the library's warnings (one per bad round)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.local_rounds = 3, 2
        args.train_docs = args.train_docs or 40
    return args


def privacy_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["robust_rule=median", "dp.level=off"]`` as the nested mapping ``--params`` takes (YAML values)."""
    import yaml

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--privacy expects KEY=VALUE, got {pair!r}")
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(raw)
    return out


# -- data and configs ----------------------------------------------------------------------------


class Demo:
    """The demo corpus through the site steps: vocabulary, bags of words, word sequences; and the
    validated parameters with the privacy overrides."""

    def __init__(self, args: argparse.Namespace) -> None:
        import pandas as pd
        from common import demo_corpus, project_config

        from fedtopic_pipelines.core.families.word2vec import sentences_from_frames

        overrides: dict[str, Any] = {}
        if args.train_docs is not None:
            overrides["ingest_demo"] = {"max_documents": {"train": args.train_docs}}
        if args.privacy:
            overrides["privacy"] = privacy_overrides(args.privacy)
        env = None if args.env in ("base", "none", "") else args.env
        self.params, self.project = project_config(env, overrides)
        self.vocabulary, bows, texts = demo_corpus(self.params, self.project)
        self.orgs = list(bows)
        self.matrices = {o: b.subset("train").matrix for o, b in bows.items()}
        terms, counts = self.vocabulary["term"].tolist(), self.vocabulary["frequency"].tolist()
        self.sequences = {
            org: sentences_from_frames([pd.DataFrame({"tokens": [" ".join(t) for t in docs]})], terms, counts)[0]
            for org, docs in texts.items()
        }

    def data(self, family: str) -> dict[str, Any]:
        return self.sequences if family in ("word2vec", "pctd") else self.matrices

    @property
    def privacy(self):
        from fedtopic_pipelines.core.config import PrivacyConfig

        return self.project.blocks.get("privacy") or PrivacyConfig()


def family_config(demo: Demo, family: str, args: argparse.Namespace):
    """The family's block as its pipeline trains it, federated, ``--rounds`` (or ``--local-rounds``),
    no validation, on the CPU, under the privacy block (``ConfigError`` if the family refuses it)."""
    from fedtopic_pipelines.experiments.fednmf import method_config
    from fedtopic_pipelines.parameters import with_privacy

    blocks = demo.project.blocks
    if family == "prodlda":
        train = demo.project.train
    elif family == "nmf":
        run = blocks["fednmf"]
        train = method_config(run, "fedavg", run.topics[0])
        train = train.replace(aggregation=train.aggregation.replace(client_fraction=1.0))
    else:
        train = blocks[family].train
    rounds = args.local_rounds if family in LOCAL_ROUNDS else args.rounds
    train = train.replace(
        scenarios=("federated",), max_steps=rounds, max_epochs=None, validation_fraction=0.0, device="cpu"
    )
    return with_privacy(train, demo.privacy, f"{family}.train")


# -- one run -------------------------------------------------------------------------------------


def _finite(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


def honest_loss(family_name: str, model, data: dict[str, Any], honest: list[str], seed: int) -> float:
    """The final model's ``validation_loss`` on each honest organisation's training documents,
    weighted by their number (see the module docstring)."""
    from fedtopic_pipelines.core.families import get_family

    family = get_family(family_name)
    total, count = 0.0, 0
    for org in honest:
        loss, n = family.validation_loss(model, data[org], seed)
        total, count = total + loss * n, count + n
    return total / count if count else math.nan


def run_cell(demo: Demo, family: str, column: str, config, attacker: str) -> dict[str, Any]:
    """One federated run with ``attacker`` under ``column``'s attack: honest loss, and per
    organisation the rounds rejected, failed and left out by the screen."""
    from fedtopic_pipelines.core.audit.poisoning import Hostile
    from fedtopic_pipelines.core.federated.engine import InProcessEngine
    from fedtopic_pipelines.core.federation import run_federation
    from fedtopic_pipelines.core.site import MemoryEndpoint

    attack, factor = ATTACKS[column]
    data = demo.data(family)
    endpoints = [MemoryEndpoint(o, d) for o, d in data.items()]
    hostile = Hostile(next(e for e in endpoints if e.name == attacker), attack, factor=factor)
    endpoints = [hostile if e.name == attacker else e for e in endpoints]
    seen: dict[str, Any] = {}

    def observe(server) -> None:
        seen["server"] = server

    started = time.perf_counter()
    cell: dict[str, Any] = {"attack": attack, "factor": factor}
    try:
        result = run_federation(
            InProcessEngine(endpoints),
            list(data),
            config,
            vocabulary=demo.vocabulary,
            progress=False,
            on_round_end=observe,
        )
    except Exception as exc:  # a run the attack broke is a result, not a crash of the table
        cell["error"] = f"{type(exc).__name__}: {exc}"[:300]
        history = seen["server"].history if "server" in seen else []
    else:
        history = result.model.history
        honest = [o for o in data if o != attacker]
        cell["honest_loss"] = _finite(honest_loss(family, result.model.to_model(), data, honest, config.seed))
    rejected, failed = Counter(), Counter()
    for record in history:
        rejected.update(record.rejected.keys())  # by organisation: the reasons are kept apart
        failed.update(record.failed.keys())
    screen = getattr(seen.get("server"), "screen", None)
    flagged = screen.left_out if screen is not None else Counter()
    margin = {what: round(ratio, 3) for what, ratio in (screen.largest if screen is not None else {}).items()}
    cell.update(
        rounds=len(history),
        attacked=hostile.attacked,
        rejected=dict(rejected),
        failed=dict(failed),
        flagged=dict(flagged),
        largest_accepted_ratio=margin,  # per measure: the largest value the screen kept, over the median
        reasons=sorted({r.rejected[attacker][:120] for r in history if attacker in r.rejected})[:3],
        seconds=round(time.perf_counter() - started, 2),
    )
    return cell


# -- table ---------------------------------------------------------------------------------------


def _number(value: Any) -> str:
    if isinstance(value, str):
        return value
    return f"{value:.4g}" if abs(value) < 1e5 else f"{value:.3g}"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{org} {n}" for org, n in sorted(counts.items())) or "-"


def markdown(results: dict[str, Any]) -> str:
    """family x attack: honest loss, ratio to silent, and what the server did about each organisation."""
    lines = [
        f"privacy: {json.dumps(results['privacy_overrides']) if results['privacy_overrides'] else 'defaults'}; "
        f"attacker: {results['attacker']}; rounds: {results['rounds']} (FedSGD), "
        f"{results['local_rounds']} (NMF, PC-TD)",
        "",
        "| family | attack | honest loss | ratio to silent | rejected (rounds) | failed (rounds) | screened out |",
        "|---|---|---|---|---|---|---|",
    ]
    for family, cells in results["families"].items():
        if "refused" in cells:
            lines.append(f"| {family} | all | refused: {cells['refused'][:150]} |  |  |  |  |")
            continue
        silent = cells.get("silent", {}).get("honest_loss")
        for column, cell in cells.items():
            loss = cell.get("honest_loss")
            if loss is None:
                shown, ratio = f"error: {cell.get('error', '?')[:80]}", ""
            else:
                shown = _number(loss)
                numeric = isinstance(loss, float) and isinstance(silent, float) and silent != 0
                ratio = f"{loss / silent:.3g}" if numeric else ""
            lines.append(
                f"| {family} | {column} | {shown} | {ratio} | {_counts(cell['rejected'])} | "
                f"{_counts(cell['failed'])} | {_counts(cell['flagged'])} |"
            )
    margins = [
        f"- {family}: " + ", ".join(f"{what} {ratio:.3g}x" for what, ratio in margin.items())
        for family, cells in results["families"].items()
        if (margin := cells.get("none", {}).get("largest_accepted_ratio"))
    ]
    if margins:
        lines += ["", "Honest runs (attack none): the largest value the screen kept, over its median", *margins]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from tqdm.auto import tqdm

    args = _args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from fedtopic_pipelines.core.config import ConfigError

    demo = Demo(args)
    # one warning per rejected or failed round (and a traceback per silent round) drowns the table
    quiet = logging.WARNING if args.verbose else logging.ERROR
    logging.getLogger("fedtopic_pipelines").setLevel(quiet)
    logging.getLogger("fedtopic_pipelines.core.federated.engine").setLevel(quiet if args.verbose else logging.CRITICAL)
    attacker = args.attacker or demo.orgs[0]
    if attacker not in demo.orgs:
        raise SystemExit(f"--attacker {attacker!r} is not one of {demo.orgs}")
    results: dict[str, Any] = {
        "env": args.env,
        "attacker": attacker,
        "organisations": demo.orgs,
        "documents": {o: int(m.shape[0]) for o, m in demo.matrices.items()},
        "rounds": args.rounds,
        "local_rounds": args.local_rounds,
        "privacy_overrides": privacy_overrides(args.privacy),
        "privacy": demo.privacy.to_params(),
        "families": {},
    }
    cells = [(f, a) for f in args.families for a in args.attacks]
    configs: dict[str, Any] = {}
    for family, column in tqdm(cells, desc="attacks", unit="run"):
        table = results["families"].setdefault(family, {})
        if family not in configs:
            try:
                configs[family] = family_config(demo, family, args)
            except ConfigError as exc:
                configs[family] = None
                table["refused"] = str(exc)
                logger.info("%s refuses the privacy block: %s", family, exc)
        if configs[family] is None:
            continue
        table[column] = run_cell(demo, family, column, configs[family], attacker)
        logger.info("%s %s: %s", family, column, {k: table[column].get(k) for k in ("honest_loss", "error")})
    text = markdown(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    args.out.with_suffix(".md").write_text(text + "\n")
    sys.stdout.write(text + "\n")
    logger.info("wrote %s and %s", args.out, args.out.with_suffix(".md"))


if __name__ == "__main__":
    main()
