"""Project hooks: MLflow run names, the git commit of a run, killed runs, one run per folder."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedtopic_pipelines.core.config import ConfigError
from fedtopic_pipelines.core.runlock import ProjectBusyError, RunLock
from fedtopic_pipelines.hooks import (
    END_REASON,
    LOCK_FILE,
    OWNER_HOST,
    OWNER_PID,
    OWNER_START,
    StageTimingsHook,
    StaleReportsHook,
    ValidateParametersHook,
    changed_parameters,
    conf_fingerprints,
    fail_orphaned_runs,
    git_commit,
    owner_is_dead,
    owner_tags,
    process_start,
    run_families,
    run_name,
)
from fedtopic_pipelines.parameters import validate_parameters


def test_run_name_says_pipeline_and_environment() -> None:
    assert run_name(None, "local") == "all@local"
    assert run_name(["__default__"], "s2orc") == "all@s2orc"
    assert run_name(["train"], "s2orc") == "train@s2orc"
    assert run_name(["train", "evaluate"], "smoke") == "train+evaluate@smoke"
    assert run_name(["train"], "smoke", ["prodlda"], "1a2b3c") == "train@smoke prodlda 1a2b3c"
    assert run_name(["compare"], "local", ["prodlda", "nmf"]) == "compare@local 2 families"


def test_the_parameters_changed_from_base_are_every_dotted_path_that_differs() -> None:
    base = {"train": {"max_steps": 10, "model": {"n_topics": 5}}, "corpus": "demo", "gone": [1]}
    run = {"train": {"max_steps": 3, "model": {"n_topics": 5}}, "corpus": "demo", "extra": {"k": 1}}
    assert changed_parameters(run, base) == {"extra.k": 1, "gone": None, "train.max_steps": 3}
    assert changed_parameters(base, base) == {}


def test_run_families_are_those_the_named_pipelines_train() -> None:
    params = {"train": {"model": {"family": "nmf_exact"}}, "compare": {"families": {"prodlda": {}, "combinedtm": {}}}}
    assert run_families(params, ["__default__"]) == ["nmf_exact"]
    assert run_families(params, ["ingest"]) == []
    assert run_families(params, ["compare"]) == ["prodlda", "combinedtm"]


def test_git_commit_and_dirty_flag_outside_and_inside_a_repository(tmp_path: Path) -> None:
    assert git_commit(tmp_path) == {}  # not a repository: nothing, no error

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    git("init", "-q")
    (tmp_path / "a.txt").write_text("one")
    git("add", "a.txt")
    git("commit", "-qm", "first")
    head = git("rev-parse", "HEAD")
    clean = {"mlflow.source.git.commit": head, "git_dirty": "false", "git_untracked_conf": "none"}
    assert git_commit(tmp_path) == clean
    (tmp_path / "a.txt").write_text("two")
    assert git_commit(tmp_path) == {**clean, "git_dirty": "true"}
    # an environment of one's own, not yet in git: tracked files unchanged, the new files named
    (tmp_path / "conf" / "mine").mkdir(parents=True)
    (tmp_path / "conf" / "mine" / "parameters.yml").write_text("train: {max_steps: 3}\n")
    assert git_commit(tmp_path)["git_untracked_conf"] == '["conf/mine/parameters.yml"]'


def test_the_configuration_files_of_base_and_the_environment_are_fingerprinted(tmp_path: Path) -> None:
    for env, text in (("base", "a: 1\n"), ("mine", "a: 2\n"), ("other", "a: 3\n")):
        (tmp_path / "conf" / env).mkdir(parents=True)
        (tmp_path / "conf" / env / "parameters.yml").write_text(text)
    files = conf_fingerprints(tmp_path, ["base", "mine"])
    assert list(files) == ["conf/base/parameters.yml", "conf/mine/parameters.yml"]  # not conf/other
    (tmp_path / "conf" / "mine" / "parameters.yml").write_text("a: 4\n")
    changed = conf_fingerprints(tmp_path, ["base", "mine"])
    assert changed["conf/base/parameters.yml"] == files["conf/base/parameters.yml"]
    assert changed["conf/mine/parameters.yml"] != files["conf/mine/parameters.yml"]


def test_a_robust_rule_the_organisations_cannot_satisfy_stops_the_run_before_any_node() -> None:
    """``before_pipeline_run`` runs before the first node: Krum with f = 10 of 5 organisations
    used to fail at the training node, after ingestion, preprocessing and the consensus."""
    from kedro.pipeline import Pipeline

    hook = ValidateParametersHook()
    hook.config = validate_parameters(
        {
            "organisations": ["a", "b", "c", "d", "e"],
            "train": {},
            "privacy": {"robust_rule": "krum", "krum_byzantine": 10},
        }
    )
    with pytest.raises(ConfigError, match=r"parameter 'privacy.krum_byzantine' is 10, but 'train' aggregates n = 5"):
        hook.before_pipeline_run({"pipeline_names": None}, Pipeline([]), None)
    hook.before_pipeline_run({"pipeline_names": ["ingest"]}, Pipeline([]), None)  # trains nothing: runs


# --- killed runs: a real sqlite store, real processes --------------------------------------


@pytest.fixture
def client(tmp_path: Path):
    from mlflow.tracking import MlflowClient

    store = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")  # never the project's mlflow.db
    store.create_experiment("fedtopic_pipelines")
    return store


def _dead_process() -> tuple[int, str]:
    """The pid and recorded start of a process that ran on this host and has exited."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    start = process_start(child.pid)
    child.kill()
    child.wait()
    assert start is not None and process_start(child.pid) is None
    return child.pid, start


