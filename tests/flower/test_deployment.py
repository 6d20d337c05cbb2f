"""The real deployment on loopback: flower-superlink and one flower-supernode per organisation,
with TLS and node authentication, started and stopped by ``LocalFederation``.

The processes stand where separate hosts would: the SuperLink listens on 127.0.0.2, each
organisation's SuperNode on an address of its own (127.0.1.x), each host's processes run in
their own working directory and Flower home, each organisation's data lies in its own folder,
and what they share is what an operator hands out (the CA certificate, each node's key, the
organisations' vocabulary key). The SuperLink and every process it starts (SuperExec,
ServerApps) run under ``strace``, which records every file they open over all of this
module's runs: none is under an organisation's data folder."""

from __future__ import annotations

import json
import re
import shutil
import signal
import stat
import threading
import time
from pathlib import Path

import psutil
import pytest

from fedtopic_pipelines.core import persist
from fedtopic_pipelines.core.federated.checkpoint import KIND
from fedtopic_pipelines.core.vocab.privacy import KEY_ENV
from fedtopic_pipelines.flower.cli import run_report, supernodes
from fedtopic_pipelines.flower.deployment import (
    DeploymentError,
    LocalFederation,
    certificate_names,
    make_certificates,
    make_key_pair,
    make_vocabulary_key,
)
from fedtopic_pipelines.flower.federation import load_result
from fedtopic_pipelines.pipelines.train.nodes import training_histories
from tests.flower.conftest import make_shared_raw_tables
from tests.flower.test_federation import TRAIN, in_process, job, write_sites

pytestmark = pytest.mark.deployment
ROUNDS = 3
OPERATOR_KEY = "a key in the operator's shell, which no federation process may inherit"
SUPERLINK_HOST = "127.0.0.2"
OPENED = re.compile(r'open(?:at|at2)?\((?:AT_FDCWD, )?"([^"]+)"')


def submit_in_background(fed: LocalFederation, job_file: Path, out: Path) -> tuple[threading.Thread, dict]:
    """``flwr run`` in a thread, so the test can act on the run; ``done`` gets 'run' or 'error'."""
    done: dict[str, object] = {}

    def submit() -> None:
        try:
            done["run"] = fed.submit({"job-file": str(job_file), "output-dir": str(out)}, timeout=240)
        except DeploymentError as exc:
            done["error"] = exc

    fed.log("flwr-run").write_text("")  # a previous run's log must not be mistaken for this one's
    thread = threading.Thread(target=submit)
    thread.start()
    return thread, done


def left_out_for_silence(reason: str) -> bool:
    return reason.startswith("no reply within 6 s") or (reason.startswith("error reply") and "navailable" in reason)


def strace_prefix(log: Path) -> list[str]:
    """Every open of a process tree into ``log`` (only the open calls stop it); none without strace."""
    strace = shutil.which("strace")
    return (
        []
        if strace is None
        else [strace, "-f", "--seccomp-bpf", "-e", "trace=open,openat,openat2", "-qq", "-o", str(log)]
    )


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    root = tmp_path_factory.mktemp("federation")
    paths = write_sites(make_shared_raw_tables(), root)  # each organisation's data in its own folder
    node_hosts = {org: f"127.0.1.{i + 1}" for i, org in enumerate(paths)}
    trace = strace_prefix(root / "superlink.strace")
    fed = LocalFederation(root / "fed", paths, host=SUPERLINK_HOST, node_hosts=node_hosts, superlink_wrapper=trace)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY_ENV, OPERATOR_KEY)  # the deployment's own key goes to the nodes, and only to them
        fed.start()
    try:  # stops every process even when a test fails
        yield fed, paths, root
    finally:
        fed.stop()
    assert not fed.processes


def _environ(pid: int) -> dict[str, str]:
    return psutil.Process(pid).environ()


def test_the_vocabulary_key_is_made_once_and_readable_by_its_owner_only(tmp_path) -> None:
    key = make_vocabulary_key(tmp_path / "keys")
    path = tmp_path / "keys" / "vocabulary.key"
    assert len(bytes.fromhex(key)) == 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert make_vocabulary_key(tmp_path / "keys") == key  # handed out once: a second `up` keeps it


