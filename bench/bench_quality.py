"""Benchmark: our ProdLDA, CombinedTM or ZeroShotTM against contextualized-topic-models 2.6.1's, side by side.

``--family combinedtm`` / ``zeroshottm``: every system is that model, and every system reads
the same sentence embeddings, computed once per document with our encoder
(``train.embeddings``; cached under ``.cache/bench/embeddings``); the reference is CTM's own
CombinedTM / ZeroShotTM on them. The default, ProdLDA, is described below.

On the demo corpus's bag of words (the chosen environment's parameters, built through the
pipelines' own site steps, ``common.demo_corpus``), for each seed, with the same number of
document passes (``--epochs`` over the pooled training documents):

1. the reference: CTM 2.6.1's ProdLDA (``bench/ctm_runner.py``: ``ZeroShotTM`` with the
   bag of words as its "contextual" input, which is exactly ProdLDA; see that file), run in
   a virtual environment of its own that this script creates (``--ctm-venv``, default
   ``.cache/bench/ctm-venv``: ``python -m venv``, a ``.pth`` file that points at the
   project's site-packages so torch and numpy are reused, then ``pip install --no-deps
   contextualized-topic-models==2.6.1 wordcloud==1.9.4``; never into the project's venv);
2. our centralized ProdLDA (the trusted-server scenario);
3. our federated ProdLDA (one client per organisation);
4. ``--scenarios sync`` (not run by default): what federated ProdLDA with *synchronised*
   BatchNorm computes (``common.train_synchronised``): each organisation's batches drawn
   exactly as its federated client draws them, their union normalised as one batch per step.

Every model is scored by the same evaluator:

* pooled NPMI: gensim ``CoherenceModel`` ``c_npmi`` (window 10), the top ``evaluate.top_words``
  words of each topic, on the pooled training texts of every organisation;
* topic diversity of the top ``evaluate.diversity_top_words`` words (``core/metrics/topics.py``);
* SVM macro-F1 (``core/metrics/classification.py``) on the topic vectors (posterior mean,
  eval mode) of the *pooled* test documents of every organisation, with their newsgroup labels;
* training documents per CPU-second (``time.process_time`` around training, torch at
  ``--threads`` threads, 1 by default) and their ratio to the reference's in the same seed.

Options for probing ours (docs/batchnorm.md, section 7): ``--set PATH=VALUE`` overrides any
parameter of ours (the reference keeps the environment's batch size), ``--pooled-as-one`` gives
ours the pooled corpus as one organisation (a step is one batch, the reference's protocol),
``--scenarios`` picks ours (none: the reference alone). The reference's result is cached under
``.cache/bench/reference`` by its settings and data, with the CPU time of the run that trained it;
``--retime-reference`` trains it again, so that every ratio compares times of the same run.
The library it times is the one Python imports: ``.venv`` installs this checkout's ``src``, so
a before/after comparison with another tree (a git worktree) runs this script with
``PYTHONPATH=<tree>/src``.

``--smoke`` runs the same code on the smoke environment for 2 epochs and 1 seed; it uses the
reference's venv only when it already exists, and says so loudly when it skips it.

    .venv/bin/python bench/bench_quality.py [--epochs 28] [--seeds 3] [--env ENV] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import site
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from common import ROOT, demo_corpus, project_config, train_synchronised

from fedtopic_pipelines.core.config import EvaluateConfig, from_mapping
from fedtopic_pipelines.core.metrics.classification import svm_macro_f1
from fedtopic_pipelines.core.metrics.topics import redundancy, top_words, topic_diversity
from fedtopic_pipelines.core.training import train_scenarios

logger = logging.getLogger("bench")

CTM_PACKAGES = ("contextualized-topic-models==2.6.1", "wordcloud==1.9.4")  # wordcloud: imported by ctm.py
REFERENCE = {"prodlda": "CTM 2.6.1 ProdLDA (reference)", "combinedtm": "CTM 2.6.1 CombinedTM (reference)"}
REFERENCE["zeroshottm"] = "CTM 2.6.1 ZeroShotTM (reference)"
OURS = ("ours, centralized", "ours, federated (5 organisations)", "ours, synchronised BatchNorm (5 organisations)")
SCENARIOS = ("centralized", "federated", "sync")  # OURS's, in order


def ctm_python(venv: Path, create: bool) -> Path | None:
    """The reference's interpreter, creating its venv first when asked and absent."""
    python = venv / "bin" / "python"
    if python.is_file():
        link = next(venv.glob("lib/python*/site-packages")) / "fedtopic_project.pth"
        wanted = "\n".join(site.getsitepackages()) + "\n"
        if not link.is_file() or link.read_text() != wanted:  # the project's venv moved or was rebuilt
            logger.warning("pointing the reference's venv %s at this project's site-packages", venv)
            link.write_text(wanted)
        return python
    if not create:
        return None
    logger.warning("creating the reference's virtual environment %s (%s)", venv, ", ".join(CTM_PACKAGES))
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    packages = next(venv.glob("lib/python*/site-packages"))
    (packages / "fedtopic_project.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", *CTM_PACKAGES], check=True)
    return python