def _run(client, tags: dict[str, str], parent: str | None = None) -> str:
    experiment = client.get_experiment_by_name("fedtopic_pipelines").experiment_id
    if parent is not None:
        tags = {**tags, "mlflow.parentRunId": parent}
    return client.create_run(experiment, tags=tags).info.run_id


def test_runs_of_dead_processes_on_this_host_are_marked_failed_others_left_alone(client) -> None:
    host = socket.gethostname()
    dead_pid, dead_start = _dead_process()
    me = owner_tags()
    assert me == {OWNER_HOST: host, OWNER_PID: str(os.getpid()), OWNER_START: process_start(os.getpid())}
    killed = _run(client, {OWNER_HOST: host, OWNER_PID: str(dead_pid), OWNER_START: dead_start})
    nested = _run(client, {}, parent=killed)  # a nested run (synthetic pipeline) of the killed one
    reused = _run(client, {**me, OWNER_START: dead_start})  # our pid, another start: the pid was reused
    alive = _run(client, me)
    elsewhere = _run(client, {OWNER_HOST: f"not-{host}", OWNER_PID: str(dead_pid), OWNER_START: dead_start})
    untagged = _run(client, {})  # before owner tags existed: cannot tell, never touched
    finished = _run(client, {OWNER_HOST: host, OWNER_PID: str(dead_pid), OWNER_START: dead_start})
    client.set_terminated(finished, "FINISHED")

    assert sorted(fail_orphaned_runs(client)) == sorted([killed, nested, reused])

    def status(run_id: str) -> tuple[str, str | None]:
        run = client.get_run(run_id)
        return run.info.status, run.data.tags.get(END_REASON)

    assert status(killed)[0] == "FAILED" and f"process {dead_pid} on {host} is no longer running" in status(killed)[1]
    assert status(nested) == status(killed)
    assert status(reused)[0] == "FAILED" and "the pid now belongs to another process" in status(reused)[1]
    for run_id in (alive, elsewhere, untagged):
        assert status(run_id) == ("RUNNING", None)
    assert status(finished) == ("FINISHED", None)
    assert fail_orphaned_runs(client) == []  # nothing left to fail


def test_owner_is_dead_judges_only_this_host_and_recorded_pids() -> None:
    host = socket.gethostname()
    dead_pid, dead_start = _dead_process()
    assert owner_is_dead({OWNER_HOST: host, OWNER_PID: str(dead_pid), OWNER_START: dead_start}) is not None
    assert owner_is_dead(owner_tags()) is None
    assert owner_is_dead({OWNER_HOST: "elsewhere", OWNER_PID: str(dead_pid)}) is None
    assert owner_is_dead({OWNER_HOST: host, OWNER_PID: ""}) is None