def test_every_node_holds_the_deployment_vocabulary_key_and_the_superlink_none(federation) -> None:
    """``FEDTOPIC_VOCAB_KEY`` is in each SuperNode's and executor's environment, the deployment's
    key and not the operator's, and in no process of the server side (the SuperLink and the
    SuperExec it starts, which starts the ServerApps)."""
    fed, paths, _ = federation
    key = fed.vocabulary_key_file.read_text().strip()
    assert key != OPERATOR_KEY and stat.S_IMODE(fed.vocabulary_key_file.stat().st_mode) == 0o600
    for org in paths:
        assert _environ(fed.processes[f"supernode-{org}"].pid)[KEY_ENV] == key
        assert _environ(fed.processes[f"executor-{org}"].pid)[KEY_ENV] == key
    superlink = psutil.Process(fed.processes["superlink"].pid)
    server_side = [superlink, *superlink.children(recursive=True)]
    assert all(KEY_ENV not in p.environ() for p in server_side), [p.cmdline()[:2] for p in server_side]


def test_each_host_has_its_own_address_and_working_folder(federation) -> None:
    fed, paths, _ = federation
    assert fed.address.startswith(f"{SUPERLINK_HOST}:")
    assert SUPERLINK_HOST in certificate_names(fed.root / "certs" / "server.crt")
    for org in paths:  # each node listens on its own address, its executor dials it there
        supernode = fed.supernode_args(org, paths[org], None)
        assert supernode[supernode.index("--superlink") + 1] == fed.address
        assert supernode[supernode.index("--host") + 1] == fed.node_host(org) != "127.0.0.1"
        assert fed.executor_args(org, 0)[-3].startswith(f"{fed.node_host(org)}:")
    # each host's processes (the SuperLink; an organisation's SuperNode and its executor) work in a folder of their own
    hosts = {name.split("-", 1)[-1]: Path(f"/proc/{p.pid}/cwd").resolve() for name, p in fed.processes.items()}
    assert sorted(hosts) == sorted([*paths, "superlink"]) and len(set(hosts.values())) == len(hosts)
    assert all(Path(f"/proc/{p.pid}/cwd").resolve() == hosts[n.split("-", 1)[-1]] for n, p in fed.processes.items())


def test_a_certificate_that_does_not_hold_the_dialled_address_is_refused_with_the_reason(tmp_path) -> None:
    """Refused before any process starts, with the certificate, its names and the address; and the
    real SuperNode, dialling the address through TLS, is refused too."""
    paths = write_sites(make_shared_raw_tables(), tmp_path / "sites")
    org = next(iter(paths))
    fed = LocalFederation(tmp_path / "fed", {org: paths[org]}, host=SUPERLINK_HOST, auth=False)
    make_certificates(fed.root / "certs")  # an operator's certificate for 127.0.0.1 and localhost only
    with pytest.raises(DeploymentError, match=r"valid for \['127\.0\.0\.1', 'localhost'\], not for 127\.0\.0\.2"):
        fed.start()
    assert not fed.processes  # nothing was started
    try:
        fed.start_superlink()  # past the check: what Flower itself does with such a certificate
        args = fed.supernode_args(org, paths[org], None)
        node = fed._spawn(f"supernode-{org}", [*args, "--max-retries", "1", "--max-wait-time", "15"], fed.root / org)
        assert node.wait(timeout=90) != 0
        log = fed.log(f"supernode-{org}").read_text()
        assert "IP address mismatch, certificate is not valid for '127.0.0.2'" in log, log[-2000:]
    finally:
        fed.stop()


@pytest.mark.slow  # over 30 s on two cores
@pytest.mark.parametrize(
    ("model", "rounds", "messages"),
    [
        ({}, ROUNDS, 1),
        # pooled BatchNorm: each round's four exchanges and its gradient cross the real SuperNodes
        ({"normalization": "pooled_batch"}, 1, 5),
    ],
    ids=["default", "pooled_batch"],
)
def test_loopback_run_with_tls_and_auth_equals_the_in_process_engine(federation, model, rounds, messages) -> None:
    fed, paths, root = federation
    train = {**TRAIN, "max_steps": rounds, "model": {**TRAIN["model"], **model}}
    job_file = root / f"job-{messages}.json"
    job_file.write_text(json.dumps(job(list(paths), train).to_dict()))
    fed.submit({"job-file": str(job_file), "output-dir": str(root / f"out-{messages}")}, timeout=300)
    _, model_, run = load_result(root / f"out-{messages}")
    _, expected = in_process(paths, train)
    worst = max(float((model_.state[k] - expected[k]).abs().max()) for k in expected)
    assert worst <= 1e-5, f"max abs parameter difference {worst}"
    assert [r.exchanges for r in model_.history] == [messages] * rounds
    assert sorted(run["nodes"]) == sorted(paths) and len(run["latencies_s"]) == rounds * messages  # per message


