"""Project hooks: parameters checked before anything runs, one run at a time in a project
folder, MLflow runs a user can tell apart, killed runs that do not stay RUNNING, and an INFO
line for each start-up phase that takes time."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kedro.framework.context import KedroContext
from kedro.framework.hooks import hook_impl
from kedro.framework.project import settings
from kedro.pipeline import Pipeline

from fedtopic_pipelines.core.config import ConfigError
from fedtopic_pipelines.core.lineage import digest
from fedtopic_pipelines.parameters import check_run, trained_blocks, validate_parameters
from fedtopic_pipelines.pipeline_registry import project_parameters

logger = logging.getLogger(__name__)


class ValidateParametersHook:
    """Parse every parameter block before any node runs.

    ``corpus`` and ``organisations`` are checked by ``register_pipelines``, which needs
    them; here we only make sure ``--params`` did not change them behind the registry's back.

    A misspelt key or block, a value of the wrong type (``max_steps: 2.5``, a string for a
    count, ``.nan``), or an unknown scenario, family or merge rule then stops the run at
    once, naming the parameter, instead of after ingestion and preprocessing.
    """

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        # The project's pipelines (and through them torch) are imported here, not when Kedro
        # reads settings.py: ``kedro --help`` and ``kedro mlflow ui`` stay fast.
        from fedtopic_pipelines.pipeline_registry import project_parameters

        logger.info("MLflow tracking set up; checking every parameter block")

        # ``config_loader["parameters"]`` (with --params) rather than ``context.params``:
        # Kedro validates the latter against every registered pipeline, which would build
        # (import) all of them before Kedro knows which ones the run needs.
        params = context.config_loader["parameters"]
        configured = project_parameters(context.project_path, context.env)
        for key in ("corpus", "organisations"):
            if params.get(key) != configured.get(key):
                raise ConfigError(
                    f"parameter '{key}' cannot be changed with --params: it shapes the pipelines "
                    f"(one namespace per organisation); set it in conf/<env>/parameters.yml and use --env"
                )
        self.config = validate_parameters(params)
        logger.debug("parameters validated")

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Pipeline, catalog: Any) -> None:
        """What the parameters and this machine can answer about the named pipelines (the privacy
        switch against each family, robust rules against the organisations per round, devices)."""
        config = getattr(self, "config", None)
        if config is not None:
            check_run(config, run_params.get("pipeline_names"))


def default_env() -> str:
    """The environment of a run without ``--env`` or ``KEDRO_ENV`` (settings: ``local``)."""
    return settings.CONFIG_LOADER_ARGS.get("default_run_env") or "base"


def run_name(pipeline_names: list[str] | None, env: str, families: Sequence[str] = (), changed: str = "") -> str:
    """``<pipeline>@<environment>``: ``all@local`` for ``kedro run``, ``train@s2orc`` for
    ``kedro run --pipelines=train --env=s2orc``; several pipelines joined by ``+``. Then the
    family the run trains (``N families`` for several) and ``changed``, the short hash of the
    parameters that differ from ``conf/base`` (:func:`changed_parameters`), when given."""
    names = [("all" if name == "__default__" else name) for name in (pipeline_names or ["__default__"])]
    family = families[0] if len(families) == 1 else f"{len(families)} families" if families else ""
    return " ".join(part for part in (f"{'+'.join(names)}@{env}", family, changed) if part)


def _flat(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, Mapping) and value:
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def changed_parameters(params: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """Every parameter (dotted path) whose value differs from ``conf/base``'s: the environment's and
    ``--params``' changes; a parameter that base has and the run lacks maps to None."""
    run, reference = _flat(params), _flat(base)
    return {key: run.get(key) for key in sorted(set(run) | set(reference)) if run.get(key) != reference.get(key)}


def run_families(params: Mapping[str, Any], pipeline_names: list[str] | None) -> list[str]:
    """The model families the named pipelines train (none for ingestion or preprocessing alone)."""
    try:
        blocks = trained_blocks(validate_parameters(params), pipeline_names)
    except ConfigError:  # the validation hook has said why
        return []
    return list(dict.fromkeys(block.train.model.family for block in blocks))


