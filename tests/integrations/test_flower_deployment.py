"""The deployment of ``examples/flower_app/README.md`` ("Across real machines"), as a test.

A SuperLink and three SuperNodes run as real processes on 127.0.0.1, with TLS
certificates and SuperNode keys made here and the nodes registered with
``flwr supernode register``; ``flwr run`` submits the example app. Every
client's final personalized model and metrics, saved by the app (its
``results`` setting), must match the in-process :class:`Simulator` run with the
same settings. Full-batch local steps make the two agree to rounding (see
``test_flower.py``).

Nothing is written outside pytest's temporary folder (``FLWR_HOME`` points
there) and nothing is downloaded: the SuperLink's runtime installation of app
dependencies is disabled, as are Flower's telemetry and update check. Every
process started here, and every process Flower started under them, is ended
by pid when the module's tests are done or a step fails.
"""
from __future__ import annotations

import contextlib
import datetime
import importlib.util
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

pytest.importorskip("flwr", reason="the Flower integration needs the 'flower' extra")
pytest.importorskip("cryptography", reason="Flower's SuperNode authentication needs it")

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402

import pyg_fedgraph  # noqa: E402
from pyg_fedgraph.datasets import load_dataset  # noqa: E402
from pyg_fedgraph.simulation.simulator import Simulator  # noqa: E402
from pyg_fedgraph.strategies import build_strategy  # noqa: E402

pytestmark = pytest.mark.slow

APP = Path(__file__).resolve().parents[2] / "examples" / "flower_app"
NUM_CLIENTS = 3
ROUNDS = 2
CONNECTION = "my-cluster"  # the SuperLink's name in FLWR_HOME/config.toml, as in the README
# Per step; generous because every Flower message starts a Python process that
# imports torch, and the machine may be busy. A step that takes longer fails.
START_TIMEOUT = 120.0
RUN_TIMEOUT = 900.0


# ------------------------------------------------------------- credentials
def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def write_tls_files(directory: Path) -> None:
    """``ca.crt`` (a certificate authority) and the SuperLink's ``server.pem`` /
    ``server.key`` for 127.0.0.1 and localhost, signed by it: the files of the
    README's ``openssl`` commands, with the extensions strict verifiers ask for."""
    now = datetime.datetime.now(datetime.UTC)
    valid = {"not_valid_before": now - datetime.timedelta(minutes=5),
             "not_valid_after": now + datetime.timedelta(days=1)}
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_id = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (x509.CertificateBuilder(subject_name=_name("pyg-fedgraph test CA"),
                                  issuer_name=_name("pyg-fedgraph test CA"),
                                  public_key=ca_key.public_key(),
                                  serial_number=x509.random_serial_number(), **valid)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(_key_usage(key_cert_sign=True, crl_sign=True), critical=True)
          .add_extension(ca_id, critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP384R1())
    names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    cert = (x509.CertificateBuilder(subject_name=_name("127.0.0.1"), issuer_name=ca.subject,
                                    public_key=key.public_key(),
                                    serial_number=x509.random_serial_number(), **valid)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(digital_signature=True), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_id),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (directory / "server.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "server.key").write_bytes(_pem_key(key))


def _key_usage(**allowed: bool) -> x509.KeyUsage:
    names = ("digital_signature", "content_commitment", "key_encipherment",
             "data_encipherment", "key_agreement", "key_cert_sign", "crl_sign",
             "encipher_only", "decipher_only")
    return x509.KeyUsage(**{n: allowed.get(n, False) for n in names})


def write_node_key(path: Path) -> None:
    """A SuperNode's key pair, ``path`` (private) and ``path.pub``: ECDSA P-384
    in OpenSSH format, as ``ssh-keygen -t ecdsa -b 384 -N "" -f path`` makes."""
    key = ec.generate_private_key(ec.SECP384R1())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.OpenSSH,
                                       serialization.NoEncryption()))
    path.with_name(path.name + ".pub").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH))


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports the OS reports free on 127.0.0.1."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tls_ready(port: int, ca: Path) -> bool:
    """Whether the server on ``port`` answers TLS with a certificate for
    127.0.0.1 signed by ``ca`` (a certificate error raises)."""
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock, \
                context.wrap_socket(sock, server_hostname="127.0.0.1"):
            return True
    except ConnectionRefusedError:
        return False