@pytest.mark.slow  # over 30 s on two cores
def test_loopback_secure_rounds_with_real_flower_processes(federation) -> None:
    """``privacy.secure_aggregation`` on the real processes: SecAgg+'s four stages per round, 12
    messages for 3 nodes, and the model the plain in-process run trains, within the quantisation bound."""
    from tests.flower.test_secagg import assert_within_quantisation_bound, secure_train

    fed, paths, root = federation
    rounds, lr = 1, 0.1  # a secure round is four exchanges, each a push and a pull through the SuperLink
    train = {**TRAIN, "max_steps": rounds, "optimizer": {"name": "sgd", "lr": lr}}
    job_file = root / "secure-job.json"
    job_file.write_text(json.dumps(job(list(paths), secure_train(train)).to_dict()))
    fed.submit({"job-file": str(job_file), "output-dir": str(root / "secure-out")}, timeout=240)
    _, model, run = load_result(root / "secure-out")
    _, expected = in_process(paths, train)
    assert run["secure_aggregation"] and [m["sent"] for m in run["messages"]] == [12] * rounds
    assert [m["received"] for m in run["messages"]] == [12] * rounds
    assert_within_quantisation_bound(model.state, expected, rounds, lr)


def test_a_supernode_with_an_unregistered_key_is_refused(federation) -> None:
    fed, paths, _ = federation
    key, _ = make_key_pair(fed.root / "stranger-keys", "stranger")
    args = fed.supernode_args("stranger", next(iter(paths.values())), key)
    process = fed._spawn(
        "supernode-stranger", [*args, "--max-retries", "2", "--max-wait-time", "20"], fed.root / "home" / "stranger"
    )
    assert process.wait(timeout=60) != 0
    assert "305" in fed.log("supernode-stranger").read_text()


def test_a_plaintext_supernode_cannot_connect_to_the_tls_superlink(federation) -> None:
    fed, paths, _ = federation
    fed.tls = False  # build plaintext flags for this one node only
    try:
        args = fed.supernode_args("plain", next(iter(paths.values())), None)
    finally:
        fed.tls = True
    process = fed._spawn(
        "supernode-plain", [*args, "--max-retries", "2", "--max-wait-time", "20"], fed.root / "home" / "plain"
    )
    assert process.wait(timeout=60) != 0


@pytest.mark.slow  # over 30 s on two cores
def test_a_killed_serverapp_resumes_from_its_checkpoint_without_losing_or_repeating_rounds(federation) -> None:
    fed, paths, root = federation
    rounds = 4  # killed at the first checkpoint (round 2): half the rounds run again
    train = {**TRAIN, "max_steps": rounds}
    train = {**train, "checkpoint_every": 2, "checkpoint_dir": str(root / "ckpt")}
    spec = job(list(paths), train).to_dict()
    job_file = root / "job-resume.json"
    job_file.write_text(json.dumps(spec))
    thread, done = submit_in_background(fed, job_file, root / "out-first")
    deadline = time.monotonic() + 180
    while not list((root / "ckpt").glob("*.safetensors")) and time.monotonic() < deadline:
        time.sleep(0.05)
    serverapps = fed.serverapps()
    assert len(serverapps) == 1, "one run, one ServerApp"
    assert KEY_ENV not in serverapps[0].environ()  # the server never holds the organisations' key
    serverapps[0].send_signal(signal.SIGKILL)  # no chance to save anything more
    run_id = fed.started_run()
    assert run_id is not None
    fed.stop_run(run_id)  # what an operator does; else the SuperLink fails the run after its heartbeat timeout
    thread.join(timeout=120)
    assert "error" in done, "the killed run must not report success"
    assert not (root / "out-first" / "model.safetensors").exists()
    (checkpoint,) = (root / "ckpt").glob("*.safetensors")
    resumed_at = persist.load(checkpoint, KIND)["next_round"]
    assert 0 < resumed_at < rounds

    fed.submit({"job-file": str(job_file), "output-dir": str(root / "out-resumed")}, timeout=240)  # the same job again
    _, model, run = load_result(root / "out-resumed")
    assert [r.round for r in model.history] == list(range(rounds))  # none lost, none repeated
    latencies = run["latencies_s"]
    assert len(latencies) == rounds - resumed_at  # only the rounds after the checkpoint ran again
    _, expected = in_process(paths, train)
    worst = max(float((model.state[k] - expected[k]).abs().max()) for k in expected)
    assert worst <= 1e-5, f"max abs parameter difference {worst} from the uninterrupted in-process run"