def cached_reference(
    python: Path,
    train: sp.csr_matrix,
    test: sp.csr_matrix,
    settings: dict,
    timeout: float,
    embeddings=None,
    retime: bool = False,
) -> dict:
    """:func:`run_reference`, its result kept under ``.cache/bench/reference`` by a hash of the
    settings and the matrices (CPU time included: a cached row reports the first run's; ``retime``
    trains it again in this run, so that ratios compare times taken on the host as it is now)."""
    import hashlib

    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for matrix in (train.tocsr(), test.tocsr()):
        for part in (matrix.data, matrix.indices, matrix.indptr):
            digest.update(np.ascontiguousarray(part).tobytes())
    if embeddings is not None:
        for values in embeddings:
            digest.update(np.ascontiguousarray(values).tobytes())
    path = ROOT / ".cache" / "bench" / "reference" / f"{digest.hexdigest()[:20]}.npz"
    if path.is_file() and not retime:
        logger.info("reference: cached result %s (its CPU time is the first run's; --retime-reference)", path)
        out = np.load(path)
        return {k: out[k] for k in out.files}
    result = run_reference(python, train, test, settings, timeout, embeddings)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **result)
    return result


def run_reference(
    python: Path, train: sp.csr_matrix, test: sp.csr_matrix, settings: dict, timeout: float, embeddings=None
) -> dict:
    """CTM in a subprocess of its own venv: the BoW (and, for a contextual family, the train and
    test embeddings) go in through a file, its results come back in one."""
    with tempfile.TemporaryDirectory(prefix="bench-ctm-") as tmp:
        source, target = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        arrays = {}
        if embeddings is not None:
            arrays |= {"train_embeddings": embeddings[0], "test_embeddings": embeddings[1]}
        for name, matrix in (("train", train), ("test", test)):
            matrix = matrix.tocsr().astype(np.float32)
            arrays |= {f"{name}_data": matrix.data, f"{name}_indices": matrix.indices}
            arrays |= {f"{name}_indptr": matrix.indptr, f"{name}_shape": np.array(matrix.shape)}
        np.savez(source, settings=json.dumps(settings), **arrays)
        env = {**os.environ, "OMP_NUM_THREADS": str(settings["threads"]), "MKL_NUM_THREADS": str(settings["threads"])}
        env.pop("PYTHONPATH", None)  # nothing of the project's source: only the reference and its dependencies
        done = subprocess.run(
            [str(python), str(ROOT / "bench" / "ctm_runner.py"), str(source), str(target)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(f"the reference run failed ({done.returncode}):\n{done.stderr[-4000:]}")
        out = np.load(target)
        return {k: out[k] for k in out.files}


def run_ours(
    matrices: dict,
    vocabulary,
    env: str | None,
    scenario: str,
    steps: int,
    seed: int,
    test,
    family: str = "prodlda",
    normalization: str | None = None,
    extra: dict | None = None,
) -> dict:
    """One of our scenarios through the pipelines' training entry point, with its CPU time; a
    contextual family's ``test`` is (bag of words, embeddings). ``extra``: ``--set`` overrides."""
    engine_scenario = "federated" if scenario == "sync" else scenario  # sync: the federated streams, not a scenario
    overrides = {"scenarios": [engine_scenario], "max_steps": steps, "max_epochs": None, "seed": seed}
    overrides["model"] = {"family": family}
    if normalization is not None:
        overrides["model"]["normalization"] = normalization
    if family != "prodlda":
        overrides["model"]["embedding_size"] = int(test[1].shape[1])
    merged = deep_merge(extra or {}, {"train": {**overrides, "validation_fraction": 0.0}})
    _, project = project_config(env, merged)
    cpu, wall = time.process_time(), time.perf_counter()
    if scenario == "sync":
        trained = train_synchronised(matrices, project.train, len(vocabulary), vocabulary)
    else:
        trained = train_scenarios(matrices, project.train, progress=False, vocabulary=vocabulary)[scenario]
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    model = trained.to_model()
    documents = steps * len(matrices) * project.train.batch_size  # every organisation holds > batch_size
    if family == "prodlda":
        theta = model.doc_topic(torch.from_numpy(test.toarray().astype(np.float32))).numpy()
    else:
        from fedtopic_pipelines.core.models.ctm import ContextualBatch

        bow, embedded = test
        batch = ContextualBatch(torch.from_numpy(bow.toarray().astype(np.float32)), torch.from_numpy(embedded))
        theta = model.doc_topic(batch).numpy()
    return {
        "topic_word": model.topic_word().numpy(),
        "test_theta": theta,
        "cpu_s": cpu,
        "wall_s": wall,
        "documents": documents,
    }


def contextual_inputs(params: dict, project, bows: dict, env: str | None, raw: Path | None = None):
    """Every document's sentence embedding, computed once with our encoder (``train.embeddings``)
    and cached per organisation (and corpus): our training data (bag of words + embeddings per
    organisation), our pooled test input, and the reference's (train, test) embeddings in pooled order."""
    from common import corpus_tables

    from fedtopic_pipelines.core.families.ctm import ContextualData
    from fedtopic_pipelines.core.site import texts_of
    from fedtopic_pipelines.core.text.embeddings import EmbeddingCache

    tables, settings = corpus_tables(params, raw), project.train.embeddings
    corpus = (env or "base") if raw is None else f"{env or 'base'}-{raw.name}"
    matrices, test_bows, train_embedded, test_embedded = {}, [], [], []
    for org, bow in bows.items():
        cache = EmbeddingCache(ROOT / ".cache" / "bench" / "embeddings" / corpus / org)
        values = cache.load_or_compute(
            texts_of(tables[org], bow.doc_ids.tolist(), org),
            settings.model,
            batch_size=settings.batch_size,
            max_seq_length=settings.max_seq_length,
            quantize=settings.quantize,
        )
        train, test = bow.split == "train", bow.split == "test"
        matrices[org] = ContextualData(bow.matrix[train].tocsr(), values[train])
        train_embedded.append(values[train])
        test_bows.append(bow.matrix[test])
        test_embedded.append(values[test])
    test_input = (sp.vstack(test_bows).tocsr(), np.concatenate(test_embedded).astype(np.float32))
    return matrices, test_input, (np.concatenate(train_embedded), test_input[1])


def pooled_npmi(topic_lists: list[list[str]], texts: list[list[str]]) -> list[float]:
    """gensim ``c_npmi`` of every topic on the pooled texts, counted once for all topics."""
    from gensim.corpora import Dictionary
    from gensim.models.coherencemodel import CoherenceModel

    dictionary = Dictionary(texts)
    missing = sorted({w for topic in topic_lists for w in topic} - set(dictionary.token2id))
    if missing:  # a term only in test texts: it co-occurs with nothing in the training texts
        logger.warning("%d top words never occur in the pooled training texts: %s", len(missing), missing[:10])
        dictionary.add_documents([missing])
    model = CoherenceModel(
        topics=topic_lists,
        texts=texts,
        dictionary=dictionary,
        coherence="c_npmi",
        topn=len(topic_lists[0]),
        processes=1,
    )
    return [float(x) for x in model.get_coherence_per_topic()]


def deep_merge(base: dict, update: dict) -> dict:
    """``update`` laid over ``base``, nested dictionaries merged key by key."""
    out = dict(base)
    for key, value in update.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def parse_sets(items: list[str]) -> dict:
    """``--set train.optimizer.lr=0.004`` (YAML values) as the nested overrides ``kedro run --params`` takes."""
    import yaml

    out: dict = {}
    for item in items:
        path, sep, raw = item.partition("=")
        if not sep or not path:
            raise SystemExit(f"--set {item!r}: expected a dotted parameter path, '=', a value")
        nested: dict = yaml.safe_load(raw)
        for key in reversed(path.split(".")):
            nested = {key: nested}
        out = deep_merge(out, nested)
    return out


def mean_std(values: list[float], digits: int = 3) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=28, help="passes over the pooled training documents")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for every system")
    parser.add_argument("--env", default=None, help="Kedro environment (default: base)")
    parser.add_argument(
        "--raw",
        type=Path,
        default=None,
        help="folder of the organisations' raw Parquet folders (a table, Wikipedia or S2ORC corpus after its "
        "environment's run; none: the demo's)",
    )
    parser.add_argument("--ctm-venv", type=Path, default=ROOT / ".cache/bench/ctm-venv")
    parser.add_argument("--no-reference", action="store_true", help="leave the reference library out")
    parser.add_argument(
        "--retime-reference",
        action="store_true",
        help="train the reference again in this run instead of reading its cached result and CPU time",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this file")
    parser.add_argument("--smoke", action="store_true", help="smoke environment, 2 epochs, 1 seed")
    parser.add_argument(
        "--family",
        default="prodlda",
        choices=("prodlda", "combinedtm", "zeroshottm"),
        help="the model of every system; combinedtm / zeroshottm embed every document once (our encoder, "
        "cached in .cache/bench/embeddings) and give all systems the same embeddings",
    )
    parser.add_argument(
        "--normalization",
        choices=("batch", "pooled_batch", "layer", "none"),
        default=None,
        help="ours: train.model.normalization",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="ours: a parameter override, e.g. train.optimizer.lr=0.004 or train.batch_size=8 (repeatable; the "
        "reference keeps the environment's batch size)",
    )
    parser.add_argument(
        "--pooled-as-one",
        action="store_true",
        help="ours: the pooled training corpus as ONE organisation, so a step is one batch of train.batch_size "
        "documents, the reference's protocol (centralized and federated then compute the same thing)",
    )
    parser.add_argument(
        "--scenarios",
        nargs="*",
        choices=SCENARIOS,
        default=["centralized", "federated"],
        help="ours; sync: the federated streams with synchronised BatchNorm (one normalised batch per step)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.env, args.epochs, args.seeds = "smoke", 2, 1
    reference_name = REFERENCE[args.family]
    systems = (
        reference_name,
        *(n for n, sc in zip(OURS, SCENARIOS, strict=True) if sc != "sync" or sc in args.scenarios),
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    torch.set_num_threads(args.threads)
    params, project = project_config(args.env)
    extra = parse_sets(args.set)
    reference_batch = project.train.batch_size
    if extra:
        _, project = project_config(args.env, extra)
    evaluate = from_mapping(EvaluateConfig, params["evaluate"], "evaluate")
    python = None if args.no_reference else ctm_python(args.ctm_venv, create=not args.smoke)
    if python is None:
        logger.warning(
            "REFERENCE SKIPPED: %s; the table has no CTM row",
            "--no-reference" if args.no_reference else f"no venv at {args.ctm_venv} (--smoke never creates it)",
        )
    vocabulary, bows, texts = demo_corpus(params, project, args.raw)
    terms = vocabulary["term"].tolist()
    matrices = {org: bow.subset("train").matrix for org, bow in bows.items()}
    tests = [bow.subset("test") for bow in bows.values()]
    test = sp.vstack([t.matrix for t in tests]).tocsr()
    ours_test, reference_embeddings = test, None
    if args.family != "prodlda":
        matrices, ours_test, reference_embeddings = contextual_inputs(params, project, bows, args.env, args.raw)
    labels = np.concatenate([t.labels for t in tests])
    pooled_train = sp.vstack([getattr(m, "bow", m) for m in matrices.values()]).tocsr()
    if args.pooled_as_one:
        if args.family != "prodlda":
            raise SystemExit("--pooled-as-one: ProdLDA only")
        matrices = {"pooled": pooled_train}
    pooled_texts = [t for org in texts for t in texts[org]]
    train_config = project.train
    n_docs = pooled_train.shape[0]
    steps = math.ceil(args.epochs * n_docs / (len(matrices) * train_config.batch_size))
    logger.info(
        "%d organisations, %d training / %d test documents, V = %d; %d epochs = %d of our steps of %d documents",
        len(matrices),
        n_docs,
        test.shape[0],
        len(terms),
        args.epochs,
        steps,
        len(matrices) * train_config.batch_size,
    )
    warm = ours_test if args.family == "prodlda" else (ours_test[0][:2], ours_test[1][:2])
    run_ours(matrices, vocabulary, args.env, "centralized", 2, 0, warm, args.family, args.normalization, extra)
    runs: dict[str, list[dict]] = {name: [] for name in (reference_name, *OURS)}
    for seed in range(args.seeds):
        if python is not None:
            settings = {
                "seed": seed,
                "epochs": args.epochs,
                "threads": args.threads,
                "batch_size": reference_batch,
                "n_topics": train_config.model.n_topics,
                "hidden_sizes": list(train_config.model.hidden_sizes),
                "family": args.family,
            }
            runs[reference_name].append(
                cached_reference(
                    python,
                    pooled_train,
                    test,
                    settings,
                    timeout=7200,
                    embeddings=reference_embeddings,
                    retime=args.retime_reference,
                )
            )
            logger.info("seed %d: reference trained in %.1f CPU-s", seed, float(runs[reference_name][-1]["cpu_s"]))
        for name, scenario in zip(OURS, SCENARIOS, strict=True):
            if scenario not in args.scenarios:
                continue
            model = (args.family, args.normalization, extra)
            runs[name].append(run_ours(matrices, vocabulary, args.env, scenario, steps, seed, ours_test, *model))
            logger.info("seed %d: %s trained in %.1f CPU-s", seed, name, runs[name][-1]["cpu_s"])
    # one coherence count for every topic of every model
    ranked = [
        (name, i, top_words(r["topic_word"], terms, evaluate.top_words))
        for name in systems
        for i, r in enumerate(runs[name])
    ]
    per_topic = pooled_npmi([t for _, _, topics in ranked for t in topics], pooled_texts) if ranked else []
    start = 0
    for name, i, topics in ranked:
        run = runs[name][i]
        run["npmi"] = float(np.mean(per_topic[start : start + len(topics)]))
        start += len(topics)
        run["diversity"] = topic_diversity(top_words(run["topic_word"], terms, evaluate.diversity_top_words))
        found = redundancy(topics, evaluate.duplicate_shared_words, evaluate.rbo_weight)
        run["largest_overlap"], run["inverted_rbo"] = found.largest_overlap, found.inverted_rbo
        run["macro_f1"] = svm_macro_f1(run["test_theta"], labels, evaluate.svm_test_size, evaluate.svm_c, evaluate.seed)
        run["docs_per_cpu_s"] = float(run["documents"]) / float(run["cpu_s"])
        run["topics"] = [" ".join(t) for t in topics]
    print(f"model family: {args.family}")
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{args.threads} thread(s) per system"
    )
    print(
        f"{'demo corpus' if args.raw is None else f'raw tables under {args.raw}'} ({args.env or 'base'}): "
        f"{len(matrices)} organisations, {n_docs} training / {test.shape[0]} test "
        f"documents (pooled), V = {len(terms)}, K = {train_config.model.n_topics}, {args.epochs} epochs "
        f"(reference: batches of {reference_batch}; ours: {steps} steps of "
        f"{len(matrices) * train_config.batch_size}), {args.seeds} seed(s), mean ± std over seeds\n"
    )
    if extra or args.pooled_as_one:
        print(
            f"ours: overrides {json.dumps(extra)}{', pooled corpus as one organisation' if args.pooled_as_one else ''}"
        )
    header = (
        "system",
        "pooled NPMI",
        "topic diversity",
        "largest topic overlap",
        "inverted RBO",
        "macro-F1 (pooled test)",
        "training CPU s",
        "documents / CPU-s",
    )
    print("| " + " | ".join(header) + " | vs reference |")
    print("| --- " * (len(header) + 1) + "|")
    reference = runs[reference_name]
    for name in systems:
        if not runs[name]:
            print(f"| {name} | skipped" + " |" * len(header))
            continue
        rs = runs[name]
        ratio = (
            mean_std([r["docs_per_cpu_s"] / ref["docs_per_cpu_s"] for r, ref in zip(rs, reference, strict=True)], 2)
            + "x"
            if reference
            else "-"
        )
        f1 = [r["macro_f1"] for r in rs if r["macro_f1"] is not None]
        print(
            f"| {name} | {mean_std([r['npmi'] for r in rs])} | {mean_std([r['diversity'] for r in rs])} | "
            f"{mean_std([float(r['largest_overlap']) for r in rs], 1)} | {mean_std([r['inverted_rbo'] for r in rs])} | "
            f"{mean_std(f1) if f1 else '-'} | {mean_std([float(r['cpu_s']) for r in rs], 1)} | "
            f"{mean_std([r['docs_per_cpu_s'] for r in rs], 0)} | {ratio} |"
        )
    if args.json:
        keep = ("npmi", "diversity", "largest_overlap", "inverted_rbo", "macro_f1", "cpu_s", "wall_s", "documents")
        keep += ("docs_per_cpu_s", "topics")
        out = {
            name: [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items() if k in keep} for r in rs]
            for name, rs in runs.items()
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