# --------------------------------------------------------------- processes
def _stat(pid: int) -> tuple[int, int, str] | None:
    """``(parent pid, start time, state)`` of a process from /proc, or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (command) state ppid ...": the command may hold spaces and parentheses.
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[1]), int(fields[19]), fields[0]


def _descendants(pids: list[int]) -> dict[int, int]:
    """pid -> start time of every descendant of ``pids`` (none without /proc)."""
    proc = Path("/proc")
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in proc.iterdir() if proc.is_dir() else ():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            children.setdefault(stat[0], []).append((int(entry.name), stat[1]))
    out: dict[int, int] = {}
    todo = list(pids)
    while todo:
        for child, started in children.get(todo.pop(), []):
            if child not in out:
                out[child] = started
                todo.append(child)
    return out


def _running(pid: int, started: int) -> bool:
    """Whether that process (not a later one with its pid) has not exited."""
    stat = _stat(pid)
    return stat is not None and stat[1] == started and stat[2] != "Z"


class Processes:
    """The processes this test starts, each writing to its own log file.

    Flower starts processes of its own under them (a SuperExec beside the
    SuperLink and every SuperNode, which launches the ServerApp and ClientApp
    processes) in new sessions. They are recorded while the test waits, by pid
    and start time, and :meth:`stop` ends those that outlive their parent.
    """

    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        self.directory = directory
        self.env = env
        self.started: dict[str, subprocess.Popen] = {}
        self.services: set[str] = set()  # must keep running until stop()
        self.family: dict[int, int] = {}  # Flower's processes: pid -> start time
        directory.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, program: str, *args: str, service: bool = True
              ) -> subprocess.Popen:
        exe = shutil.which(program, path=self.env["PATH"])
        if exe is None:
            self.fail(f"`{program}` is not installed (it comes with flwr)")
        with open(self.directory / f"{name}.log", "wb") as log:
            self.started[name] = subprocess.Popen(
                [exe, *args], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self.env, cwd=self.directory)
        if service:
            self.services.add(name)
        return self.started[name]

    def run(self, name: str, program: str, *args: str, timeout: float = START_TIMEOUT) -> str:
        """Runs a command to its end; returns its output."""
        proc = self.start(name, program, *args, service=False)
        self.wait_for(lambda: proc.poll() is not None, f"end of `{program} {' '.join(args)}`",
                      timeout)
        if proc.returncode != 0:
            self.fail(f"`{program} {' '.join(args)}` exited with code {proc.returncode}")
        return self.log(name)

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float) -> None:
        """Polls ``condition``; fails when a service exits or time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            self._record_family()
            if condition():
                return
            for name in sorted(self.services):
                code = self.started[name].poll()
                if code is not None:
                    self.fail(f"{name} exited with code {code} while waiting for {what}")
            if time.monotonic() > deadline:
                self.fail(f"no {what} after {timeout:.0f} s")
            time.sleep(0.5)

    def _record_family(self) -> None:
        live = [p.pid for p in self.started.values() if p.poll() is None]
        self.family.update(_descendants(live))

    def log(self, name: str) -> str:
        text = (self.directory / f"{name}.log").read_text(errors="replace")
        return re.sub(r"\x1b\[[0-9;]*m", "", text)  # Flower colours its log levels

    def tails(self, lines: int = 25) -> str:
        out = []
        for name, proc in self.started.items():
            state = "running" if proc.poll() is None else f"exit code {proc.returncode}"
            out.append(f"----- {name} (pid {proc.pid}, {state}), last {lines} lines:")
            # One line per HTTP request would hide what the SuperLink did.
            text = [x for x in self.log(name).splitlines() if "[uvicorn.access]" not in x]
            out.extend(text[-lines:])
        return "\n".join(out)

    def fail(self, message: str) -> None:
        logs = self.tails()
        self.stop()
        pytest.fail(f"{message}\n{logs}", pytrace=False)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM (Flower shuts down cleanly), then SIGKILL after ``grace``
        seconds, for every process started here and all their descendants."""
        self._record_family()
        live = [p for p in self.started.values() if p.poll() is None]
        for p in live:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in live:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        # Flower's processes exit when their parent has; end any that did not.
        deadline = time.monotonic() + grace
        while (left := [pid for pid, t in self.family.items() if _running(pid, t)]) and \
                time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in left:
            if _running(pid, self.family[pid]):
                with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                    os.kill(pid, signal.SIGKILL)
        self.services.clear()


def environment(home: Path) -> dict[str, str]:
    """The environment of every Flower process: this checkout's pyg_fedgraph
    and this Python's Flower commands, Flower's files in ``home``, no network."""
    source = str(Path(pyg_fedgraph.__file__).resolve().parents[1])
    env = dict(os.environ)
    env.update({
        "FLWR_HOME": str(home),
        "PYTHONPATH": os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")])),
        "PATH": os.pathsep.join(filter(None, [str(Path(sys.executable).parent),
                                              env.get("PATH")])),
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
    })
    # Tiny models and several processes on the same cores: threads only cost.
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    """A SuperLink (TLS, SuperNode authentication, no runtime dependency
    installation) and NUM_CLIENTS authenticated SuperNodes, all online."""
    root = tmp_path_factory.mktemp("deployment")
    certificates, keys, home = root / "certificates", root / "keys", root / "flwr-home"
    write_tls_files(certificates)
    home.mkdir()
    port, *node_ports = free_ports(1 + NUM_CLIENTS)
    # What the README puts in ~/.flwr/config.toml on the machine that runs `flwr`.
    (home / "config.toml").write_text(
        f'[superlink.{CONNECTION}]\naddress = "127.0.0.1:{port}"\n'
        f'root-certificates = "{certificates / "ca.crt"}"\n')
    procs = Processes(root / "logs", environment(home))
    try:
        procs.start("superlink", "flower-superlink",
                    "--ssl-ca-certfile", str(certificates / "ca.crt"),
                    "--ssl-certfile", str(certificates / "server.pem"),
                    "--ssl-keyfile", str(certificates / "server.key"),
                    "--enable-supernode-auth", "--disable-runtime-dependency-installation",
                    "--host", "127.0.0.1", "--port", str(port))
        procs.wait_for(lambda: tls_ready(port, certificates / "ca.crt"),
                       "TLS answer from the SuperLink", START_TIMEOUT)
        for i in range(NUM_CLIENTS):
            write_node_key(keys / f"node{i}")
            out = procs.run(f"register-{i}", "flwr", "supernode", "register",
                            str(keys / f"node{i}.pub"), CONNECTION, "--format", "json")
            assert json.loads(out)["success"], out
        for i, node_port in enumerate(node_ports):
            procs.start(f"supernode-{i}", "flower-supernode",
                        "--root-certificates", str(certificates / "ca.crt"),
                        "--superlink", f"127.0.0.1:{port}",
                        "--auth-supernode-private-key", str(keys / f"node{i}"),
                        "--node-config", f"partition-id={i} num-partitions={NUM_CLIENTS}",
                        "--port", str(node_port))
        # The ServerApp waits until all NUM_CLIENTS nodes are connected; a node
        # the SuperLink refuses exits, which fails the step that is waiting.
        yield procs, root, port
    finally:
        procs.stop()


def app_settings(**overrides) -> dict:
    """The example app's run config (its pyproject.toml) with ``overrides``."""
    with open(APP / "pyproject.toml", "rb") as f:
        config = tomllib.load(f)["tool"]["flwr"]["app"]["config"]
    unknown = set(overrides) - set(config)
    assert not unknown, f"the app has no settings {sorted(unknown)}"
    return {**config, **overrides}


