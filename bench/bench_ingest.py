"""Benchmark: Wikipedia ingestion throughput, its peak memory, and preprocessing speed.

Three measurements, in one run, on valid dumps generated from gensim's real Wikipedia
fragment (pages repeated under fresh ids; written under ``--workdir``, never committed):

(a) throughput of ``ingest_wikipedia`` (base rules of ``parameters_ingest_wikipedia.yml``)
    on a multistream and a plain dump of the same pages, against ``bzcat FILE > /dev/null``
    timed on the same file in the same run, interleaved with the ingestion runs (best of
    3); processes = all cores, and 1 for reference. Target: ratio bzcat / ingest >= 0.5;
(b) peak RSS of the whole process tree (main process + workers, sampled every 50 ms from
    outside) while ingesting multistream dumps of 1x, 4x and 16x ``--rss-base-mb``, each in
    a fresh subprocess. Target: under 1 GiB and flat in the input size;
(c) documents / s of ``preprocess_shards`` with 1 and 2 processes on at least
    ``PARALLEL_MIN_DOCUMENTS`` ingested articles (repeated), with identical outputs;

plus a cProfile of a processes=1 ingestion (where the time goes). Results are logged as
Markdown tables (for docs/performance.md) and written as JSON to ``--output``.

    .venv/bin/python bench/bench_ingest.py [--size-mb 150] [--rss-base-mb 25] [--smoke]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from fedtopic_pipelines.core.config import IngestWikipediaConfig, PreprocessConfig, from_mapping

if TYPE_CHECKING:
    import psutil

# Everything heavier is imported inside the functions that use it: spawned workers import this
# script as their __main__, and the RSS child must measure the library, not this script's imports.

ROOT = Path(__file__).resolve().parents[1]
logger = logging.getLogger("bench")

MB = 1e6  # throughput in decompressed MB (10^6 bytes) / s, as bzcat's output
MIB = 1 << 20  # memory in MiB
TARGET_RATIO = 0.5
TARGET_RSS_MIB = 1024
RSS_MULTIPLES = (1, 4, 16)
SAMPLE_S = 0.05
# Where the ingestion time goes: (label, file substring, function name) summed over cProfile's cumulative times.
PROFILE_BUCKETS = (
    ("bz2 decompression", "~", "<method 'decompress' of '_bz2.BZ2Decompressor' objects>"),
    ("XML parsing (ET.fromstring)", "xml/etree/ElementTree.py", "XML"),
    ("markup stripping (wikitext.filter_wiki)", "ingest/wikitext.py", "filter_wiki"),
    ("category regex (findall)", "~", "<method 'findall' of 're.Pattern' objects>"),
    ("organisation rules (Rules.match)", "ingest/common.py", "match"),
    ("split_pages (all page work)", "ingest/wikipedia.py", "split_pages"),
    ("parse_page", "ingest/wikipedia.py", "parse_page"),
    ("stream_starts (header scan)", "ingest/wikipedia.py", "stream_starts"),
    ("shard writing (_write_unit)", "ingest/wikipedia.py", "_write_unit"),
)


# Helpers --------------------------------------------------------------------------------


def _yaml(name: str) -> dict:
    return yaml.safe_load((ROOT / "conf" / "base" / name).read_text())


def ingest_config(processes: int | None) -> IngestWikipediaConfig:
    raw = _yaml("parameters_ingest_wikipedia.yml")["ingest_wikipedia"]
    return from_mapping(IngestWikipediaConfig, {**raw, "processes": processes}, "ingest_wikipedia")


def preprocess_config(processes: int) -> PreprocessConfig:
    raw = _yaml("parameters_preprocess.yml")["preprocess"]
    return from_mapping(PreprocessConfig, {**raw, "processes": processes}, "preprocess")


def cpu_seconds() -> float:
    """User + system CPU of this process and its reaped children (pool workers are reaped when the pool closes)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``fn()``, its wall seconds and CPU seconds (this process and its children)."""
    cpu, start = cpu_seconds(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start, cpu_seconds() - cpu


def steal_fraction() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs so far, from /proc/stat (0, 1 where unavailable)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return 0, 1
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def machine_info() -> dict:
    try:
        bz = subprocess.run(
            ["bzip2", "--version"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10
        )
        bz_line = next((ln.strip() for ln in (bz.stderr + bz.stdout).splitlines() if ln.strip()), "?")
    except (OSError, subprocess.SubprocessError):
        bz_line = "?"
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout)
    except OSError:
        commit, dirty = "?", None
    import gensim
    import psutil

    return {
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "processor": platform.processor() or platform.machine(),
        "memory_gib": round(psutil.virtual_memory().total / (1 << 30), 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "bzcat": bz_line,
        "gensim": gensim.__version__,
        "git_commit": commit,
        "git_dirty": dirty,
        "loadavg_start": list(os.getloadavg()),
    }


# Dumps ----------------------------------------------------------------------------------


def sample_pages(pages: list[bytes], target_bytes: float) -> list[bytes]:
    """Fewer pages than the fragment (``--smoke``), in fragment order: for each organisation the smallest
    article its default rules match (so none is left empty, which ingestion rejects), then every k-th page."""
    from fedtopic_pipelines.core.ingest.common import Rules
    from fedtopic_pipelines.core.ingest.wikipedia import CATEGORY

    config = ingest_config(None)
    rules = Rules.compile(config.organisations, list(config.organisations), "ingest_wikipedia", config.multi_match)
    chosen: set[int] = set()
    for org in config.organisations:
        hits = [
            i
            for i, page in enumerate(pages)
            if b"<redirect" not in page and org in rules.match(CATEGORY.findall(page.decode("utf-8")))[0]
        ]
        if hits:
            chosen.add(min(hits, key=lambda i: len(pages[i])))
    stride = max(1, round(sum(map(len, pages)) / target_bytes))
    for i in range(0, len(pages), stride):
        if sum(len(pages[j]) for j in chosen) >= target_bytes:
            break
        chosen.add(i)
    return [pages[i] for i in sorted(chosen)]


def make_dump(path: Path, target_mb: float, multistream: bool, regenerate: bool) -> dict:
    """A valid dump of about ``target_mb`` decompressed MB (whole copies of the fragment, or a sample of it).

    Reused from an earlier run when present (generation is deterministic); written under
    a temporary name first, so a killed run never leaves half a dump.
    """
    from dumpgen import fragment_parts, repeated_pages, write_dump
    from tqdm.auto import tqdm

    meta_path = path.with_name(path.name + ".json")
    if path.is_file() and meta_path.is_file() and not regenerate:
        return json.loads(meta_path.read_text())
    header, pages, footer = fragment_parts()
    per_copy = sum(map(len, pages))
    copies = max(1, round(target_mb * MB / per_copy))
    if target_mb * MB < per_copy:  # less than one copy: a sample of the pages that every organisation matches
        pages = sample_pages(pages, target_mb * MB)
        copies = 1
    n_total = copies * len(pages)
    stats = {"pages": 0, "bytes": len(header) + len(footer)}

    def counted() -> Iterator[bytes]:
        for page in tqdm(repeated_pages(pages, copies), total=n_total, desc=path.name):
            stats["pages"] += 1
            stats["bytes"] += len(page)
            yield page

    tmp = path.with_name(path.name + ".tmp")
    start = time.perf_counter()
    write_dump(tmp, counted(), multistream=multistream)
    os.replace(tmp, path)
    meta = {
        "file": str(path),
        "kind": "multistream" if multistream else "plain",
        "pages": stats["pages"],
        "decompressed_mb": stats["bytes"] / MB,
        "compressed_mb": path.stat().st_size / MB,
        "generation_s": time.perf_counter() - start,
    }
    meta_path.write_text(json.dumps(meta))
    logger.info(
        "wrote %s: %d pages, %.1f MB decompressed, %.1f MB compressed",
        path,
        meta["pages"],
        meta["decompressed_mb"],
        meta["compressed_mb"],
    )
    return meta


def time_bzcat(path: Path) -> tuple[float, float]:
    """Wall and CPU seconds of ``bzcat path > /dev/null``."""
    (_, wall, cpu) = timed(lambda: subprocess.run(["bzcat", str(path)], stdout=subprocess.DEVNULL, check=True))
    return wall, cpu


def report_summary(report: dict) -> dict:
    """The counts the cost depends on: share of redirects, share of articles matched by the rules."""
    read = report["documents_read"]
    dropped = report["dropped"]
    redirects = dropped.get("redirect", 0)
    articles = read - redirects - dropped.get("namespace", 0) - dropped.get("malformed", 0)
    matched = articles - dropped.get("no_matching_category", 0) - dropped.get("several_organisations", 0)
    return {
        "pages_read": read,
        "redirects": redirects,
        "redirect_fraction": redirects / read if read else 0.0,
        "articles": articles,
        "articles_matched": matched,
        "matched_fraction": matched / articles if articles else 0.0,
        "kept_rows_total": report["kept_total"],
        "several_organisations_matched": report["notes"].get("several_organisations_matched", 0),
        "dropped": dropped,
        "units": report["units"],
    }


def run_ingest(path: Path, processes: int | None, work: Path) -> tuple[dict, float, float]:
    """One ingestion from scratch (the work directory is cleared first, so nothing is resumed)."""
    from fedtopic_pipelines.core.ingest.wikipedia import ingest_wikipedia

    shutil.rmtree(work, ignore_errors=True)
    config = ingest_config(processes)
    orgs = list(config.organisations)
    (_, report), wall, cpu = timed(lambda: ingest_wikipedia([path], orgs, config, work))
    return report, wall, cpu


# (a) throughput -------------------------------------------------------------------------


def bench_throughput(dump: dict, workdir: Path, repeats: int) -> dict:
    """bzcat, ingest(all), bzcat, ingest(1), bzcat ... on one file: bzcat is timed around each ingestion."""
    from fedtopic_pipelines.core.shards import resolve_processes

    path = Path(dump["file"])
    all_cores = resolve_processes(None)
    settings = [("all", None, all_cores)] + ([("1", 1, 1)] if all_cores > 1 else [])
    bzcat = [time_bzcat(path)]
    runs: dict[str, dict] = {}
    summary = None
    for _ in range(repeats):
        for label, processes, n in settings:
            work = workdir / "work" / f"{dump['kind']}-{label}"
            s0, t0 = steal_fraction()
            report, wall, cpu = run_ingest(path, processes, work)
            s1, t1 = steal_fraction()
            summary = summary or report_summary(report)
            run = runs.setdefault(label, {"processes": n, "seconds": [], "cpu_s": [], "steal_fraction": []})
            run["seconds"].append(wall)
            run["cpu_s"].append(cpu)
            run["steal_fraction"].append((s1 - s0) / max(t1 - t0, 1))
            run["work"] = str(work)
            bzcat.append(time_bzcat(path))
            logger.info(
                "%s processes=%s: %.2f s (bzcat around it: %.2f s, %.2f s)",
                dump["kind"],
                label,
                wall,
                bzcat[-2][0],
                bzcat[-1][0],
            )
    bz_best = min(w for w, _ in bzcat)
    for run in runs.values():
        best = min(run["seconds"])
        run["best_s"] = best
        run["mb_s"] = dump["decompressed_mb"] / best
        run["ratio_vs_bzcat"] = bz_best / best
        run["cpu_s_per_mb"] = min(run["cpu_s"]) / dump["decompressed_mb"]
        # per-core efficiency, less sensitive to other jobs taking cores: bzcat CPU s / ingest CPU s (all processes)
        run["cpu_ratio_vs_bzcat"] = min(c for _, c in bzcat) / min(run["cpu_s"])
    return {
        **dump,
        "bzcat_s": [w for w, _ in bzcat],
        "bzcat_cpu_s": [c for _, c in bzcat],
        "bzcat_best_s": bz_best,
        "bzcat_mb_s": dump["decompressed_mb"] / bz_best,
        "ingest": runs,
        "report": summary,
    }


# (b) peak RSS ---------------------------------------------------------------------------


def vm_hwm_kib() -> int:
    """Peak RSS of this process since its exec (``VmHWM``; 0 where /proc is missing)."""
    try:
        line = next(ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return 0
    return int(line.split()[1])


def rss_child(dump: Path, work: Path, result: Path) -> None:
    """Child mode: one ingestion with the base parameters (all cores), its own ru_maxrss and its workers'."""
    report, wall, cpu = run_ingest(dump, None, work)
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    result.write_text(
        json.dumps(
            {
                "seconds": wall,
                "cpu_s": cpu,
                "vmhwm_main_mib": vm_hwm_kib() / 1024,
                # ru_maxrss survives fork + exec: it may include the parent's RSS at fork time (see VmHWM)
                "ru_maxrss_main_mib": own.ru_maxrss / 1024,
                "ru_maxrss_largest_worker_mib": kids.ru_maxrss / 1024,
                "report": report_summary(report),
            }
        )
    )


