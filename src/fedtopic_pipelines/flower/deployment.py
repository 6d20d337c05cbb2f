"""A real Flower federation on one machine: one SuperLink, one SuperNode per organisation.

Used by ``make federation-up`` / ``federation-down`` / ``federation-demo`` and by the
loopback tests. Every process is Flower's own (``flower-superlink``, ``flower-supernode``,
``flwr run``); this module only starts them with the right flags and stops them:

* **TLS**: a private CA and a SuperLink certificate for 127.0.0.1/localhost, made with
  ``openssl`` in the (git-ignored) federation folder; SuperNodes and the ``flwr`` CLI
  trust only that CA.
* **Node authentication**: one ECDSA P-384 key pair per organisation (``ssh-keygen``);
  each public key is registered on the SuperLink (``flwr supernode register``) before its
  SuperNode starts, and the SuperLink refuses any other key.
* **The organisations' vocabulary key**: one random secret per deployment (``keys/vocabulary.key``,
  mode 0600), handed to every SuperNode and its executor as ``FEDTOPIC_VOCAB_KEY`` for the
  keyed vocabulary exchange (``privacy.vocab_k`` > 1); the SuperLink, the ServerApps it
  starts and the ``flwr`` CLI run without it, even when the operator's shell has one.

* **ClientApps** (``warm=True``, the default): each SuperNode runs with
  ``--isolation process`` next to one executor process (``flower/executor.py``) that
  claims its ClientApp tasks on the SuperNode's Runtime API and keeps the app loaded
  between messages. ``warm=False`` is Flower's default: the SuperNode starts a SuperExec,
  which starts a fresh ClientApp process for every message.

Each process runs in its own session, so stopping kills its children too (SuperExec and
ClientApp processes); ``stop`` runs on exit even when a run fails.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from cryptography import x509

from fedtopic_pipelines.core.vocab.privacy import KEY_ENV, MIN_KEY_BYTES

logger = logging.getLogger(__name__)

APP_DIR = Path(__file__).resolve().parents[3] / "deploy" / "flower_app"
CONNECTION = "fedtopic"
VOCABULARY_KEY_FILE = "vocabulary.key"


class DeploymentError(RuntimeError):
    """A federation process did not start or a run failed; the message names which and where its log is."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _bin(name: str) -> str:
    path = Path(sys.executable).with_name(name)
    return str(path) if path.exists() else name


def _run(args: Sequence[str], env: Mapping[str, str] | None = None, timeout: float = 60) -> str:
    done = subprocess.run(list(args), capture_output=True, text=True, env=env, timeout=timeout, check=False)
    if done.returncode != 0:
        raise DeploymentError(f"{' '.join(args[:3])} failed ({done.returncode}): {done.stderr.strip() or done.stdout}")
    return done.stdout


def exit_on_sigterm() -> None:
    """For a program that owns a federation: SIGTERM raises ``SystemExit``, so its ``with`` and
    ``finally`` blocks stop the federation's processes (they run in sessions of their own and
    would otherwise outlive it)."""
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


def _make_ca(openssl: str, paths: Mapping[str, Path]) -> None:
    """The federation's own CA (key and self-signed certificate): it signs the SuperLink's certificate."""
    _run([openssl, "genrsa", "-out", str(paths["ca.key"]), "4096"])
    _run(
        [
            openssl,
            "req",
            "-x509",
            "-new",
            "-nodes",
            "-key",
            str(paths["ca.key"]),
            "-sha256",
            "-days",
            "365",
            "-subj",
            "/CN=fedtopic federation CA",
            "-out",
            str(paths["ca.crt"]),
        ]
    )


def _make_server_certificate(openssl: str, paths: Mapping[str, Path], ext: Path) -> None:
    """The SuperLink's key and certificate, signed by the CA, valid for the names in ``ext``."""
    _run([openssl, "genrsa", "-out", str(paths["server.key"]), "4096"])
    _run(
        [
            openssl,
            "req",
            "-new",
            "-key",
            str(paths["server.key"]),
            "-subj",
            "/CN=127.0.0.1",
            "-out",
            str(paths["server.csr"]),
        ]
    )
    _run(
        [
            openssl,
            "x509",
            "-req",
            "-in",
            str(paths["server.csr"]),
            "-CA",
            str(paths["ca.crt"]),
            "-CAkey",
            str(paths["ca.key"]),
            "-CAcreateserial",
            "-out",
            str(paths["server.crt"]),
            "-days",
            "365",
            "-sha256",
            "-extfile",
            str(ext),
        ]
    )