@pytest.mark.slow
def test_sigterm_mid_run_ends_the_mlflow_run_as_killed_and_the_process_promptly(tmp_path: Path) -> None:
    """`timeout` and CI send SIGTERM: the run is KILLED, not RUNNING forever, and kedro dies of it."""
    from mlflow.tracking import MlflowClient

    from tests.test_end_to_end import BIN, _copy_project, _env

    project = _copy_project(tmp_path)
    process = subprocess.Popen(
        [str(BIN / "kedro"), "run", "--env=smoke"],
        cwd=project,
        env=_env(COLUMNS="300"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = []
    try:
        started = False
        for line in process.stdout:  # until the MLflow run has started and a node runs: every
            output.append(line)  # before_pipeline_run hook (the SIGTERM handler's) has then run
            started = started or "MLflow run 'all@smoke " in line
            if started and "Running node" in line:
                break
        time.sleep(1)
        assert process.poll() is None, "".join(output)[-3000:]
        with pytest.raises(ProjectBusyError, match=rf"'kedro run, pipeline all@smoke' \(pid {process.pid} on "):
            RunLock(project / LOCK_FILE).acquire("a second run")  # the running pipeline holds the folder
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=60)
        waited = time.monotonic() - signalled
    finally:
        process.kill()
    log = "".join(output) + rest
    assert process.returncode == -signal.SIGTERM, log[-3000:]  # dies of the signal: 143 in a shell
    assert waited < 15, waited
    assert "SIGTERM received: ending MLflow run" in log
    assert not (project / "data/08_reporting/metrics.json").exists()  # it was stopped mid-run
    client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("fedtopic_pipelines").experiment_id])
    assert run.info.status == "KILLED" and run.info.end_time is not None
    assert run.data.tags[END_REASON] == f"SIGTERM received by process {process.pid} on {socket.gethostname()}"
    assert run.data.tags[OWNER_PID] == str(process.pid)
    lock = RunLock(project / LOCK_FILE)
    lock.acquire("the next run")  # the killed run did not leave the folder locked
    lock.release()


@pytest.mark.slow
def test_a_second_kedro_run_in_the_same_folder_is_refused_before_it_starts_anything(tmp_path: Path) -> None:
    """Issue 14 part 7: two runs in one folder mixed their outputs; the second is now refused,
    naming the first, and leaves no MLflow run behind."""
    from tests.test_end_to_end import BIN, _copy_project, _env

    project = _copy_project(tmp_path)
    first = RunLock(project / LOCK_FILE)
    first.acquire("kedro run, pipeline train@local")  # what a running `kedro run` holds
    try:
        result = subprocess.run(
            [str(BIN / "kedro"), "run", "--env=smoke", "--pipelines=ingest_demo"],
            cwd=project,
            env=_env(COLUMNS="300"),
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        first.release()
    log = result.stdout + result.stderr
    assert result.returncode == 2, log[-3000:]
    assert f"another run holds this project folder: 'kedro run, pipeline train@local' (pid {os.getpid()}" in log
    assert "kedro run refused (ProjectBusyError): " in log and "Traceback" not in log  # a message, no traceback
    assert not (project / "data/08_reporting/ingestion_demo.json").exists()
    assert "MLflow run 'ingest_demo@smoke'" not in log  # refused before kedro-mlflow started a run
    if (project / "mlflow.db").exists():
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=f"sqlite:///{project / 'mlflow.db'}")
        experiments = [e.experiment_id for e in client.search_experiments()]
        assert not experiments or not client.search_runs(experiments)


def _sleep() -> None:
    time.sleep(60)


def test_hook_tags_the_owner_fails_orphans_and_a_forked_worker_sigterm_leaves_the_run_alone(client) -> None:
    """The hook in this process: a worker forked during the run (multiprocessing) inherits the
    SIGTERM handler, and ``Pool.terminate`` sends it SIGTERM; that must not end the run."""
    import multiprocessing

    import mlflow

    from fedtopic_pipelines.hooks import KilledRunsHook

    dead_pid, dead_start = _dead_process()
    orphan = _run(client, {OWNER_HOST: socket.gethostname(), OWNER_PID: str(dead_pid), OWNER_START: dead_start})
    hook, before = KilledRunsHook(), signal.getsignal(signal.SIGTERM)
    mlflow.set_tracking_uri(client.tracking_uri)
    try:
        with mlflow.start_run(experiment_id=client.get_experiment_by_name("fedtopic_pipelines").experiment_id) as run:
            hook.before_pipeline_run({}, None, None)
            assert signal.getsignal(signal.SIGTERM) == hook._on_sigterm
            worker = multiprocessing.get_context("fork").Process(target=_sleep)
            worker.start()
            worker.terminate()  # SIGTERM
            worker.join(30)
            assert worker.exitcode == -signal.SIGTERM
            assert client.get_run(run.info.run_id).info.status == "RUNNING"
            hook.after_pipeline_run({}, None, None)
        assert signal.getsignal(signal.SIGTERM) == before  # put back
    finally:
        hook._restore()
        mlflow.set_tracking_uri("")
    assert client.get_run(run.info.run_id).data.tags[OWNER_PID] == str(os.getpid())
    assert client.get_run(orphan).info.status == "FAILED"