def tree_rss(proc: psutil.Process) -> tuple[int, int, int]:
    """(RSS sum of the process and its descendants, RSS of the process itself, number of processes)."""
    import psutil

    try:
        members = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0, 0
    total, own = 0, 0
    for member in members:
        try:
            rss = member.memory_info().rss
        except psutil.NoSuchProcess:
            continue
        total += rss
        own = rss if member.pid == proc.pid else own
    return total, own, len(members)


def bench_peak_rss(dump: dict, workdir: Path, label: str) -> dict:
    """Run ``--rss-child`` in a fresh interpreter and sample its process tree's RSS from here."""
    import psutil

    work = workdir / "work" / f"rss-{label}"
    result = workdir / f"rss-{label}.json"
    result.unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--rss-child", dump["file"], "--rss-work", str(work)]
    cmd += ["--rss-result", str(result)]
    peak_total = peak_main = max_procs = samples = 0
    start = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env={**os.environ, "TQDM_DISABLE": "1"})
    proc = psutil.Process(child.pid)
    while child.poll() is None:
        total, own, n = tree_rss(proc)
        peak_total, peak_main, max_procs = max(peak_total, total), max(peak_main, own), max(max_procs, n)
        samples += 1
        time.sleep(SAMPLE_S)
    wall = time.perf_counter() - start
    if child.returncode != 0 or not result.is_file():
        raise RuntimeError(f"RSS child for {dump['file']} failed with exit code {child.returncode}")
    out = json.loads(result.read_text())
    shutil.rmtree(work, ignore_errors=True)
    return {
        "label": label,
        "file": dump["file"],
        "decompressed_mb": dump["decompressed_mb"],
        "compressed_mb": dump["compressed_mb"],
        "peak_tree_rss_mib": peak_total / MIB,
        "peak_main_rss_mib": peak_main / MIB,
        "max_processes": max_procs,
        "samples": samples,
        "child_wall_s": wall,
        **out,
    }


