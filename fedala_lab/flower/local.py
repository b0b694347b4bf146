"""A Flower deployment on this machine: a SuperLink and one SuperNode per client on 127.0.0.1 (``--insecure``,
free local ports), each in a process group of its own, Flower's home (``FLWR_HOME``: its connection config, the
installed app) in a folder of its own — the deployment of docs/flower.md, as tests/test_flower_deploy.py and
benchmarks/flower_round_time.py run it. Every wait has a deadline; :meth:`LocalFederation.close` (or leaving
the ``with``) stops every process it started, by its process group and the processes Flower started under
it.

    from fedala_lab.flower.local import LocalFederation
    with LocalFederation("fed", clients=2) as fed:
        code, out, run_id = fed.run("preset='teach-digits' algo='fedala' rounds=3 "
                                    "set='num_clients=2 backend=loop' store='/abs/path/runs/flower'")
        fed.status(run_id)["status"]          # "finished:completed" (flwr run's exit code is 0 either way)

The commands it runs (``fed.commands`` after the start; ``<P>`` the SuperLink's port, ``<Q>`` a free port per
SuperNode for its app processes):

    flower-superlink --insecure --host 127.0.0.1 --port <P> --disable-runtime-dependency-installation
    flower-supernode --insecure --superlink 127.0.0.1:<P> --port <Q> --node-config "partition-id=<c> num-partitions=<N>"
    flwr run <fedala_lab/flower/app> lab --stream --run-config "…"     ($FLWR_HOME/config.toml names "lab")
"""

from __future__ import annotations

import contextlib
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

from ..errors import FedalaError

APP = Path(__file__).resolve().parent / "app"
START_SECONDS = 120.0  # a SuperLink or SuperNode up (a loaded machine starts Python slowly)
RUN_SECONDS = 900.0  # one flwr run, unless the caller says
# A SuperNode started with another heartbeat interval than Flower's fixed 30 s: Flower 1.42 reads it from a module
# constant (no flag), so the constant is set before the SuperNode's modules are imported, which copy it.
_SUPERNODE = ("import sys; import flwr.common.constant as c; c.HEARTBEAT_DEFAULT_INTERVAL = int(sys.argv.pop(1)); "
              "from flwr.supernode.cli import flower_supernode; sys.argv[0] = 'flower-supernode'; "
              "sys.exit(flower_supernode())")
HEARTBEAT_MIN = 10  # the SuperLink refuses a shorter interval (flwr.common.constant.HEARTBEAT_MIN_INTERVAL)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def until(what: str, check: Callable, seconds: float, proc: subprocess.Popen | None = None, log: Path | None = None):
    """Poll ``check()`` until it is truthy (returned); a FedalaError saying what was awaited after ``seconds``,
    or at once when ``proc`` ends."""
    end = time.monotonic() + seconds
    where = f" (its log: {log})" if log is not None else ""
    while True:
        got = check()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            raise FedalaError(f"{what}: the process ended (exit {proc.returncode}){where}")
        if time.monotonic() > end:
            raise FedalaError(f"{what}: not within {seconds:g} s{where}")
        time.sleep(0.2)


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
    starts), with the connection "lab". ``start_timeout``: seconds for each process to be up.

    ``heartbeat``: seconds between a SuperNode's heartbeats (None: Flower's 30; at least 10, the SuperLink's
    minimum). The SuperLink takes a node for lost after two intervals without one, so a lost node costs about
    twice this before the run hears of it: tests pass 10 to notice a killed node in ≈ 20 s instead of ≈ 60."""

    def __init__(self, folder: str | Path, clients: int, *, start_timeout: float = START_SECONDS,
                 database: bool = False, heartbeat: int | None = None):
        if heartbeat is not None and not (isinstance(heartbeat, int) and heartbeat >= HEARTBEAT_MIN):
            raise FedalaError(f"heartbeat must be a whole number of seconds >= {HEARTBEAT_MIN} (the SuperLink's "
                              f"minimum) or None (Flower's 30), got {heartbeat!r}")
        self.heartbeat = heartbeat
        self.folder = Path(folder).resolve()
        self.clients, self.start_timeout = clients, start_timeout
        self.database = database  # the SuperLink's state in <folder>/superlink.db (else in its memory)
        self.bin = Path(sys.executable).parent  # flower-superlink, flower-supernode, flwr beside this Python
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        self.commands: list[str] = []
        home = self.folder / "home"
        (home / ".flwr").mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        (home / ".flwr" / "config.toml").write_text(
            f'[superlink]\ndefault = "lab"\n\n[superlink.lab]\naddress = "127.0.0.1:{self.port}"\ninsecure = true\n')
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
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                    env=self.env, cwd=self.folder, start_new_session=True)
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        """What ``name`` logged so far."""
        path = self.logs.get(name)
        return path.read_text(errors="replace") if path is not None and path.exists() else ""

    def superlink(self) -> None:
        """Start the SuperLink (again, after :meth:`kill`: the same port); returns once it listens on its port."""
        before = self.log("superlink").count("Uvicorn running")
        state = ["--database", str(self.folder / "superlink.db")] if self.database else []
        proc = self.start("superlink", "flower-superlink", "--insecure", "--host", "127.0.0.1", "--port",
                          str(self.port), "--disable-runtime-dependency-installation", *state)

        def up() -> bool:
            with socket.socket() as s:
                s.settimeout(0.5)
                return (s.connect_ex(("127.0.0.1", self.port)) == 0
                        and self.log("superlink").count("Uvicorn running") > before)
        until("the SuperLink", up, self.start_timeout, proc, self.logs["superlink"])

    def supernode(self, c: int, name: str | None = None) -> str:
        """Start a SuperNode for partition-id ``c`` (named ``name``, default ``node<c>``); returns its name once
        it has registered with the SuperLink."""
        name = name or f"node{c}"
        proc = self.start(name, "flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{self.port}",
                          "--port", str(free_port()), "--node-config",
                          f"partition-id={c} num-partitions={self.clients}")
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

    def run(self, run_config: str, *, app: str | Path = APP, timeout: float = RUN_SECONDS,
            on_line: Callable[[str], None] | None = None) -> tuple[int, str, int]:
        """``flwr run <app> lab --stream --run-config <run_config>``: (its exit code, its output, the run's id).
        ``on_line`` sees each line as it comes; after ``timeout`` s the command's process group is killed and a
        FedalaError raised."""
        cmd = ["flwr", "run", str(app), "lab", "--stream", "--run-config", run_config]
        self.commands.append(" ".join(cmd[:5]) + f' --run-config "{run_config}"')
        proc = subprocess.Popen([str(self.bin / "flwr"), *cmd[1:]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=self.env, cwd=self.folder, start_new_session=True)
        lines: list[str] = []

        def read() -> None:
            for line in proc.stdout:
                lines.append(line)
                if on_line is not None:
                    on_line(line)
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


__all__ = ["APP", "LocalFederation", "alive", "descendants", "free_port", "until"]