def test_kill_run_ends_the_run_and_its_running_nested_runs_as_killed(client) -> None:
    from fedtopic_pipelines.hooks import kill_run

    parent = _run(client, owner_tags())
    nested = _run(client, {}, parent=parent)
    done = _run(client, {}, parent=parent)
    client.set_terminated(done, "FINISHED")
    kill_run(client, parent, "SIGTERM received by process 1 on h")
    for run_id, status in ((parent, "KILLED"), (nested, "KILLED"), (done, "FINISHED")):
        assert client.get_run(run_id).info.status == status
    assert client.get_run(nested).data.tags[END_REASON] == "SIGTERM received by process 1 on h"


def test_a_run_ends_with_its_seconds_by_stage_slowest_first_failed_stages_named(caplog) -> None:
    from types import SimpleNamespace

    hook = StageTimingsHook()
    hook.before_pipeline_run({}, None, None)
    clocks = iter([0.0, 1.0, 1.0, 4.0, 4.0, 4.5, 5.0, 5.25])  # each node's start and end
    for name in ("clients.a.clean_documents", "clients.b.clean_documents", "merge_vocabulary"):
        node = SimpleNamespace(name=name)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(time, "perf_counter", lambda: next(clocks))
            hook.before_node_run(node)
            hook.after_node_run(node)
    broken = SimpleNamespace(name="compare.clients.a.evaluate_organisation")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "perf_counter", lambda: next(clocks))
        hook.before_node_run(broken)
        hook.on_node_error(RuntimeError("x"), broken)
    assert hook.table() == [
        ("clean_documents", 2, 4.0, 3.0),
        ("merge_vocabulary", 1, 0.5, 0.5),
        ("evaluate_organisation", 1, 0.25, 0.25),
    ]
    with caplog.at_level("INFO", logger="fedtopic_pipelines.hooks"):
        hook.on_pipeline_error(RuntimeError("x"), {}, None, None)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("run failed after ") and lines[1] == "clean_documents: 4.0 s (2 x, longest 3.0 s)"
    assert lines[3] == "evaluate_organisation: 0.2 s (1 x, longest 0.2 s, failed)"


def test_a_run_removes_the_reports_it_rewrites_before_its_first_node(tmp_path: Path, caplog) -> None:
    """So that a run failing midway leaves its reports missing, not an earlier run's looking
    current. Left alone: an input, a model file, a partitioned report (a sweep may write only
    some partitions, unless each save empties its folder), a report of another pipeline."""
    from kedro.io import DataCatalog
    from kedro.pipeline import node, pipeline

    reports = tmp_path / "data/08_reporting"
    entries = {
        "metrics": {"type": "json.JSONDataset", "filepath": str(reports / "metrics.json")},
        "figure": {"type": "text.TextDataset", "filepath": str(reports / "sub/figure.txt")},
        "model": {"type": "json.JSONDataset", "filepath": str(tmp_path / "data/06_models/model.json")},
        "rows": {"type": "partitions.PartitionedDataset", "path": str(reports / "rows"), "dataset": "json.JSONDataset"},
        "headline": {
            "type": "partitions.PartitionedDataset",
            "path": str(reports / "headline"),
            "dataset": "json.JSONDataset",
            "overwrite": True,
        },
        "other": {"type": "json.JSONDataset", "filepath": str(reports / "other.json")},
        "source": {"type": "json.JSONDataset", "filepath": str(reports / "source.json")},
    }
    for entry in entries.values():
        path = Path(entry.get("filepath") or entry["path"] + "/a.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    catalog = DataCatalog.from_config(entries)
    run = pipeline(
        [
            node(
                lambda s: ({}, "", {}, {"a": {}}, {"a": {}}),
                "source",
                ["metrics", "figure", "model", "rows", "headline"],
                name="n",
            ),
            node(lambda m: m, "metrics", "in_memory", name="m"),
        ]
    )
    with caplog.at_level("INFO", logger="fedtopic_pipelines.hooks"):
        StaleReportsHook().before_pipeline_run({}, run, catalog)
    assert not (reports / "metrics.json").exists() and not (reports / "sub/figure.txt").exists()
    assert not (reports / "headline/a.json").exists()  # its save empties the folder first anyway
    assert (tmp_path / "data/06_models/model.json").exists()
    assert (
        (reports / "rows/a.json").exists() and (reports / "other.json").exists() and (reports / "source.json").exists()
    )
    assert "3 reports of an earlier run removed" in caplog.text
