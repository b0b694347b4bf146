"""Flower's deployment path on this machine, as docs/flower.md gives it: a SuperLink and two SuperNodes on
127.0.0.1 (free local ports; fedala_lab.flower.local), ``flwr run`` on the app, the stored run compared with the
engine's — every recorded number but wall-clock seconds, and the final global model, bit for bit.

The secured federation (``TestSecured``, first, its federation stopped before the other starts): TLS with
certificates made at first use and SuperNode authentication. Its run equals the engine's; a SuperNode whose key
was not registered is refused, and so are a SuperNode and ``flwr`` without the root certificate (and Python's
own TLS client); no private key is readable by others, and none of their material is in any log or output.

A lost node is ``kill -9`` of a SuperNode (its process group and the processes under it) while it serves a
round: with ``rejoin=0`` the run stops naming the client and the round (``flwr run`` exits 0 in Flower 1.42:
the failure is its log's "FAILED" line and the run's status) and ``flwr run`` again, with a new SuperNode for
that partition, continues from the checkpoint; with ``rejoin`` the round's order goes to a SuperNode started
for the same partition and the run finishes. Both finished runs equal the engine's.

Every process is stopped by its process group in a ``finally`` (the fixture's), every wait has a deadline,
and Flower's home (``FLWR_HOME``) and ``HOME`` are temporary folders. A SuperNode starts a Python process per
message (torch imported, the data built), so a round takes seconds, and Flower notices a lost node only after
two missed heartbeats (the federation here beats every 10 s, so ≈ 20 s; Flower's default would be ≈ 60 s):
``slow``.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_flower import assert_same, engine

import fedala_lab as fl
from fedala_lab.errors import FedalaError
from fedala_lab.flower.local import LocalFederation, free_port, until
from fedala_lab.record.store import RunStore

pytestmark = pytest.mark.slow
flwr = pytest.importorskip("flwr", reason="fedala_lab[flower] not installed")

if not (Path(sys.executable).parent / "flower-superlink").exists():
    pytest.skip("Flower's commands are not installed beside this Python", allow_module_level=True)

RUN = 600.0  # seconds for one flwr run here, at most


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    # heartbeats every 10 s (the SuperLink's minimum; Flower's own is 30): a killed node is noticed in ≈ 20 s
    with LocalFederation(tmp_path_factory.mktemp("federation"), clients=2, heartbeat=10) as fed:
        yield fed


def assert_stored_equals_engine(store: RunStore, cfg, out: str):
    """The run ``flwr run`` stored equals the engine's: every recorded number but seconds, the tables' rows,
    the arrays, and the final global model kept with it (state.pt)."""
    sim, run = engine(cfg)
    got = store.find(cfg)
    assert got is not None, out[-3000:]
    assert_same(run, got, sim.global_params, store.load_state(got.path, cfg.rounds)["global"])
    assert got.meta["engine"] == "flower" and not store.checkpoints()


def config(algo: str, rounds: int, store, **app) -> tuple[fl.RunConfig, str]:
    """The RunConfig and the --run-config of a teach-digits run on the two SuperNodes."""
    cfg = fl.preset("teach-digits", algo=algo, rounds=rounds, num_clients=2, backend="loop")
    keys = {"preset": "'teach-digits'", "algo": f"'{algo}'", "rounds": rounds,
            "set": "'num_clients=2 backend=loop'", "store": f"'{store}'", "join": 60, **app}
    return cfg, " ".join(f"{k}={v}" for k, v in keys.items())


class TestSecured:
    """One secured federation (TLS, SuperNode authentication, 2 SuperNodes) for every check of this class."""

    @pytest.fixture(scope="class")
    @classmethod
    def fed(cls, tmp_path_factory):
        with LocalFederation(tmp_path_factory.mktemp("secured"), clients=2, tls=True, authenticate=True) as fed:
            yield fed

    @pytest.fixture(scope="class")
    @classmethod
    def printed(cls) -> list[str]:
        """What flwr printed in these tests, searched for secrets at the end."""
        return []

    def test_the_secured_federation_gives_the_engines_run(self, fed, printed, tmp_path):
        assert any("--enable-supernode-auth" in c and "--ssl-certfile" in c for c in fed.commands)
        assert "--insecure" not in " ".join(fed.commands)
        assert "Uvicorn running on https://127.0.0.1" in fed.log("superlink")
        store = RunStore(tmp_path / "runs")
        cfg, rc = config("fedala", 2, store.root)
        code, out, run_id = fed.run(rc, timeout=RUN)
        printed.append(out)
        assert code == 0 and fed.status(run_id)["status"] == "finished:completed", out[-3000:]
        assert_stored_equals_engine(store, cfg, out)

    def test_a_supernode_with_an_unregistered_key_is_refused(self, fed, printed):
        with pytest.raises(FedalaError, match=r"SuperNode stranger: the process ended \(exit \d+\)(.|\n)*Failed to "
                                              r"activate SuperNode"):
            fed.supernode(1, "stranger", register=False)
        assert "No SuperNode found with the given public key" in fed.log("superlink")
        listed = fed.flwr("supernode", "list", "lab", "--format", "json")
        printed.append(listed.stdout + listed.stderr)
        nodes = json.loads(listed.stdout)["nodes"]
        assert {int(n["node-id"]) for n in nodes} == {fed.registered["node0"], fed.registered["node1"]}

    def test_a_client_without_the_root_certificate_cannot_connect(self, fed, printed, tmp_path):
        # Python's TLS client: refused with the system's roots, connected with the federation's CA
        with pytest.raises(ssl.SSLCertVerificationError), socket.create_connection(("127.0.0.1", fed.port), 10) as s:
            ssl.create_default_context().wrap_socket(s, server_hostname="127.0.0.1")
        with socket.create_connection(("127.0.0.1", fed.port), 10) as s, ssl.create_default_context(
                cafile=fed.certificates.ca).wrap_socket(s, server_hostname="127.0.0.1") as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
        # flwr: a connection without root-certificates (the system's roots), or without TLS
        for trust in ("", "insecure = true\n"):
            home = tmp_path / f"home{len(trust)}"
            home.mkdir()
            (home / "config.toml").write_text(f'[superlink]\ndefault = "x"\n[superlink.x]\n'
                                              f'address = "127.0.0.1:{fed.port}"\n{trust}')
            res = subprocess.run([str(fed.bin / "flwr"), "supernode", "list", "x"], capture_output=True, text=True,
                                 env={**fed.env, "FLWR_HOME": str(home)}, timeout=120, check=False)
            printed.append(res.stdout + res.stderr)
            assert res.returncode != 0 and "Connection to the SuperLink is unavailable" in res.stdout + res.stderr
        # a SuperNode with a registered key but no root certificate: it cannot verify the SuperLink
        fed.register("no-ca")
        proc = fed.start("no-ca", "flower-supernode", "--auth-supernode-private-key", str(fed.folder / "keys/no-ca"),
                         "--superlink", f"127.0.0.1:{fed.port}", "--port", str(free_port()),
                         "--node-config", "partition-id=1 num-partitions=2")
        try:
            assert proc.wait(timeout=fed.start_timeout) != 0
        finally:
            fed.kill("no-ca")
        assert "CERTIFICATE_VERIFY_FAILED" in fed.log("no-ca") and "SuperNode ID:" not in fed.log("no-ca")

    def test_nothing_secret_is_logged_or_readable_by_others(self, fed, printed):
        keys = sorted([fed.certificates.key, fed.folder / "tls" / "ca.key",
                       *(p for p in (fed.folder / "keys").iterdir() if p.suffix != ".pub")])
        assert len(keys) == 2 + 4  # node0, node1, stranger, no-ca
        for path in fed.folder.rglob("*"):
            if path.is_file() and b"PRIVATE KEY" in path.read_bytes():
                assert path in keys, path
            if path in keys:
                assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert stat.S_IMODE((fed.folder / "keys").stat().st_mode) == 0o700
        texts = [*(fed.log(name) for name in fed.logs), *printed]
        assert texts and "Push replies" in fed.log("superlink")  # the run's messages were logged
        for key in keys:
            body = [line for line in key.read_text().splitlines() if line and "PRIVATE KEY" not in line]
            assert len(body) >= 3
            for text in texts:
                assert not any(line in text for line in body), key


def kill_in_round(fed: LocalFederation, name: str, t: int, then=None) -> threading.Event:
    """kill -9 SuperNode ``name`` once it receives round ``t``'s order (what it logged before does not count),
    then ``then()``; the event is set when done."""
    seen, done = len(fed.log(name)), threading.Event()

    def watch():
        until(f"{name} receiving round {t}", lambda: f"ROUND {t}]" in fed.log(name)[seen:], RUN)
        fed.kill(name)
        if then is not None:
            then()
        done.set()
    threading.Thread(target=watch, daemon=True).start()
    return done


def test_a_lost_supernode_stops_the_run_naming_it_and_flwr_run_continues_it_to_the_engines_run(federation, tmp_path):
    fed = federation
    store = RunStore(tmp_path / "runs")
    cfg, rc = config("fedavg", 2, store.root, rejoin=0)
    killed = kill_in_round(fed, "node1", 2)
    code, out, run_id = fed.run(rc, timeout=RUN)
    assert killed.is_set(), out[-3000:]
    # flwr run exits 0 whatever the ServerApp did (Flower 1.42): its log's FAILED line and the run's status say
    # the run failed, naming the client and the round, and what is kept
    assert code == 0
    failed = re.search(r"fedala_lab: the run FAILED: (round 2: client 1 \(partition-id=1\): its SuperNode \d+ was "
                       r"lost \(Node Unavailable[^\n]*)", out)
    assert failed, out[-3000:]
    assert "Rounds 1–1 are kept" in failed.group(1) and "client -1" not in out
    st = fed.status(run_id)
    assert st["status"] == "finished:failed" and "round 2: client 1 (partition-id=1)" in st["status-details"]
    assert list(store.checkpoints()) == [store.name_for(cfg)]  # the stored part: a stopped run, resumable
    # a new SuperNode for partition 1, and flwr run again: it continues from round 2
    fed.supernode(1, "node1b")
    code, out, run_id = fed.run(rc, timeout=RUN)
    assert code == 0 and "continuing fedavg from its checkpoint after round 1 of 2" in out, out[-3000:]
    assert fed.status(run_id)["status"] == "finished:completed"
    assert_stored_equals_engine(store, cfg, out)


def test_a_lost_supernode_costs_a_round_when_one_replaces_it_in_time(federation, tmp_path):
    fed = federation
    store = RunStore(tmp_path / "runs")
    cfg, rc = config("fedala", 3, store.root, rejoin=180)
    node = next(n for n in ("node1b", "node1") if n in fed.procs)
    kill_in_round(fed, node, 2, then=lambda: fed.supernode(1, "node1c"))
    code, out, run_id = fed.run(rc, timeout=RUN)
    assert code == 0 and "fedala_lab: the run FAILED" not in out, out[-3000:]
    assert re.search(r"round 2: client 1 is served again, by SuperNode \d+: its order sent again", out), out[-3000:]
    assert fed.status(run_id)["status"] == "finished:completed"
    assert_stored_equals_engine(store, cfg, out)
