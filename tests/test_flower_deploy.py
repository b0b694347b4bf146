"""Flower's deployment path on this machine, as docs/flower.md gives it: a SuperLink and two SuperNodes on
127.0.0.1 (``--insecure``, free local ports; fedala_lab.flower.local), ``flwr run`` on the app, the stored run
compared with the engine's — every recorded number but wall-clock seconds, and the final global model, bit for
bit.

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

import re
import sys
import threading
from pathlib import Path

import pytest
from test_flower import assert_same, engine

import fedala_lab as fl
from fedala_lab.flower.local import LocalFederation, until
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
