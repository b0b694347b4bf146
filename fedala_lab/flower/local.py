"""A Flower deployment on this machine: a SuperLink and one SuperNode per client on 127.0.0.1 (free local ports),
each in a process group of its own, Flower's home (``FLWR_HOME``: its connection config, the installed app) in a
folder of its own — the deployment of docs/flower.md, as tests/test_flower_deploy.py, tests/test_flower_secure.py
and benchmarks/flower_round_time.py run it. Every wait has a deadline; :meth:`LocalFederation.close` (or leaving
the ``with``) stops every process it started, by its process group and the processes Flower started under it.

    from fedala_lab.flower.local import LocalFederation
    with LocalFederation("fed", clients=2, tls=True, authenticate=True) as fed:
        code, out, run_id = fed.run("preset='teach-digits' algo='fedala' rounds=3 "
                                    "set='num_clients=2 backend=loop' store='/abs/path/runs/flower'")
        fed.status(run_id)["status"]          # "finished:completed" (flwr run's exit code is 0 either way)

The commands it runs (``fed.commands`` after the start; ``<P>`` the SuperLink's port, ``<Q>`` a free port per
SuperNode for its app processes). Without ``tls`` each has ``--insecure`` instead of its certificate flags; without
``authenticate`` there is no ``--enable-supernode-auth``, no key and no registration:

    flower-superlink --ssl-ca-certfile tls/ca.crt --ssl-certfile tls/server.pem --ssl-keyfile tls/server.key \
        --enable-supernode-auth --host 127.0.0.1 --port <P> --disable-runtime-dependency-installation
    flwr supernode register keys/node<c>.pub lab --name node<c> --format json
    flower-supernode --root-certificates tls/ca.crt --auth-supernode-private-key keys/node<c> \
        --superlink 127.0.0.1:<P> --port <Q> --node-config "partition-id=<c> num-partitions=<N>"
    flwr run <fedala_lab/flower/app> lab --stream --run-config "…"   ($FLWR_HOME/config.toml: "lab", its CA)

The certificates and keys are made at first use in the folder (fedala_lab.flower.secure: private keys 0600) and
reused after; ``certificates=(ca, cert, key)`` gives your own.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Self

from ..errors import ConfigError, FedalaError
from .secure import Certificates, given_certificates, make_certificates, make_node_key, write_file

APP = Path(__file__).resolve().parent / "app"
START_SECONDS = 120.0  # a SuperLink or SuperNode up (a loaded machine starts Python slowly)
RUN_SECONDS = 900.0  # one flwr run, unless the caller says
# A SuperNode started with another heartbeat interval than Flower's fixed 30 s: Flower 1.42 reads it from a module
# constant (no flag), which each module copies on import. Only the node's own heartbeat takes the new value (the
# Fleet connection that declares it, the sender that keeps it): the SuperNode's task store keeps 30 s for its
# ClientApp processes, which beat every 30 s themselves — with 10 there it took a ClientApp for crashed after
# 20 s without a beat ("ClientApp stopped responding"), a slow round on a loaded machine.
_SUPERNODE = ("import sys; import flwr.supercore.heartbeat as h, flwr.supernode.fleet_http_connection as f; "
              "h.HEARTBEAT_DEFAULT_INTERVAL = f.HEARTBEAT_DEFAULT_INTERVAL = int(sys.argv.pop(1)); "
              "from flwr.supernode.cli import flower_supernode; sys.argv[0] = 'flower-supernode'; "
              "sys.exit(flower_supernode())")
HEARTBEAT_MIN = 10  # the SuperLink refuses a shorter interval (flwr.common.constant.HEARTBEAT_MIN_INTERVAL)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(log: Path, lines: int = 12) -> str:
    """What a process said before it ended: ``log``'s lines from its last ERROR (else its last lines), at most
    ``lines``, without terminal colours."""
    try:
        said = [line for line in re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace")).splitlines()
                if line.strip()]
    except OSError:
        return ""
    errors = [i for i, line in enumerate(said) if "ERROR" in line]
    start = errors[-1] if errors else max(len(said) - lines, 0)
    return "\n".join(said[start:start + lines])


def until(what: str, check: Callable, seconds: float, proc: subprocess.Popen | None = None, log: Path | None = None):
    """Poll ``check()`` until it is truthy (returned); a FedalaError saying what was awaited after ``seconds``,
    or at once when ``proc`` ends (with the end of its log: why)."""
    end = time.monotonic() + seconds
    where = f" (its log: {log})" if log is not None else ""
    while True:
        got = check()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            said = f":\n{tail(log)}" if log is not None else ""
            raise FedalaError(f"{what}: the process ended (exit {proc.returncode}){where}{said}")
        if time.monotonic() > end:
            raise FedalaError(f"{what}: not within {seconds:g} s{where}")
        time.sleep(0.2)


def check_free(port: int, whose: str) -> None:
    """A FedalaError naming ``port`` if something listens on it at 127.0.0.1 (before a process is started on it,
    which would fail only seconds later, in its log)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind: old connections don't count
        try:
            s.bind(("127.0.0.1", port))
        except OSError as err:
            raise FedalaError(f"{whose} port {port} on 127.0.0.1 is in use ({err.strerror}): stop what listens "
                              "there, or choose another port") from None