def run_config_arg(overrides: dict[str, int | str]) -> str:
    """``--run-config`` text: TOML values, strings as literal strings ('...')."""
    return " ".join(f"{k}='{v}'" if isinstance(v, str) else f"{k}={v}"
                    for k, v in overrides.items())


@pytest.fixture(scope="module")
def deployed_run(federation):
    """``flwr run`` of the example app on the federation; the settings and the
    results file the ServerApp wrote."""
    procs, root, _ = federation
    data = load_dataset("fl60", num_clients=NUM_CLIENTS, seed=int(app_settings()["seed"]))
    train = data.num_samples("train")
    assert bool((train == train[0]).all()), "one batch size must be every client's full batch"
    # Every process started costs seconds (it imports torch): evaluate only
    # after the last round, which the comparison uses.
    overrides = {"num-clients": NUM_CLIENTS, "num-server-rounds": ROUNDS,
                 "batch-size": int(train[0]), "evaluate-every": ROUNDS,
                 "results": str(root / "results.pt")}
    procs.run("flwr-run", "flwr", "run", str(APP), CONNECTION, "--stream",
              "--run-config", run_config_arg(overrides), timeout=RUN_TIMEOUT)
    if not (root / "results.pt").exists():
        procs.fail("the run ended without writing its results")
    return app_settings(**overrides), torch.load(root / "results.pt", weights_only=True)