def test_the_superlink_and_its_serverapps_never_opened_organisation_data(federation) -> None:
    """Over every run of this module so far (FedSGD, pooled BatchNorm, SecAgg+, a killed and resumed
    ServerApp): the trace holds the SuperLink's certificate and each run's job file (the ServerApp
    reads it), so it saw them; and no path under any organisation's data folder."""
    fed, paths, root = federation
    trace = root / "superlink.strace"
    if not fed.superlink_wrapper:
        pytest.skip("strace is not installed (apt install strace): it is what sees every file a process opens")
    opened = [Path(m.group(1)) for m in map(OPENED.search, trace.read_text().splitlines()) if m]
    jobs = sorted(root.glob("*job*.json"))  # the runs of this module so far (the fast lane runs none)
    assert fed.root / "certs" / "server.crt" in opened and all(job in opened for job in jobs), jobs
    data = [Path(p).resolve() for p in paths.values()]
    read = [p for p in opened if any(p.resolve().is_relative_to(folder) for folder in data)]
    assert not read, f"the SuperLink's processes opened organisation data: {read[:5]}"


@pytest.mark.slow  # over 30 s on two cores
def test_a_supernode_killed_mid_run_is_left_out_and_training_goes_on(federation) -> None:
    """Runs last in this module: it kills one SuperNode and its executor (SIGKILL, no goodbye to the SuperLink)."""
    fed, paths, root = federation
    rounds = 4
    train = {**TRAIN, "max_steps": rounds}
    spec = job(list(paths), {**train, "flower": {"round_timeout_s": 6}}).to_dict()
    job_file = root / "job-kill.json"
    job_file.write_text(json.dumps(spec))
    thread, done = submit_in_background(fed, job_file, root / "out-kill")
    log = fed.log("flwr-run")
    deadline = time.monotonic() + 180
    while "train federated" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.2)  # training has started: rounds are under way
    fed.kill("supernode-gamma")
    assert fed.processes["executor-gamma"].poll() is not None  # a dead organisation: its executor went too
    thread.join(timeout=240)
    assert "error" not in done, done.get("error")
    _, model, run = load_result(root / "out-kill")
    assert len(model.history) == rounds  # no round lost: the others went on
    failed = [r for r in model.history if "gamma" in r.failed]
    # Left out by our round timeout, by Flower's heartbeat check (the SuperLink answers for a
    # node it has declared dead), or because the reply's arrays never finished uploading.
    assert failed and all(left_out_for_silence(r.failed["gamma"]) for r in failed), [r.failed for r in failed]
    latencies = run["latencies_s"]
    assert max(latencies) < 6 + 4, latencies  # the timeout bounds every round, half-uploaded replies included
    # what the Kedro train node logs to MLflow (train.federated.failed_updates) and to its JSON history
    history, mlflow = training_histories({"federated": model}, {}, list(paths), every=10)
    assert mlflow["federated.failed_updates"] == [{"value": 1, "step": r.round} for r in failed]
    gone = [r.round for r in failed]
    (entry,) = history["federated"]["participation"]["left_out"]["gamma"]  # one reason, every round it names
    assert entry["why"] == "failed" and entry["rounds"] == gone and left_out_for_silence(entry["reason"])
    assert mlflow["federated.participation.gamma.left_out"][-1] == {"value": len(gone), "step": rounds - 1}
    assert failed[-1] is model.history[-1]  # once gone, gone for the rest of the run
    assert all(set(r.client_loss) == {"alpha", "beta"} for r in failed)  # eq. 2 over the remaining two
    # what `make federation-demo` writes to federation_demo.json: nodes started, then who took part when
    report = json.loads(json.dumps(run_report(run, model, list(paths), supernodes(fed))))
    assert report["nodes_started"] == 3 and report["supernodes"]["running"] == ["alpha", "beta"]
    assert report["participation"]["took_part"] == {"alpha": rounds, "beta": rounds, "gamma": rounds - len(gone)}
    assert [r["round"] for r in report["participation_by_round"] if "gamma" in r["left_out"]] == gone
    assert all(r["took_part"] == ["alpha", "beta"] for r in report["participation_by_round"] if r["round"] in gone)