def git_commit(project_path: Path) -> dict[str, str]:
    """The project's git commit and whether the work tree differs from it (empty outside git)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=project_path, capture_output=True, text=True, timeout=10, check=True
        ).stdout

    try:
        commit = git("rev-parse", "HEAD").strip()
        dirty = git("status", "--porcelain", "--untracked-files=no").strip()
        untracked = git("status", "--porcelain", "--untracked-files=all", "--", "conf").splitlines()
    except (OSError, subprocess.SubprocessError):
        return {}
    # an environment folder of one's own (conf/mycorpus) is typically untracked: say so, since
    # git_dirty (tracked files only) cannot, and conf_fingerprint records its content
    new_conf = [line[3:] for line in untracked if line.startswith("??")]
    return {
        "mlflow.source.git.commit": commit,
        "git_dirty": str(bool(dirty)).lower(),
        "git_untracked_conf": json.dumps(new_conf)[:7000] if new_conf else "none",
    }


def conf_fingerprints(project_path: Path, envs: Sequence[str]) -> dict[str, str]:
    """The content fingerprint of every file of the configuration folders ``envs`` read (base, then
    the run's environment), by path relative to the project: which exact files defined the run,
    tracked by git or not. Contents are not logged (an environment may hold credentials)."""
    conf = project_path / settings.CONF_SOURCE
    return {
        str(path.relative_to(project_path)): digest(path.read_bytes().decode("utf-8", "replace"))
        for env in dict.fromkeys(envs)
        for path in sorted((conf / env).rglob("*"))
        if path.is_file()
    }


class RunIdentityHook:
    """Name each MLflow run by pipeline and environment and log what a user filters runs by.

    kedro-mlflow names every run after its pipeline (``__default__`` for ``kedro run``) and
    logs only the parameters that nodes read, so runs of different corpora looked alike.
    This adds params ``corpus``, ``kedro_env`` and ``organisations``, the same as tags, and
    the git commit (MLflow's ``mlflow.source.git.commit`` tag, shown in the UI) with
    ``git_dirty``. A run name set in ``mlflow.yml`` (``tracking.run.name``) is kept.
    """

    def __init__(self) -> None:
        self._context: KedroContext | None = None

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        self._context = context

    @hook_impl(trylast=True)  # after kedro-mlflow's own before_pipeline_run has started the run
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Pipeline, catalog: Any) -> None:
        import mlflow

        run = mlflow.active_run()
        if run is None or self._context is None:  # tracking disabled for this pipeline
            return
        params = self._context.config_loader["parameters"]
        names = run_params.get("pipeline_names") or ["__default__"]
        env = run_params.get("env") or self._context.env or default_env()
        identity: dict[str, Any] = {
            "corpus": params.get("corpus"),
            "kedro_env": env,
            # the same value (a list) kedro-mlflow logs when a node reads params:organisations
            "organisations": params.get("organisations"),
        }
        mlflow.log_params(identity)
        tags = {key: str(value) for key, value in identity.items()}
        tags.update(git_commit(self._context.project_path))
        base = project_parameters(self._context.project_path, settings.CONFIG_LOADER_ARGS.get("base_env", "base"))
        changed = changed_parameters(params, base)
        changed_id = digest(changed)[:6] if changed else ""
        # what the run name's hash stands for (MLflow keeps up to 8,000 characters of a tag)
        tags["params_changed_from_base"] = json.dumps(changed, default=str)[:7000] if changed else "none"
        tags["params_changed_id"] = changed_id or "none"
        files = conf_fingerprints(
            self._context.project_path, [settings.CONFIG_LOADER_ARGS.get("base_env", "base"), env]
        )
        tags["conf_fingerprint"] = digest(files)
        tags["conf_files"] = json.dumps(files)[:7000]
        if run.info.run_name == "+".join(names):  # kedro-mlflow's default: not set in mlflow.yml
            tags["mlflow.runName"] = run_name(names, env, run_families(params, names), changed_id)
        mlflow.set_tags(tags)
        logger.info(
            "MLflow run '%s' (%s): corpus '%s', environment '%s'; %d nodes to run",
            tags.get("mlflow.runName", run.info.run_name),
            run.info.run_id,
            identity["corpus"],
            env,
            len(pipeline.nodes),
        )
        # MLflow 3.17's UI opens an experiment on its GenAI overview unless the URL (or the
        # browser's stored choice) asks for model training; it reads no experiment tag for it
        logger.info("in `mlflow ui`: #/experiments/%s?workflowType=machine_learning", run.info.experiment_id)

    @hook_impl(tryfirst=True)  # before kedro-mlflow's after_pipeline_run ends the run
    def after_pipeline_run(self, run_params: dict[str, Any], pipeline: Pipeline, catalog: Any) -> None:
        """The corpus the run trained or scored on, as the run's MLflow dataset input (the runs
        table's Dataset column): only when the run read or wrote every organisation's bag of words."""
        import mlflow

        if mlflow.active_run() is None or self._context is None:
            return
        params = self._context.config_loader["parameters"]
        organisations = list(params.get("organisations") or [])
        bows = [f"clients.{org}.bow" for org in organisations]
        if not organisations or not set(bows) <= set(pipeline.datasets()):
            return
        env = run_params.get("env") or self._context.env or default_env()
        corpus = corpus_input(params.get("corpus") or "demo", env, organisations, [catalog.get(b) for b in bows])
        if corpus is not None:
            frame, name, fingerprint, tags = corpus
            dataset = mlflow.data.from_pandas(frame, name=name, digest=fingerprint)
            mlflow.log_input(dataset, context="training", tags=tags)


def corpus_input(
    corpus: str, env: str, organisations: list[str], bows: list[Any]
) -> tuple[Any, str, str, dict[str, str]] | None:
    """The corpus as the models saw it: a table of documents per organisation and split, the
    name ``<corpus>@<environment>``, a fingerprint of every organisation's tokens and the
    vocabulary (core/lineage.py), and tags; None when a bag of words cannot say (not written)."""
    import pandas as pd

    lineages = {}
    for org, dataset in zip(organisations, bows, strict=True):
        if dataset is None or not hasattr(dataset, "lineage") or not dataset.exists():
            return None
        lineages[org] = dataset.lineage()
    frame = pd.DataFrame(  # counts as floats: MLflow's schema inference hints at integer columns otherwise
        [
            {"organisation": org, "split": split, "documents": float(n)}
            for org, lineage in lineages.items()
            for split, n in lineage["documents"].items()
        ]
    )
    vocabulary = next((lineage["vocabulary"] for lineage in lineages.values() if lineage["vocabulary"]), None)
    fingerprint = digest({"vocabulary": vocabulary, "tokens": {o: v["tokens"] for o, v in lineages.items()}})
    tags = {
        "organisations": ",".join(organisations),
        "documents": str(int(frame["documents"].sum())),
        "vocabulary": str(vocabulary),
        "kedro_env": env,
    }
    return frame, f"{corpus}@{env}", fingerprint, tags


LOCK_FILE = ".kedro-run.lock"  # in the project folder; git-ignored
REPORTS = "08_reporting"


def report_files(pipeline: Pipeline, catalog: Any) -> list[Path]:
    """The existing local files of the reports ``pipeline`` writes: its outputs under a
    ``08_reporting`` folder saved as one file, or as a folder of partitions that each save empties
    first (``overwrite: true``). A partitioned report without it is left out, since a run may
    write only some of its partitions (a sweep's), and so is a versioned one."""
    found = []
    for name in sorted(pipeline.all_outputs()):
        dataset = catalog.get(name)  # None: an output the catalog does not hold (kept in memory)
        if dataset is None or getattr(dataset, "_version", None) is not None:
            continue
        described = dataset._describe()
        if described.get("filepath") is not None:
            files = [Path(str(described["filepath"]))]
        elif described.get("path") is not None and getattr(dataset, "_overwrite", False):
            files = sorted(p for p in Path(str(described["path"])).rglob("*") if p.is_file())
        else:
            continue
        found.extend(f for f in files if REPORTS in f.parts and f.is_file())
    return found


class StaleReportsHook:
    """A failed run must not leave an earlier run's reports looking current (``dvc metrics show``,
    a figure in 08_reporting): before the first node, the reports this run rewrites are removed,
    as ``dvc repro`` removes a stage's outputs before its command (a partitioned report's files
    only where each save empties its folder anyway). A run that ends writes them all again; one
    that fails leaves them missing, not stale. Runs after the lock and the
    parameter checks, so a refused run removes nothing."""

    @hook_impl(trylast=True)
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Pipeline, catalog: Any) -> None:
        stale = report_files(pipeline, catalog)
        for file in stale:
            file.unlink(missing_ok=True)
        if stale:
            logger.info("%d reports of an earlier run removed: this run writes them again", len(stale))
            logger.debug("removed: %s", ", ".join(map(str, stale)))


class ProjectLockHook:
    """One ``kedro run`` at a time in a project folder (``core/runlock.py``).

    Taken before any other hook starts the run (so a refused run leaves no MLflow run behind)
    and let go when the pipeline ends or fails; a killed run's lock goes with its process.
    Every pipeline takes it: one that only reads (``evaluate``) would otherwise read another
    run's artefacts half-written.
    """

    def __init__(self) -> None:
        self._project: Path | None = None
        self._lock: Any = None

    @hook_impl
    def after_context_created(self, context: KedroContext) -> None:
        self._project = Path(context.project_path)

    @hook_impl(tryfirst=True)
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Pipeline, catalog: Any) -> None:
        from fedtopic_pipelines.core.runlock import RunLock

        if self._lock is not None:  # a run of this process ended without its end hooks: a new run
            self._lock.release()
        project = Path(run_params.get("project_path") or self._project or Path.cwd())
        names = run_params.get("pipeline_names") or ["__default__"]
        env = run_params.get("env") or default_env()
        lock = RunLock(project / LOCK_FILE)
        lock.acquire(f"kedro run, pipeline {run_name(names, env)}")
        self._lock = lock
        logger.debug("run lock %s taken", lock.path)

    def _release(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    @hook_impl
    def after_pipeline_run(self, run_params: dict[str, Any], pipeline: Pipeline, catalog: Any) -> None:
        self._release()

    @hook_impl
    def on_pipeline_error(self, error: Exception, run_params: dict[str, Any], pipeline: Pipeline, catalog: Any) -> None:
        self._release()


class StartupPhasesHook:
    """Say what happens between ``kedro run`` and the first node (once 2 minutes of silence
    on a busy host): Kedro's own start, the MLflow store's set-up, building the pipelines."""

    def __init__(self) -> None:
        self._started = time.perf_counter()

    @hook_impl(tryfirst=True)
    def after_context_created(self, context: KedroContext) -> None:
        self._started = time.perf_counter()
        logger.info("environment '%s': setting up MLflow tracking", context.env or default_env())

    @hook_impl
    def after_catalog_created(self, catalog: Any) -> None:
        logger.info(
            "pipelines built and data catalog created (%d datasets), %.1f s after the MLflow set-up began",
            len(list(catalog.keys())),
            time.perf_counter() - self._started,
        )


def stage_of(node_name: str) -> str:
    """A node's stage: its name without the namespace (``clients.<org>.clean_documents`` and
    ``compare.clients.<org>.evaluate_organisation`` count under their function's node name)."""
    return node_name.rsplit(".", 1)[-1]


class StageTimingsHook:
    """End every run, finished or failed, with where its time went: one INFO line per stage
    (nodes of one name across the organisations' namespaces), slowest first, with how many
    nodes ran, their total and their longest seconds; in MLflow as ``timing.<stage>.seconds``.
    Short lines, so that a log piped to a file stays a table."""

    def __init__(self) -> None:
        self._open: dict[str, float] = {}
        self._seconds: dict[str, list[float]] = {}
        self._failed: set[str] = set()
        self._started = time.perf_counter()

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Pipeline, catalog: Any) -> None:
        self._open, self._seconds, self._failed = {}, {}, set()
        self._started = time.perf_counter()

    @hook_impl
    def before_node_run(self, node: Any) -> None:
        self._open[node.name] = time.perf_counter()

    def _close(self, node: Any) -> None:
        started = self._open.pop(node.name, None)
        if started is not None:
            self._seconds.setdefault(stage_of(node.name), []).append(time.perf_counter() - started)

    @hook_impl
    def after_node_run(self, node: Any) -> None:
        self._close(node)

    @hook_impl
    def on_node_error(self, error: Exception, node: Any) -> None:
        self._failed.add(stage_of(node.name))
        self._close(node)

    @hook_impl(tryfirst=True)  # before kedro-mlflow ends the MLflow run
    def after_pipeline_run(self, run_params: dict[str, Any], pipeline: Pipeline, catalog: Any) -> None:
        self._report("finished")

    @hook_impl(tryfirst=True)
    def on_pipeline_error(self, error: Exception, run_params: dict[str, Any], pipeline: Pipeline, catalog: Any) -> None:
        self._report("failed")

    def table(self) -> list[tuple[str, int, float, float]]:
        """(stage, nodes, total seconds, longest seconds), slowest first."""
        rows = [(stage, len(times), sum(times), max(times)) for stage, times in self._seconds.items()]
        return sorted(rows, key=lambda row: -row[2])

    def _report(self, outcome: str) -> None:
        rows = self.table()
        if not rows:
            return
        elapsed = time.perf_counter() - self._started
        logger.info("run %s after %.1f s; by stage, slowest first:", outcome, elapsed)
        for stage, count, total, longest in rows:
            failed = ", failed" if stage in self._failed else ""
            logger.info("%s: %.1f s (%d x, longest %.1f s%s)", stage, total, count, longest, failed)
        import mlflow

        if mlflow.active_run() is not None:
            mlflow.log_metrics({f"timing.{stage}.seconds": total for stage, _, total, _ in rows})


# Tags that say which process owns a run, so that a later start can tell a dead owner from a
# live one without guessing: the host, the pid, and the process's start time (pids are reused).
OWNER_HOST = "fedtopic.owner.host"
OWNER_PID = "fedtopic.owner.pid"
OWNER_START = "fedtopic.owner.start"
END_REASON = "fedtopic.end_reason"
_END_TIMEOUT_S = 10.0  # a SIGTERM'd run still exits within this even if the store is locked


def process_start(pid: int) -> str | None:
    """``<boot id>:<start ticks>`` of a live process (None when there is no such process or it
    is a zombie): equal only for the same process, as a reused pid starts at another tick."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after "(comm)", which may hold spaces
    if fields[0] in ("Z", "X"):  # exited, not yet reaped: dead for our purpose
        return None
    return f"{boot}:{fields[19]}"  # field 22 of proc(5): starttime, in clock ticks after boot


def _pid_alive(pid: int) -> bool:
    """Liveness where /proc is missing (not Linux): no start time to compare, so a live pid
    counts as the owner (a run is never failed on a guess)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def owner_tags() -> dict[str, str]:
    """The tags that name this process as a run's owner."""
    pid = os.getpid()
    return {OWNER_HOST: socket.gethostname(), OWNER_PID: str(pid), OWNER_START: process_start(pid) or ""}


def owner_is_dead(tags: dict[str, str], hostname: str | None = None) -> str | None:
    """Why a run's owner is known to be dead (None when it is alive, unknown or elsewhere).

    Only runs of this host with a recorded pid are judged: a run of another host, or one
    started before these tags existed, is never touched."""
    if tags.get(OWNER_HOST) != (hostname or socket.gethostname()) or not tags.get(OWNER_PID, "").isdigit():
        return None
    pid, recorded = int(tags[OWNER_PID]), tags.get(OWNER_START, "")
    if Path("/proc/self/stat").exists():
        current = process_start(pid)
        if current is None:
            return f"its process {pid} on {tags[OWNER_HOST]} is no longer running (killed, e.g. SIGKILL, or crashed)"
        if recorded and current != recorded:
            return f"its process {pid} on {tags[OWNER_HOST]} is gone (the pid now belongs to another process)"
        return None
    if _pid_alive(pid):
        return None
    return f"its process {pid} on {tags[OWNER_HOST]} is no longer running (killed, e.g. SIGKILL, or crashed)"


def fail_orphaned_runs(client: Any, skip: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Mark FAILED, with tag ``fedtopic.end_reason``, every RUNNING run whose owner process on
    this host is dead, and its RUNNING nested runs; return their ids."""
    experiments = [e.experiment_id for e in client.search_experiments()]
    if not experiments:
        return []
    host = socket.gethostname()
    running = client.search_runs(
        experiments, filter_string=f"attributes.status = 'RUNNING' and tags.`{OWNER_HOST}` = '{host}'"
    )
    failed: list[str] = []
    for run in running:
        if run.info.run_id in skip:
            continue
        reason = owner_is_dead(run.data.tags, host)
        if reason is None:
            continue
        note = f"left RUNNING: {reason}; marked FAILED by the next kedro run (pid {os.getpid()})"
        for run_id in [*_running_children(client, experiments, run.info.run_id), run.info.run_id]:
            client.set_tag(run_id, END_REASON, note)
            client.set_terminated(run_id, "FAILED")
            failed.append(run_id)
        logger.warning("MLflow run '%s' (%s) %s", run.info.run_name, run.info.run_id, note)
    return failed


def _running_children(client: Any, experiments: list[str], run_id: str) -> list[str]:
    children = client.search_runs(
        experiments, filter_string=f"attributes.status = 'RUNNING' and tags.`mlflow.parentRunId` = '{run_id}'"
    )
    return [child.info.run_id for child in children]


def kill_run(client: Any, run_id: str, reason: str) -> None:
    """End a run and its RUNNING nested runs as KILLED, saying why."""
    run = client.get_run(run_id)
    for child in _running_children(client, [run.info.experiment_id], run_id):
        client.set_tag(child, END_REASON, reason)
        client.set_terminated(child, "KILLED")
    client.set_tag(run_id, END_REASON, reason)
    client.set_terminated(run_id, "KILLED")


class KilledRunsHook:
    """A killed ``kedro run`` must not stay RUNNING in MLflow forever.

    kedro-mlflow ends a run when the pipeline finishes or raises, but SIGTERM (``timeout``,
    CI cancelling a job) and SIGKILL end the process before either. So each run records its
    owner (host, pid, process start time) as tags; on SIGTERM the run and its nested runs are
    ended as KILLED and the process then dies of the signal as it would have (status 143);
    and every start marks FAILED the runs this host's dead processes left RUNNING (SIGKILL,
    power loss), leaving alone those of live processes and of other hosts.
    """

    def __init__(self) -> None:
        self._installed = False
        self._previous: Any = None
        self._run_id: str | None = None
        self._pid = os.getpid()

    @hook_impl(trylast=True)  # after kedro-mlflow's own before_pipeline_run has started the run
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline: Pipeline, catalog: Any) -> None:
        import mlflow
        from mlflow.tracking import MlflowClient

        run = mlflow.active_run()
        if run is None:  # tracking disabled for this pipeline
            return
        mlflow.set_tags(owner_tags())
        self._run_id = run.info.run_id
        fail_orphaned_runs(MlflowClient(), skip={run.info.run_id})
        # only the main thread can set a handler; a SIGTERM someone chose to ignore stays ignored
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) != signal.SIG_IGN:
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
            self._installed, self._pid = True, os.getpid()
            _INSTALLED.append(self)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        from mlflow.tracking import MlflowClient

        if os.getpid() != self._pid:  # a forked worker kept the handler (see _before_fork)
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        run_id = self._run_id
        logger.warning("SIGTERM received: ending MLflow run %s as KILLED", run_id)
        reason = f"SIGTERM received by process {os.getpid()} on {socket.gethostname()}"
        # In a thread with a bound wait: the interrupted frame may hold the sqlite store's lock.
        if run_id is not None:
            worker = threading.Thread(target=kill_run, args=(MlflowClient(), run_id, reason), daemon=True)
            worker.start()
            worker.join(_END_TIMEOUT_S)
        previous = self._restore()
        if callable(previous):  # a handler set before the run decides what SIGTERM does next
            previous(signum, frame)
        else:
            os.kill(os.getpid(), signum)  # the default action now: die of SIGTERM, as without this hook

    def _restore(self) -> Any:
        """Put back the SIGTERM handler this run replaced (the default one when it had none)."""
        previous, installed = self._previous, self._installed
        self._previous, self._installed, self._run_id = None, False, None
        if self in _INSTALLED:
            _INSTALLED.remove(self)
        if installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        return previous

    @hook_impl
    def after_pipeline_run(self, run_params: dict[str, Any], pipeline: Pipeline, catalog: Any) -> None:
        self._restore()

    @hook_impl
    def on_pipeline_error(self, error: Exception, run_params: dict[str, Any], pipeline: Pipeline, catalog: Any) -> None:
        self._restore()


_INSTALLED: list[KilledRunsHook] = []


def _before_fork() -> None:
    """A worker forked during a run (multiprocessing's default on Linux) must start with
    SIGTERM's default action, not this run's handler: ``Pool.terminate`` has to kill it at
    once, even while it is blocked in a lock copied mid-use from another thread, where a
    Python-level handler would never run. So the default is put back for the instant of the
    fork (as without this hook) and the handler reinstalled in the parent."""
    if _INSTALLED:
        with contextlib.suppress(ValueError):  # forking from another thread: cannot change it
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _after_fork_in_parent() -> None:
    if _INSTALLED:
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGTERM, _INSTALLED[-1]._on_sigterm)


def _after_fork_in_child() -> None:
    for hook in _INSTALLED:  # the run is the parent's: nothing here ends it or restores handlers
        hook._installed, hook._previous, hook._run_id = False, None, None
    _INSTALLED.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)