def load_task():
    spec = importlib.util.spec_from_file_location("flower_app_task", APP / "task.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------- tests
def test_deployed_app_matches_the_simulator(deployed_run):
    settings, results = deployed_run
    assert results["dropped"] == []
    assert [r for r, clients in results["evaluate-metrics"].items() if clients] == [ROUNDS]
    assert sorted(results["train-metrics"]) == list(range(1, ROUNDS + 1))
    assert all(sorted(m) == list(range(NUM_CLIENTS)) for m in results["train-metrics"].values())

    task = load_task()
    seed = int(settings["seed"])
    data = load_dataset("fl60", num_clients=int(settings["num-clients"]), seed=seed)
    sim = Simulator(data, task.load_model(seed), build_strategy(settings["strategy"]),
                    rounds=int(settings["num-server-rounds"]),
                    local=task.local_config(settings),
                    eval_every=int(settings["evaluate-every"]), seed=seed)
    sim.run()

    expected = sim.strategy.personalized_params(torch.arange(NUM_CLIENTS))
    expected = sim.local_params if expected is None else expected
    params = results["personalized-params"]
    assert params.shape == expected.shape
    assert torch.pdist(params).min() > 0  # personalized: no two clients alike
    assert torch.allclose(params, expected, atol=1e-6)
    assert torch.allclose(results["collaboration-graph"], sim.strategy.collaboration_graph(),
                          atol=1e-6)
    last = results["evaluate-metrics"][ROUNDS]
    test = sim.history.records[-1].test
    assert torch.equal(torch.tensor([last[i]["test-accuracy"] for i in range(NUM_CLIENTS)]),
                       test["accuracy"])
    assert torch.allclose(torch.tensor([last[i]["test-loss"] for i in range(NUM_CLIENTS)]),
                          test["loss"], atol=1e-6)


def test_an_unregistered_supernode_is_refused(federation):
    procs, root, port = federation
    write_node_key(root / "keys" / "unregistered")
    (node_port,) = free_ports(1)
    node = procs.start("supernode-unregistered", "flower-supernode",
                       "--root-certificates", str(root / "certificates" / "ca.crt"),
                       "--superlink", f"127.0.0.1:{port}",
                       "--auth-supernode-private-key", str(root / "keys" / "unregistered"),
                       "--node-config", "partition-id=0", "--port", str(node_port),
                       "--max-retries", "0", service=False)
    procs.wait_for(lambda: node.poll() is not None, "refusal of the unregistered SuperNode",
                   START_TIMEOUT)
    assert node.returncode != 0
    assert "Failed to activate SuperNode" in procs.log("supernode-unregistered")
