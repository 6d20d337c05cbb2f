"""A federation whose processes stand where separate hosts would: the SuperLink listens on
127.0.0.2, each organisation's SuperNode on an address of its own (127.0.1.x), each process
runs in its own working directory and Flower home, each organisation's data lies in its own
folder, and what they share is what an operator hands out (the CA certificate, each node's key,
the organisations' vocabulary key). The SuperLink and every process it starts (SuperExec,
ServerApp) run under ``strace``, which records every file they open: none is under an
organisation's data folder."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from fedtopic_pipelines.flower.deployment import (
    DeploymentError,
    LocalFederation,
    certificate_names,
    make_certificates,
)
from fedtopic_pipelines.flower.federation import load_result
from tests.flower.conftest import make_shared_raw_tables
from tests.flower.test_federation import TRAIN, in_process, job, write_sites

pytestmark = pytest.mark.deployment
SUPERLINK_HOST = "127.0.0.2"
ROUNDS = 2
OPENED = re.compile(r'open(?:at|at2)?\((?:AT_FDCWD, )?"([^"]+)"')


def strace_or_skip() -> list[str]:
    """Every open of the SuperLink's process tree, into its log (only the open calls stop it)."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed (apt install strace): it is what sees every file a process opens")
    return [strace, "-f", "--seccomp-bpf", "-e", "trace=open,openat,openat2", "-qq", "-o"]


def opened_files(log: Path) -> list[Path]:
    return [Path(m.group(1)) for m in map(OPENED.search, log.read_text().splitlines()) if m]


@pytest.mark.slow  # over 30 s on two cores: a real SuperLink, three SuperNodes and executors, two rounds
def test_a_run_across_distinct_addresses_equals_in_process_and_the_superlink_never_opens_organisation_data(
    tmp_path,
) -> None:
    paths = write_sites(make_shared_raw_tables(), tmp_path / "sites")  # each organisation's own folder
    trace = tmp_path / "superlink.strace"
    node_hosts = {org: f"127.0.1.{i + 1}" for i, org in enumerate(paths)}
    fed = LocalFederation(
        tmp_path / "fed",
        paths,
        host=SUPERLINK_HOST,
        node_hosts=node_hosts,
        superlink_wrapper=[*strace_or_skip(), str(trace)],
    )
    train = {**TRAIN, "max_steps": ROUNDS}
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(job(list(paths), train).to_dict()))
    with fed:
        assert fed.address.startswith(f"{SUPERLINK_HOST}:")
        assert SUPERLINK_HOST in certificate_names(fed.root / "certs" / "server.crt")
        for org, host in node_hosts.items():  # each node listens on its own address, its executor dials it
            supernode = fed.supernode_args(org, paths[org], None)
            assert supernode[supernode.index("--superlink") + 1] == fed.address
            assert supernode[supernode.index("--host") + 1] == host
            assert f"{host}:" in " ".join(fed.executor_args(org, 0))
        # each host's processes (the SuperLink; an organisation's SuperNode and its executor) work in their own folder
        hosts = {name.split("-", 1)[-1]: Path(f"/proc/{p.pid}/cwd").resolve() for name, p in fed.processes.items()}
        assert sorted(hosts) == sorted([*paths, "superlink"]) and len(set(hosts.values())) == len(hosts)
        assert all(Path(f"/proc/{p.pid}/cwd").resolve() == hosts[n.split("-", 1)[-1]] for n, p in fed.processes.items())
        fed.submit({"job-file": str(job_file), "output-dir": str(tmp_path / "out")}, timeout=300)
    _, model, run = load_result(tmp_path / "out")
    _, expected = in_process(paths, train)
    worst = max(float((model.state[k] - expected[k]).abs().max()) for k in expected)
    assert worst <= 1e-5, f"max abs parameter difference {worst}"
    assert sorted(run["nodes"]) == sorted(paths) and len(model.history) == ROUNDS

    opened = opened_files(trace)
    # the trace saw the SuperLink's own files and the ServerApp's (the job file): it is not empty by accident
    assert fed.root / "certs" / "server.crt" in opened and job_file in opened
    data = [Path(p).resolve() for p in paths.values()]
    read = [p for p in opened if any(p.resolve().is_relative_to(folder) for folder in data)]
    assert not read, f"the SuperLink's processes opened organisation data: {read[:5]}"


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