def make_certificates(folder: Path, host: str = "127.0.0.1") -> dict[str, Path]:
    """CA and SuperLink certificate (SAN ``host``, 127.0.0.1 and localhost), unless already there."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {n: folder / f"{n}" for n in ("ca.key", "ca.crt", "server.key", "server.csr", "server.crt")}
    if paths["server.crt"].is_file() and paths["ca.crt"].is_file():
        return paths
    ext = folder / "server.ext"
    names = ",".join(f"IP:{ip}" for ip in dict.fromkeys((host, "127.0.0.1"))) + ",DNS:localhost"
    ext.write_text(f"subjectAltName={names}\nkeyUsage=digitalSignature,keyEncipherment\n")
    openssl = shutil.which("openssl") or "openssl"
    _make_ca(openssl, paths)
    _make_server_certificate(openssl, paths, ext)
    return paths


def certificate_names(certificate: Path) -> list[str]:
    """The IP addresses and DNS names a certificate is valid for (its subjectAltName)."""
    loaded = x509.load_pem_x509_certificate(certificate.read_bytes())
    try:
        names = loaded.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(n) for n in names.get_values_for_type(x509.IPAddress)] + names.get_values_for_type(x509.DNSName)


def check_certificate(certificate: Path, host: str) -> None:
    """Refuse, before any process starts, a SuperLink certificate that does not hold the address the
    SuperNodes dial: TLS would refuse every connection, and each SuperNode would find out alone, after
    its retries (Flower's exit code 305, "IP address mismatch" in its log)."""
    names = certificate_names(certificate)
    if host not in names:
        raise DeploymentError(
            f"the SuperLink's certificate {certificate} is valid for {names}, not for {host}, the address the "
            f"SuperNodes dial: TLS refuses it (hostname mismatch). Issue one whose subjectAltName holds {host} "
            f"(remove {certificate.parent} and start again to have one made)"
        )


def make_key_pair(folder: Path, name: str) -> tuple[Path, Path]:
    """An ECDSA P-384 key pair in OpenSSH format (what Flower's node authentication reads)."""
    folder.mkdir(parents=True, exist_ok=True)
    private = folder / name
    if not private.is_file():
        _run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "384", "-N", "", "-C", name, "-f", str(private)])
    return private, private.with_suffix(".pub")