def descendants(pid: int) -> list[int]:
    """The processes started under ``pid``, from /proc (none where there is no /proc)."""
    children: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for e in entries:
        try:
            with open(f"/proc/{e}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(e))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


_LINUX = sys.platform.startswith("linux")
# Each SuperLink and SuperNode starts through this, which asks Linux for SIGTERM when the thread that started it
# ends (prctl PR_SET_PDEATHSIG, kept across exec) and then becomes the command: a federation whose Python was
# killed leaves no process behind (they run in sessions of their own, out of reach of a signal to the caller's
# group). They are started from one thread that lives as long as this process (:func:`_starter`), so a process
# started from a short-lived thread (a SuperNode that replaces a lost one) does not end with that thread.
_END_WITH_STARTER = ("import ctypes, os, signal, sys; ctypes.CDLL(None).prctl(1, signal.SIGTERM); "
                     "os.execv(sys.argv[1], sys.argv[1:])")



@functools.cache
def _starter() -> concurrent.futures.ThreadPoolExecutor:
    """The one thread every SuperLink and SuperNode is started from (its idle worker waits until this process
    exits)."""
    return concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="flower-starter")


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


class LocalFederation:
    """A SuperLink and ``clients`` SuperNodes (partition-id 0 … clients−1) on 127.0.0.1, logging to
    ``<folder>/<name>.log``; Flower's home is ``<folder>/home/.flwr`` (``HOME`` too, for the processes it
    starts), with the connection "lab". ``start_timeout``: seconds for each process to be up. ``port``: the
    SuperLink's (None: a free one). Every value is checked before anything is made or started.

    ``tls``: the SuperLink serves TLS and every SuperNode and ``flwr`` verifies it with the root certificate:
    ``certificates=(ca, cert, key)`` (paths; the key readable by its owner only), or None for certificates made
    at first use in ``<folder>/tls`` (a CA of its own; reused after). ``authenticate`` (needs ``tls``, as Flower
    does): the SuperLink admits only registered SuperNodes: each SuperNode ``<name>`` gets a key pair
    ``<folder>/keys/<name>`` (0600) and ``.pub``, whose public key is registered (``flwr supernode register``)
    before it starts.

    ``heartbeat``: seconds between a SuperNode's heartbeats (None: Flower's 30; at least 10, the SuperLink's
    minimum). The SuperLink takes a node for lost after two intervals without one, so a lost node costs about
    twice this before the run hears of it: tests pass 10 to notice a killed node sooner."""

    def __init__(self, folder: str | Path, clients: int, *, tls: bool = False, authenticate: bool = False,
                 certificates: Certificates | tuple | None = None, port: int | None = None,
                 start_timeout: float = START_SECONDS, database: bool = False, heartbeat: int | None = None):
        def whole(value, low: int, high: int | None = None) -> bool:
            return (isinstance(value, int) and not isinstance(value, bool) and value >= low
                    and (high is None or value <= high))
        if not isinstance(folder, str | os.PathLike) or not str(folder):
            raise ConfigError("folder", folder, "the path of the federation's working folder")
        if not whole(clients, 1):
            raise ConfigError("clients", clients, "a whole number ≥ 1 of SuperNodes (one per client of the data)")
        if heartbeat is not None and not whole(heartbeat, HEARTBEAT_MIN):
            raise ConfigError("heartbeat", heartbeat, f"a whole number of seconds ≥ {HEARTBEAT_MIN} (the "
                              "SuperLink's minimum), or None (Flower's 30)")
        if port is not None and not whole(port, 1, 65535):
            raise ConfigError("port", port, "a TCP port 1 … 65535 for the SuperLink, or None for a free one")
        if isinstance(start_timeout, bool) or not isinstance(start_timeout, int | float) or not (
                0 < start_timeout < float("inf")):
            raise ConfigError("start_timeout", start_timeout, "seconds > 0 (finite) for each process to be up")
        for field, value in (("tls", tls), ("authenticate", authenticate), ("database", database)):
            if not isinstance(value, bool):
                raise ConfigError(field, value, "True or False")
        if authenticate and not tls:
            raise ConfigError("authenticate", authenticate, "True only with tls=True",
                              "Flower authenticates SuperNodes over TLS only")
        if certificates is not None and not tls:
            raise ConfigError("certificates", certificates, "None unless tls=True")
        if isinstance(certificates, Certificates):
            certificates = (certificates.ca, certificates.cert, certificates.key)
        if certificates is not None and not (isinstance(certificates, tuple | list) and len(certificates) == 3):
            raise ConfigError("certificates", certificates, "(ca, cert, key): the paths of the root certificate, "
                              "the SuperLink's certificate and its private key; or None to make them")
        given = given_certificates(*certificates) if certificates is not None else None
        self.heartbeat, self.authenticate = heartbeat, authenticate
        self.folder = Path(folder).resolve()
        self.clients, self.start_timeout = clients, start_timeout
        self.database = database  # the SuperLink's state in <folder>/superlink.db (else in its memory)
        self.bin = Path(sys.executable).parent  # flower-superlink, flower-supernode, flwr beside this Python
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        self.commands: list[str] = []
        self.registered: dict[str, int] = {}  # SuperNode name -> the node id its key was registered as
        home = self.folder / "home"
        (home / ".flwr").mkdir(parents=True, exist_ok=True)
        self.certificates = (given or make_certificates(self.folder / "tls")) if tls else None
        self.port = port if port is not None else free_port()
        trust = (f'root-certificates = "{self.certificates.ca}"' if tls  # flwr verifies the SuperLink with it
                 else "insecure = true")
        write_file(home / ".flwr" / "config.toml", f'[superlink]\ndefault = "lab"\n\n[superlink.lab]\n'
                   f'address = "127.0.0.1:{self.port}"\n{trust}\n'.encode(), 0o644)
        self.env = {**os.environ, "HOME": str(home), "FLWR_HOME": str(home / ".flwr"),
                    "PATH": str(self.bin) + os.pathsep + os.environ.get("PATH", ""),  # Flower starts flower-superexec
                    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_DISABLE_UPDATE_CHECK": "1",
                    "FLWR_TELEMETRY_ENABLED": "0", "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}

    def __enter__(self) -> Self:
        try:
            self.superlink()
            for c in range(self.clients):
                self.supernode(c)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- processes -------------------------------------------------------------------------------------

    def start(self, name: str, *args: str) -> subprocess.Popen:
        """Start ``args`` (a command beside this Python) as ``name``, in a session of its own."""
        if not (self.bin / args[0]).exists():
            raise FedalaError(f"{args[0]} is not installed beside {sys.executable}: pip install \"fedala_lab[flower]\"")
        log = self.logs[name] = self.folder / f"{name}.log"
        self.commands.append(" ".join(args))
        cmd = [str(self.bin / args[0]), *args[1:]]
        if args[0] == "flower-supernode" and self.heartbeat is not None:
            cmd = [sys.executable, "-c", _SUPERNODE, str(self.heartbeat), *args[1:]]
        with open(log, "ab") as out:
            proc = _starter().submit(subprocess.Popen, [sys.executable, "-c", _END_WITH_STARTER, *cmd] if _LINUX else cmd,
                                     stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=self.folder,
                                     start_new_session=True).result()
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        """What ``name`` logged so far."""
        path = self.logs.get(name)
        return path.read_text(errors="replace") if path is not None and path.exists() else ""

    def superlink(self) -> None:
        """Start the SuperLink (again, after :meth:`kill`: the same port); returns once it listens on its port.
        In memory (no ``database``) a restarted SuperLink has forgotten the registered SuperNodes."""
        check_free(self.port, "the SuperLink's")
        before = self.log("superlink").count("Uvicorn running")
        state = ["--database", str(self.folder / "superlink.db")] if self.database else []
        secure = self.certificates.superlink_args() if self.certificates else ["--insecure"]
        auth = ["--enable-supernode-auth"] if self.authenticate else []
        proc = self.start("superlink", "flower-superlink", *secure, *auth, "--host", "127.0.0.1", "--port",
                          str(self.port), "--disable-runtime-dependency-installation", *state)
        if not self.database:
            self.registered.clear()

        def up() -> bool:
            with socket.socket() as s:
                s.settimeout(0.5)
                return (s.connect_ex(("127.0.0.1", self.port)) == 0
                        and self.log("superlink").count("Uvicorn running") > before)
        until("the SuperLink", up, self.start_timeout, proc, self.logs["superlink"])

    def register(self, name: str) -> int:
        """Register SuperNode ``name``'s public key with the SuperLink (its key pair made at first use in
        ``<folder>/keys``); returns its node id. The SuperLink admits a SuperNode only with a registered key."""
        pub = make_node_key(self.folder / "keys" / name)
        self.commands.append(f"flwr supernode register {pub} lab --name {name} --format json")
        res = self.flwr("supernode", "register", str(pub), "lab", "--name", name, "--format", "json")
        try:
            got = json.loads(res.stdout)
            node_id = int(got["node-id"]) if got.get("success") else None
        except (ValueError, KeyError, TypeError):
            node_id = None
        if node_id is None:  # flwr's exit code is 0 when the SuperLink refuses (Flower 1.42): its JSON says so
            raise FedalaError(f"SuperNode {name}'s key {pub} was not registered: "
                              f"{(res.stdout + res.stderr).strip()[-1000:]}")
        self.registered[name] = node_id
        return node_id

    def supernode(self, c: int, name: str | None = None, *, register: bool = True) -> str:
        """Start a SuperNode for partition-id ``c`` (named ``name``, default ``node<c>``); returns its name once
        it has joined the SuperLink. With ``authenticate`` it signs in with its key ``<folder>/keys/<name>``,
        registered first unless ``register=False`` (a stranger's key: the SuperLink refuses it, a FedalaError
        with the end of its log)."""
        name = name or f"node{c}"
        secure = ["--root-certificates", str(self.certificates.ca)] if self.certificates else ["--insecure"]
        if self.authenticate:
            key = self.folder / "keys" / name
            make_node_key(key)  # at first use
            if register and name not in self.registered:
                self.register(name)
            secure += ["--auth-supernode-private-key", str(key)]
        port = free_port()
        check_free(port, f"SuperNode {name}'s")
        proc = self.start(name, "flower-supernode", *secure, "--superlink", f"127.0.0.1:{self.port}",
                          "--port", str(port), "--node-config", f"partition-id={c} num-partitions={self.clients}")
        until(f"SuperNode {name}", lambda: "SuperNode ID:" in self.log(name), self.start_timeout, proc,
              self.logs[name])
        return name

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """``sig`` to ``name``'s process group and to every process started under it (Flower starts its
        SuperExec in a session of its own, which starts the ServerApp or ClientApp processes), and waited for;
        SIGKILL after 30 s if any is still there."""
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        tree = [proc.pid, *descendants(proc.pid)]
        for attempt in (sig, signal.SIGKILL):
            for pid in tree:
                for send in (os.killpg, os.kill):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        send(pid, attempt)
            try:
                proc.wait(timeout=30)
                until(f"{name}'s processes ended", lambda: not [p for p in tree[1:] if alive(p)], 30)
                return
            except (subprocess.TimeoutExpired, FedalaError):
                if attempt == signal.SIGKILL:
                    raise FedalaError(f"{name} (process {proc.pid}) or a process under it did not end") from None

    def close(self) -> None:
        """Stop every process started (the SuperNodes first): SIGTERM, then SIGKILL."""
        failed = []
        for name in sorted(self.procs, key=lambda n: n == "superlink"):
            try:
                self.kill(name, signal.SIGTERM)
            except FedalaError as err:  # the others are stopped all the same
                failed.append(str(err))
        if failed:
            raise FedalaError("; ".join(failed))

    # -- the flwr command ------------------------------------------------------------------------------

    def flwr(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """``flwr <args>`` with this federation's home; its output captured."""
        return subprocess.run([str(self.bin / "flwr"), *args], check=False, capture_output=True, text=True,
                              env=self.env, cwd=self.folder, timeout=timeout)

    def run(self, run_config: str, *, app: str | Path = APP,
            timeout: float = RUN_SECONDS) -> tuple[int, str, int]:
        """``flwr run <app> lab --stream --run-config <run_config>``: (its exit code, its output, the run's id).
        After ``timeout`` s the command's process group is killed and a FedalaError raised."""
        cmd = ["flwr", "run", str(app), "lab", "--stream", "--run-config", run_config]
        self.commands.append(" ".join(cmd[:5]) + f' --run-config "{run_config}"')
        proc = subprocess.Popen([str(self.bin / "flwr"), *cmd[1:]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=self.env, cwd=self.folder, start_new_session=True)
        lines: list[str] = []

        def read() -> None:
            lines.extend(proc.stdout)  # a line at a time: a timeout shows the last lines read
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            raise FedalaError(f"flwr run did not end within {timeout:g} s:\n" + "".join(lines[-40:])) from None
        finally:
            reader.join(timeout=10)
        out = "".join(lines)
        found = re.search(r"Successfully started run (\d+)", out)
        if not found:
            raise FedalaError(f"flwr run started no run (exit {proc.returncode}):\n{out[-3000:]}")
        return proc.returncode, out, int(found.group(1))

    def status(self, run_id: int) -> dict:
        """The run's entry of ``flwr ls lab --run-id <id> --format json`` (``status``: "finished:completed",
        "finished:failed" …; ``status-details``: a failed ServerApp's message)."""
        res = self.flwr("ls", "lab", "--run-id", str(run_id), "--format", "json")
        try:
            return json.loads(res.stdout)["runs"][0]
        except (ValueError, KeyError, IndexError):
            raise FedalaError(f"flwr ls gave no run {run_id}: {res.stdout[-1000:]}{res.stderr[-1000:]}") from None


__all__ = ["APP", "LocalFederation", "alive", "check_free", "descendants", "free_port", "tail", "until"]