# (c) preprocessing ----------------------------------------------------------------------


def build_preprocess_input(work: Path, target: Path, n_docs: int, shard_docs: int) -> dict:
    """All organisations' ingested articles (each once), repeated under fresh ids up to ``n_docs`` documents."""
    import pandas as pd

    from fedtopic_pipelines.core.ingest.common import SHARD_COLUMNS
    from fedtopic_pipelines.core.shards import ShardedTable, write_parquet_atomic

    shutil.rmtree(target, ignore_errors=True)
    frame = ShardedTable(sorted(work.glob("*/*.parquet"))).to_frame(SHARD_COLUMNS)
    frame = frame.drop_duplicates("source_id").reset_index(drop=True)
    if frame.empty:
        raise RuntimeError(f"no ingested article under {work}")
    reps = -(-n_docs // len(frame))
    big = pd.concat([frame.assign(doc_id=f"r{r}:" + frame["doc_id"]) for r in range(reps)], ignore_index=True)
    big = big.iloc[:n_docs].assign(organisation="bench")
    paths = []
    for k, begin in enumerate(range(0, len(big), shard_docs)):
        path = target / f"part-{k:05d}.parquet"
        write_parquet_atomic(big.iloc[begin : begin + shard_docs].reset_index(drop=True), path)
        paths.append(path)
    return {
        "documents": len(big),
        "distinct_articles": len(frame),
        "text_mb": float(big["text"].str.len().sum()) / MB,
        "mean_chars_per_document": float(big["text"].str.len().mean()),
        "train_fraction": float((big["split"] == "train").mean()),
        "shards": len(paths),
        "paths": [str(p) for p in paths],
    }


def bench_preprocess(source_work: Path, workdir: Path, n_docs: int, shard_docs: int) -> dict:
    import pandas as pd

    from fedtopic_pipelines.core.shards import ShardedTable
    from fedtopic_pipelines.core.text.preprocess import PARALLEL_MIN_DOCUMENTS, preprocess_shards

    data = build_preprocess_input(source_work, workdir / "preprocess" / "input", n_docs, shard_docs)
    table = ShardedTable(data.pop("paths"))
    staging = workdir / "preprocess" / "staging"
    staging.mkdir(parents=True, exist_ok=True)
    runs, outputs = {}, {}
    for processes in (1, 2):
        result, wall, cpu = timed(lambda p=processes: preprocess_shards(table, preprocess_config(p), staging))
        runs[str(processes)] = {
            "processes_requested": processes,
            "processes_used": result.report.get("processes"),
            "seconds": wall,
            "cpu_s": cpu,
            "docs_s": data["documents"] / wall,
            "text_mb_s": data["text_mb"] / wall,
            "vocabulary_size": len(result.term_counts),
        }
        outputs[processes] = (result.term_counts, result.tokens.to_frame(), result.report)
        result.tokens.discard()
        logger.info("preprocess processes=%d: %.1f s, %.0f docs/s", processes, wall, data["documents"] / wall)
        if result.report.get("processes") != processes:
            logger.warning(
                "preprocess_shards used %s process(es) for processes=%d", result.report.get("processes"), processes
            )
    (counts1, tokens1, report1), (counts2, tokens2, report2) = outputs[1], outputs[2]
    assert counts1 == counts2, "term_counts differ between processes=1 and processes=2"
    pd.testing.assert_frame_equal(tokens1, tokens2)
    assert {k: v for k, v in report1.items() if k != "processes"} == {
        k: v for k, v in report2.items() if k != "processes"
    }, "reports differ between processes=1 and processes=2"
    return {
        **data,
        "min_documents_for_pool": PARALLEL_MIN_DOCUMENTS,
        "runs": runs,
        "speedup_2_vs_1": runs["1"]["seconds"] / runs["2"]["seconds"],
        "identical_outputs": True,
    }


# Profile --------------------------------------------------------------------------------


def bench_profile(dump: dict, workdir: Path, top: int) -> dict:
    """cProfile of a processes=1 ingestion (everything in this process), summarised by cumulative time."""
    import cProfile
    import pstats

    from fedtopic_pipelines.core.ingest.wikipedia import ingest_wikipedia

    work = workdir / "work" / "profile"
    shutil.rmtree(work, ignore_errors=True)
    config = ingest_config(1)
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.runcall(ingest_wikipedia, [Path(dump["file"])], list(config.organisations), config, work)
    wall = time.perf_counter() - start
    shutil.rmtree(work, ignore_errors=True)
    stats_path = workdir / "profile.pstats"
    profiler.dump_stats(stats_path)
    stats = pstats.Stats(str(stats_path))
    raw: dict = stats.stats  # type: ignore[attr-defined]
    total = max(ct for (_, _, _, ct, _) in raw.values())

    def rows(key: int) -> list[dict]:
        ordered = sorted(raw.items(), key=lambda kv: kv[1][key], reverse=True)[:top]
        return [
            {
                "function": f"{_short(file)}:{line}({name})",
                "ncalls": nc,
                "tottime_s": round(tt, 3),
                "cumtime_s": round(ct, 3),
                "cum_share": round(ct / total, 3),
            }
            for (file, line, name), (_, nc, tt, ct, _) in ordered
        ]

    buckets = {}
    for label, file_part, name in PROFILE_BUCKETS:
        cum = sum(v[3] for (file, _, fn), v in raw.items() if fn == name and file_part in file)
        buckets[label] = {"cumtime_s": round(cum, 3), "share": round(cum / total, 3)}
    return {
        "file": dump["file"],
        "decompressed_mb": dump["decompressed_mb"],
        "wall_s_profiled": wall,
        "profiled_total_s": total,
        "buckets": buckets,
        "top_cumulative": rows(3),
        "top_tottime": rows(2),
        "pstats": str(stats_path),
    }


def _short(file: str) -> str:
    for marker in ("site-packages/", "src/", "lib/python3.11/"):
        if marker in file:
            return file.split(marker, 1)[1]
    return file


# Report ---------------------------------------------------------------------------------


def log_tables(results: dict) -> None:
    lines = ["", "(a) ingestion throughput (decompressed XML MB/s; ratio = bzcat best-of-3 s / ingest s)"]
    lines += ["| dump | size (MB, compressed) | bzcat MB/s | processes | ingest s | ingest MB/s | ratio vs bzcat "]
    lines[-1] += "| CPU s / MB | CPU ratio vs bzcat |"
    lines += ["| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for kind, r in results.get("throughput", {}).items():
        for label, run in r["ingest"].items():
            lines.append(
                f"| {kind} | {r['decompressed_mb']:.0f} ({r['compressed_mb']:.0f}) | {r['bzcat_mb_s']:.1f} | "
                f"{label} ({run['processes']}) | {run['best_s']:.1f} | {run['mb_s']:.2f} | "
                f"**{run['ratio_vs_bzcat']:.2f}** | {run['cpu_s_per_mb']:.3f} | {run['cpu_ratio_vs_bzcat']:.2f} |"
            )
    for kind, r in results.get("throughput", {}).items():
        s = r["report"]
        lines.append(
            f"{kind}: {s['pages_read']} pages, redirects {s['redirect_fraction']:.1%}, articles matched by the "
            f"default rules {s['matched_fraction']:.1%} ({s['articles_matched']}/{s['articles']}), {s['units']} units"
        )
    if "peak_rss" in results:
        p = results["peak_rss"]
        lines += ["", "(b) peak RSS of the process tree (sampled every 50 ms), multistream, processes = all cores"]
        lines += [
            "| input | MB decompressed (compressed) | peak tree RSS MiB | main MiB (VmHWM) | ru_maxrss worker MiB "
        ]
        lines[-1] += "| processes | s |"
        lines += ["| --- | --- | --- | --- | --- | --- | --- |"]
        for s in p["sizes"]:
            lines.append(
                f"| {s['label']} | {s['decompressed_mb']:.0f} ({s['compressed_mb']:.0f}) | "
                f"**{s['peak_tree_rss_mib']:.0f}** | {s['peak_main_rss_mib']:.0f} ({s['vmhwm_main_mib']:.0f}) | "
                f"{s['ru_maxrss_largest_worker_mib']:.0f} | {s['max_processes']} | "
                f"{s['seconds']:.1f} |"
            )
        lines.append(
            f"peak(16x) / peak(1x) = **{p['ratio_16x_1x']:.2f}**, peak(16x) / peak(4x) = {p['ratio_16x_4x']:.2f}; "
            f"target < {TARGET_RSS_MIB} MiB and flat"
        )
    if "preprocess" in results:
        p = results["preprocess"]
        lines += [
            "",
            f"(c) preprocess_shards on {p['documents']} documents ({p['text_mb']:.0f} MB of text, "
            f"mean {p['mean_chars_per_document']:.0f} chars, {p['shards']} shards)",
        ]
        lines += ["| processes (used) | s | documents / s | text MB / s |", "| --- | --- | --- | --- |"]
        for label, run in p["runs"].items():
            lines.append(
                f"| {label} ({run['processes_used']}) | {run['seconds']:.1f} | {run['docs_s']:.0f} | "
                f"{run['text_mb_s']:.2f} |"
            )
        lines.append(f"speedup 2 vs 1: **{p['speedup_2_vs_1']:.2f}x**; identical outputs: {p['identical_outputs']}")
    if "profile" in results:
        p = results["profile"]
        lines += ["", f"profile: processes=1 on {p['decompressed_mb']:.0f} MB, {p['profiled_total_s']:.1f} s profiled"]
        lines += ["| part | cumulative s | share |", "| --- | --- | --- |"]
        lines += [f"| {k} | {v['cumtime_s']:.2f} | {v['share']:.1%} |" for k, v in p["buckets"].items()]
        lines += ["| top by cumulative time | ncalls | tottime s | cumtime s |", "| --- | --- | --- | --- |"]
        lines += [
            f"| {r['function']} | {r['ncalls']} | {r['tottime_s']} | {r['cumtime_s']} |" for r in p["top_cumulative"]
        ]
        lines += ["| top by own time | ncalls | tottime s | cumtime s |", "| --- | --- | --- | --- |"]
        lines += [
            f"| {r['function']} | {r['ncalls']} | {r['tottime_s']} | {r['cumtime_s']} |" for r in p["top_tottime"]
        ]
    lines.append(f"\nwall time of the run: {results['wall_s']:.0f} s; machine: {results['machine']}")
    logger.info("\n".join(lines))


# Main -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench_ingest"), help="dumps and work folders")
    parser.add_argument("--output", type=Path, default=None, help="results JSON (default: WORKDIR/ingest.json)")
    parser.add_argument("--size-mb", type=float, default=150.0, help="(a) decompressed size of each dump")
    parser.add_argument("--repeats", type=int, default=1, help="(a) ingestion runs per setting (best kept)")
    parser.add_argument("--rss-base-mb", type=float, default=25.0, help="(b) 1x size; 4x and 16x are multiples")
    parser.add_argument("--preprocess-docs", type=int, help="(c) documents (default: PARALLEL_MIN_DOCUMENTS)")
    parser.add_argument("--preprocess-shard-docs", type=int, default=2500, help="(c) documents per input shard")
    parser.add_argument("--profile-mb", type=float, default=30.0, help="cProfile dump size (0: no profile)")
    parser.add_argument("--profile-top", type=int, default=25)
    parser.add_argument("--skip", nargs="*", default=[], choices=["throughput", "rss", "preprocess", "profile"])
    parser.add_argument("--regenerate", action="store_true", help="rewrite dumps even if present")
    parser.add_argument(
        "--smoke", "--quick", dest="smoke", action="store_true", help="tiny sizes: a smoke check in well under a minute"
    )
    parser.add_argument("--rss-child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--rss-work", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--rss-result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.rss_child:
        logging.getLogger().setLevel(logging.WARNING)
        rss_child(args.rss_child, args.rss_work, args.rss_result)
        return
    if args.preprocess_docs is None:
        from fedtopic_pipelines.core.text.preprocess import PARALLEL_MIN_DOCUMENTS

        args.preprocess_docs = PARALLEL_MIN_DOCUMENTS
    if args.smoke:
        args.size_mb, args.rss_base_mb, args.profile_mb = 2.0, 0.25, 2.0
        args.preprocess_docs, args.preprocess_shard_docs = 200, 50
    for noisy in ("gensim", "fedtopic_pipelines"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    workdir: Path = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    dumps = workdir / "dumps"
    output = args.output or workdir / "ingest.json"
    started, start = dt.datetime.now().astimezone(), time.perf_counter()
    steal0 = steal_fraction()
    results: dict[str, Any] = {"benchmark": "bench_ingest", "args": {k: str(v) for k, v in vars(args).items()}}
    results["machine"] = machine_info()
    results["started"] = started.isoformat(timespec="seconds")
    results["targets"] = {"ratio_vs_bzcat_min": TARGET_RATIO, "peak_rss_mib_max": TARGET_RSS_MIB}
    logger.info("machine: %s", results["machine"])

    def save() -> None:
        results["wall_s"] = time.perf_counter() - start
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(results, indent=2, default=str))

    tag = f"{args.size_mb:g}mb"
    if "throughput" not in args.skip:
        results["throughput"] = {}
        for kind, multistream in (("multistream", True), ("plain", False)):
            dump = make_dump(dumps / f"{kind}-{tag}.xml.bz2", args.size_mb, multistream, args.regenerate)
            results["throughput"][kind] = bench_throughput(dump, workdir, args.repeats)
            save()
    if "rss" not in args.skip:
        sizes = []
        for m in RSS_MULTIPLES:
            mb = args.rss_base_mb * m
            dump = make_dump(dumps / f"multistream-rss-{mb:g}mb.xml.bz2", mb, True, args.regenerate)
            sizes.append(bench_peak_rss(dump, workdir, f"{m}x"))
            logger.info("peak RSS %dx (%.0f MB): %.0f MiB", m, dump["decompressed_mb"], sizes[-1]["peak_tree_rss_mib"])
        results["peak_rss"] = {
            "sizes": sizes,
            "ratio_16x_1x": sizes[-1]["peak_tree_rss_mib"] / sizes[0]["peak_tree_rss_mib"],
            "ratio_16x_4x": sizes[-1]["peak_tree_rss_mib"] / sizes[1]["peak_tree_rss_mib"],
            "note": "RSS summed over the process tree counts shared pages (libraries) once per process",
        }
        save()
    if "preprocess" not in args.skip:
        source = workdir / "work" / "multistream-all"
        if not source.is_dir():  # throughput skipped: ingest a small dump for the articles
            dump = make_dump(dumps / "multistream-rss-25mb.xml.bz2", 25.0, True, args.regenerate)
            run_ingest(Path(dump["file"]), None, source)
        results["preprocess"] = bench_preprocess(source, workdir, args.preprocess_docs, args.preprocess_shard_docs)
        save()
    if "profile" not in args.skip and args.profile_mb > 0:
        dump = make_dump(dumps / f"multistream-{args.profile_mb:g}mb.xml.bz2", args.profile_mb, True, args.regenerate)
        results["profile"] = bench_profile(dump, workdir, args.profile_top)
    steal1 = steal_fraction()
    results["machine"]["steal_fraction_during_run"] = (steal1[0] - steal0[0]) / max(steal1[1] - steal0[1], 1)
    results["machine"]["loadavg_end"] = list(os.getloadavg())
    results["finished"] = dt.datetime.now().astimezone().isoformat(timespec="seconds")
    save()
    shutil.rmtree(workdir / "work", ignore_errors=True)
    shutil.rmtree(workdir / "preprocess", ignore_errors=True)
    log_tables(results)
    logger.info("results written to %s", output)


if __name__ == "__main__":
    main()