def make_vocabulary_key(folder: Path) -> str:
    """The organisations' shared vocabulary key (``FEDTOPIC_VOCAB_KEY``), unless already there:
    ``secrets.token_hex(32)`` in ``folder/vocabulary.key``, readable by its owner only (0600).

    Every organisation's node needs the same key and the server must not have it: the operator
    hands it out with each organisation's node key, never to the SuperLink host.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / VOCABULARY_KEY_FILE
    with contextlib.suppress(FileExistsError):  # O_EXCL: never overwrite a key handed out before
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
    path.chmod(0o600)
    key = path.read_text().strip()
    if len(key.encode()) < MIN_KEY_BYTES:
        raise DeploymentError(f"{path} holds {len(key.encode())} bytes; the vocabulary key needs {MIN_KEY_BYTES}")
    return key


@dataclass
class LocalFederation:
    """The processes of one federation under ``root``; organisations map to their data folders."""

    root: Path
    organisations: Mapping[str, Path]
    tls: bool = True
    auth: bool = True
    warm: bool = True
    threads_per_node: int | None = None  # torch/OpenMP threads of each node's ClientApps; None: cores / organisations
    host: str = "127.0.0.1"  # the address the SuperLink listens on and the SuperNodes dial
    node_hosts: Mapping[str, str] = field(default_factory=dict)  # each SuperNode's own address (default 127.0.0.1)
    superlink_wrapper: Sequence[str] = ()  # a command the SuperLink runs under (tests: strace, to see what it opens)
    port: int = 0  # 0: a free one
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    node_ports: dict[str, int] = field(default_factory=dict)

    @classmethod
    def attach(cls, root: Path) -> LocalFederation:
        """A federation started earlier (``make federation-up``), to submit runs to; it is not ours to stop."""
        state_file = Path(root).resolve() / "federation.json"
        if not state_file.is_file():
            raise DeploymentError(
                f"no federation is up under {state_file.parent} (start one with 'make federation-up')"
            )
        state = json.loads(state_file.read_text())
        host, port = str(state["address"]).rsplit(":", 1)
        return cls(state_file.parent, {}, tls=bool(state["tls"]), auth=bool(state["auth"]), host=host, port=int(port))

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        self.port = self.port or free_port(self.host)
        if self.auth and not self.tls:
            raise ValueError("node authentication needs TLS (Flower refuses --enable-supernode-auth without it)")

    # -- paths and environment --------------------------------------------------------

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def node_host(self, org: str) -> str:
        """The address of an organisation's SuperNode (its Runtime API, which its executor dials)."""
        return self.node_hosts.get(org, "127.0.0.1")

    @property
    def cli_home(self) -> Path:
        return self.root / "home" / "cli"

    @property
    def vocabulary_key_file(self) -> Path:
        """The organisations' vocabulary key: next to their node keys, for the nodes only."""
        return self.root / "keys" / VOCABULARY_KEY_FILE

    def env(self, home: Path) -> dict[str, str]:
        """A process's environment: this one's, without any vocabulary key (only nodes get the deployment's)."""
        env = {k: v for k, v in os.environ.items() if k != KEY_ENV}
        env.update(
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",  # Flower spawns flower-superexec
            FLWR_HOME=str(home),
            FLWR_DISABLE_UPDATE_CHECK="1",
            FLWR_TELEMETRY_ENABLED="0",
            KEDRO_DISABLE_TELEMETRY="1",
        )
        home.mkdir(parents=True, exist_ok=True)
        return env

    def write_cli_config(self) -> None:
        """``$FLWR_HOME/config.toml`` of the submitting side: where the SuperLink is and which CA to trust."""
        lines = [
            "[superlink]",
            f'default = "{CONNECTION}"',
            "",
            f"[superlink.{CONNECTION}]",
            f'address = "{self.address}"',
        ]
        if self.tls:
            lines.append(f'root-certificates = "{self.root / "certs" / "ca.crt"}"')
        else:
            lines.append("insecure = true")
        self.cli_home.mkdir(parents=True, exist_ok=True)
        (self.cli_home / "config.toml").write_text("\n".join(lines) + "\n")

    # -- processes --------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str], home: Path, **env: str) -> subprocess.Popen:
        """Start a process in its own session, its own working directory (``home``) and ``FLWR_HOME``."""
        log = (self.root / "logs" / f"{name}.log").open("ab")
        process = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**self.env(home), **env},
            start_new_session=True,
            cwd=home,
        )
        self.processes[name] = process
        self._save_state()
        return process

    def _save_state(self) -> None:
        state = {"address": self.address, "pids": {n: p.pid for n, p in self.processes.items()}, "tls": self.tls}
        state["auth"] = self.auth
        (self.root / "federation.json").write_text(json.dumps(state, indent=2))

    def _wait_listening(self, port: int, name: str, timeout: float = 60, host: str = "127.0.0.1") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.processes[name].poll() is not None:
                raise DeploymentError(f"{name} exited with {self.processes[name].returncode}; see {self.log(name)}")
            with socket.socket() as sock:
                if sock.connect_ex((host, port)) == 0:
                    return
            time.sleep(0.2)
        raise DeploymentError(f"{name} is not listening on port {port} after {timeout:g} s; see {self.log(name)}")

    def log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def start_superlink(self) -> None:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        args = [*self.superlink_wrapper, _bin("flower-superlink"), "--host", self.host, "--port", str(self.port)]
        args.append("--disable-runtime-dependency-installation")
        if self.tls:
            certs = make_certificates(self.root / "certs", self.host)
            args += ["--ssl-ca-certfile", str(certs["ca.crt"]), "--ssl-certfile", str(certs["server.crt"])]
            args += ["--ssl-keyfile", str(certs["server.key"])]
            if self.auth:
                args.append("--enable-supernode-auth")
        else:
            args.append("--insecure")
        self._spawn("superlink", args, self.root / "home" / "superlink")
        self._wait_listening(self.port, "superlink", host=self.host)
        self.write_cli_config()

    def register(self, public_key: Path, name: str) -> None:
        """Register an organisation's public key on the SuperLink (node authentication)."""
        _run(
            [_bin("flwr"), "supernode", "register", str(public_key), CONNECTION, "--name", name],
            env=self.env(self.cli_home),
        )

    def supernode_args(self, org: str, data: Path, private_key: Path | None) -> list[str]:
        port = self.node_ports.setdefault(org, free_port(self.node_host(org)))
        cache = self.root / "cache" / org
        node_config = f"organisation='{org}' data-path='{Path(data).resolve()}' cache-dir='{cache}'"
        args = [_bin("flower-supernode")]
        if self.warm:  # ClientApps run by an executor process that keeps them loaded (flower/executor.py)
            args += ["--isolation", "process"]
        args += ["--superlink", self.address, "--host", self.node_host(org), "--port", str(port)]
        args += ["--node-config", node_config]
        if self.tls:
            args += ["--root-certificates", str(self.root / "certs" / "ca.crt")]
        else:
            args.append("--insecure")
        if private_key is not None:
            args += ["--auth-supernode-private-key", str(private_key)]
        return args

    def start_supernode(self, org: str, data: Path, register: bool = True) -> subprocess.Popen:
        """The organisation's SuperNode and, when ``warm``, its executor (started right after it:
        the executor waits for the SuperNode's Runtime API and exits once the SuperNode is gone)."""
        key = None
        if self.auth:
            key, public = make_key_pair(self.root / "keys", org)
            if register:
                self.register(public, org)
        home = self.root / "home" / org
        threads = self.thread_limits()
        secret = {KEY_ENV: make_vocabulary_key(self.vocabulary_key_file.parent)}
        # Without warm, the SuperNode's SuperExec and ClientApp processes inherit its environment.
        supernode_env = secret if self.warm else {**secret, **threads}
        supernode = self._spawn(f"supernode-{org}", self.supernode_args(org, data, key), home, **supernode_env)
        if self.warm:
            self._spawn(f"executor-{org}", self.executor_args(org, supernode.pid), home, **secret, **threads)
        return supernode

    def executor_args(self, org: str, supernode_pid: int) -> list[str]:
        address = f"{self.node_host(org)}:{self.node_ports[org]}"  # the SuperNode's Runtime API
        module = "fedtopic_pipelines.flower.executor"
        return [sys.executable, "-m", module, "--runtime-api-address", address, "--parent-pid", str(supernode_pid)]

    def thread_limits(self) -> dict[str, str]:
        """The compute-thread limit, for the processes where the ClientApps compute."""
        threads = str(self.node_threads())
        return {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}

    def node_threads(self) -> int:
        """Compute threads per organisation's node. On one machine the organisations share its cores:
        torch's default (all cores in every process) oversubscribes them, and OpenMP threads
        that spin while waiting for a core cost more than they compute (docs/performance.md)."""
        if self.threads_per_node is not None:
            return max(1, self.threads_per_node)
        return max(1, (os.cpu_count() or 1) // max(1, len(self.organisations)))

    def start(self) -> LocalFederation:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.tls:  # a certificate made earlier (or handed in) must hold the address the nodes dial
            check_certificate(make_certificates(self.root / "certs", self.host)["server.crt"], self.host)
        try:
            self.start_superlink()
            for org, data in self.organisations.items():
                self.start_supernode(org, data)
        except BaseException:
            self.stop()
            raise
        logger.info(
            "federation up at %s (TLS %s, node auth %s): %d SuperNodes",
            self.address,
            "on" if self.tls else "off",
            "on" if self.auth else "off",
            len(self.organisations),
        )
        return self

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Kill one process and its children (a fault, in tests).

        Killing ``supernode-<org>`` kills that organisation's executor too: a dead
        organisation (the executor would only notice its SuperNode gone at its next poll).
        """
        names = [name]
        executor = name.replace("supernode-", "executor-", 1)
        if name.startswith("supernode-") and executor in self.processes:
            names.append(executor)
        for each in names:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.processes[each].pid, sig)
        for each in names:
            self.processes[each].wait(timeout=30)

    def serverapps(self) -> list[psutil.Process]:
        """The ``flwr-serverapp`` processes running a run on this federation's SuperLink.

        The SuperLink's SuperExec starts one per run, in a session of its own, so they are
        found by their command line (the runtime API address is this SuperLink's).
        """
        found = []
        for process in psutil.process_iter(["cmdline"]):
            cmdline = process.info["cmdline"] or []
            if any(Path(a).name == "flwr-serverapp" for a in cmdline[:2]) and self.address in cmdline:
                found.append(process)
        return found

    def stop_run(self, run_id: int) -> None:
        """``flwr stop``: the SuperLink ends the run (its ServerApp, if alive, and its pending messages)."""
        _run([_bin("flwr"), "stop", str(run_id), CONNECTION], env=self.env(self.cli_home))

    def stop(self, timeout: float = 10) -> None:
        """Stop every process this federation started (their children too); safe to call twice."""
        for _name, process in reversed(list(self.processes.items())):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        deadline = time.monotonic() + timeout
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):  # children (SuperExec, ClientApps) share the session
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        self.processes.clear()
        state = self.root / "federation.json"
        if state.exists():
            state.unlink()

    def __enter__(self) -> LocalFederation:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- runs -------------------------------------------------------------------------

    def submit(self, run_config: Mapping[str, str], timeout: float = 600) -> int:
        """``flwr run --stream`` the app with ``run_config``: returns the run id once the run ended well.

        One CLI process follows the run until it finishes (its output goes to
        ``logs/flwr-run.log``); polling ``flwr ls`` instead would start a CLI process (seconds
        of imports) every poll and slow the federation down on a small machine.
        """
        config = " ".join(f"{k}='{v}'" for k, v in run_config.items())
        args = [_bin("flwr"), "run", str(APP_DIR), CONNECTION, "--run-config", config, "--stream"]
        log = self.log("flwr-run")
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as out:
            try:
                subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, env=self.env(self.cli_home), timeout=timeout)
            except subprocess.TimeoutExpired:
                raise DeploymentError(f"the run did not finish within {timeout:g} s; see {log}") from None
        run_id = self.started_run()
        if run_id is None:
            raise DeploymentError(f"flwr run did not start a run; see {log}:\n{log.read_text()[-2000:]}")
        return self.wait(run_id, 60)

    def started_run(self) -> int | None:
        """The id of the run the last ``submit`` started, once ``flwr run`` has printed it."""
        log = self.log("flwr-run")
        found = re.search(r"Successfully started run (\d+)", log.read_text() if log.exists() else "")
        return None if found is None else int(found.group(1))

    def status(self, run_id: int) -> str:
        args = [_bin("flwr"), "ls", CONNECTION, "--run-id", str(run_id), "--format", "json"]
        out = _run(args, env=self.env(self.cli_home))
        runs = json.loads(out[out.index("{") :]).get("runs", [])
        return str(runs[0].get("status", "")) if runs else ""

    def wait(self, run_id: int, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status(run_id)
            if status.startswith("finished"):
                if status != "finished:completed":
                    log = self.log(f"run-{run_id}")
                    log.write_text(self.run_log(run_id))
                    tail = "\n".join(log.read_text().splitlines()[-15:])
                    raise DeploymentError(f"run {run_id} ended as {status}; its log is in {log}:\n{tail}")
                return run_id
            time.sleep(0.5)
        raise DeploymentError(f"run {run_id} did not finish within {timeout:g} s")

    def run_log(self, run_id: int) -> str:
        args = [_bin("flwr"), "log", str(run_id), CONNECTION, "--show"]
        return subprocess.run(args, capture_output=True, text=True, env=self.env(self.cli_home), check=False).stdout
