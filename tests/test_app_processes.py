"""The app's runs computed side by side in worker processes (experiments/pool.py, ``--processes``): the same runs
as computed in the app's own process, bit for bit, with every round on the progress bar, Stop, and resume."""

from __future__ import annotations

import re
import threading
import types
from pathlib import Path

import pandas as pd
import pytest
from conftest import APP_SMALL
from test_app import Progress

from fedala_lab.errors import ConfigError
from fedala_lab.webapp import app_processes, ui

ALGOS = ["fedavg", "fedala", "local"]


@pytest.fixture(scope="module")
def apps(tmp_path_factory):
    """An app computing in 2 processes and one computing in its own, each with its own store."""
    side = ui.LectureApp(tmp_path_factory.mktemp("side_by_side"), processes=2)
    side.pool.start([ui.make_config(algo="fedavg", **{**APP_SMALL, "rounds": 1})])
    yield side, ui.LectureApp(tmp_path_factory.mktemp("in_process"))
    side.pool.close()


def same_run(a, b) -> None:
    """Two runs that recorded the same numbers (rounds and per-client rows), bit for bit."""
    assert a.config.key() == b.config.key()
    for name in ("rounds", "clients"):
        x, y = getattr(a, name), getattr(b, name)
        cols = [c for c in x.columns if "seconds" not in c]  # timings differ, nothing else may
        pd.testing.assert_frame_equal(x[cols].reset_index(drop=True), y[cols].reset_index(drop=True))


def test_a_click_side_by_side_equals_the_click_in_one_process(apps):
    side, alone = apps
    rec = Progress()
    *_, table, status = side.train(ALGOS, 1, **APP_SMALL, progress=rec)
    *_, table1, status1 = alone.train(ALGOS, 1, **APP_SMALL, progress=Progress())
    assert status.startswith("3 run(s) in") and status1.startswith("3 run(s) in")
    assert set(table["source"]) == {"computed"}
    for a in ALGOS:
        cfg = ui.make_config(algo=a, **APP_SMALL)
        same_run(side.store.find(cfg), alone.store.find(cfg))
    assert table["final acc % (pooled)"].tolist() == table1["final acc % (pooled)"].tolist()
    # every round of the three runs reached the progress bar, out of their 15, each named with its accuracy
    counts = [p for p, d in rec.calls if d and "round" in d and isinstance(p, tuple)]
    assert counts[-1] == (15, 15) and len(counts) == 15
    last = rec.calls[-1][1]
    for name in ("FedAvg (1/3): round 5/5", "FedALA (2/3): round 5/5", "Local (3/3): round 5/5"):
        assert name in last
    # asked again: all from the store, nothing computed
    *_, table2, status2 = side.train(ALGOS, 1, **APP_SMALL, progress=Progress())
    assert set(table2["source"]) == {"run store"} and "(3 served from the run store: " in status2


def test_stop_side_by_side_keeps_checkpoints_and_run_again_resumes(apps):
    side, alone = apps
    settings = {**APP_SMALL, "rounds": 120, "seed": 5}
    request = types.SimpleNamespace(session_hash="side-stopper")
    answers: list = []

    def stop_at_once(progress, desc):
        if desc and "round" in desc and not answers:  # Stop comes from another request, as the page's does
            answers.append(threading.Thread(target=lambda: answers.append(side.stop(request))))
            answers[0].start()

    *_, table, status = side.train(["fedavg", "fedala"], 1, **settings, request=request,
                                   progress=Progress(stop_at_once))
    answers[0].join(timeout=60)
    # both ran at once and both stopped: the line names each, the page shows both runs' rounds so far
    m = re.fullmatch(r"Stopped after round (\d+) of 120 \(FedAvg \(1/2\); checkpoint kept: Run again resumes\)\. "
                     r"No run of this job had finished before it\. FedALA \(2/2\) stopped too, after round (\d+) "
                     r"\(its checkpoint kept\)\.", status)
    assert m, status
    assert list(table["status"]) == [f"stopped at round {m[1]}", f"stopped at round {m[2]}"]
    assert answers[1] == status  # Stop answers with the job's own line
    # Run again resumes both from their checkpoints: the same runs as computed without a stop
    rec = Progress()
    *_, status2 = side.train(["fedavg", "fedala"], 1, **settings, progress=rec)
    assert status2.startswith("2 run(s) in")
    firsts = [d for _, d in rec.calls if d and "FedAvg (1/2): round" in d]
    assert firsts and not firsts[0].startswith("FedAvg (1/2): round 1/")  # resumed, not from round 1
    alone.train(["fedavg", "fedala"], 1, **settings, progress=Progress())
    for a in ("fedavg", "fedala"):
        cfg = ui.make_config(algo=a, **settings)
        same_run(side.store.find(cfg), alone.store.find(cfg))


def test_one_run_or_stored_runs_stay_in_the_apps_process(apps, monkeypatch):
    side, _ = apps

    def refuse(*args, **kwargs):
        raise AssertionError("one run was sent to the processes")

    monkeypatch.setattr(side.pool, "compute", refuse)
    rec = Progress()
    *_, status = side.train(["fedprox"], 1, **{**APP_SMALL, "seed": 9}, progress=rec)
    assert status.startswith("1 run(s) in")
    assert any("FedProx: round 5/5 · accuracy" in (d or "") for _, d in rec.calls)
    # one run left to compute, the other stored: in this process too
    *_, status = side.train(["fedprox", "fedavg"], 1, **{**APP_SMALL, "seed": 9}, progress=Progress())
    assert status.startswith("2 run(s) in") and "(1 served from the run store: " in status


@pytest.mark.parametrize("value, expected", [("1", 1), ("2", 2), (2, 2)])
def test_processes_setting(value, expected, monkeypatch):
    assert app_processes(value) == expected
    monkeypatch.delenv("FEDALA_LAB_PROCESSES", raising=False)
    assert 1 <= app_processes("auto") <= 4
    monkeypatch.setenv("FEDALA_LAB_PROCESSES", "2")  # auto: what the environment says
    assert app_processes("auto") == 2 and app_processes("1") == 1


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5", "", None, True])
def test_processes_setting_refuses_what_is_not_a_count(bad):
    with pytest.raises(ConfigError, match="processes"):
        app_processes(bad)


def test_cli_takes_processes():
    from fedala_lab.cli import build_parser

    assert build_parser().parse_args(["app"]).processes == "auto"
    assert build_parser().parse_args(["app", "--processes", "1"]).processes == "1"


def test_pool_refuses_fewer_than_two_processes(tmp_path):
    from fedala_lab.experiments.pool import RunPool

    with pytest.raises(ConfigError, match="processes"):
        RunPool(1, tmp_path)


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads process states from Linux's /proc")
def test_the_processes_end_with_the_app(tmp_path):
    """An app killed outright (SIGKILL: no exit handler runs) leaves no process of its pool behind."""
    import json
    import os
    import subprocess
    import sys
    import time

    code = (
        "import json, sys, time\n"
        "from fedala_lab.experiments.pool import RunPool\n"
        f"pool = RunPool(2, {str(tmp_path)!r})\n"
        "pool.start()\n"
        "pids = list(pool._pool._processes)\n"
        "print(json.dumps(pids), flush=True)\n"
        "time.sleep(600)\n"
    )
    app = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                           env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    pids = json.loads(app.stdout.readline())
    assert len(pids) == 2
    app.kill()
    app.wait()

    def alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 60
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in pids if alive(p)]


def test_get_or_run_many_side_by_side_equals_one_by_one(tmp_path):
    """Several runs, the missing ones computed in 2 processes: in the order asked, repeats and stored runs included,
    each the run get_or_run computes in this process, bit for bit."""
    from fedala_lab import get_or_run_many
    from fedala_lab.experiments.runs import get_or_run

    cfgs = [ui.make_config(algo=a, **{**APP_SMALL, "seed": s}) for a in ("fedavg", "fedala") for s in (3, 4)]
    get_or_run(cfgs[1], tmp_path / "side", progress=False)  # one is stored already
    got = get_or_run_many([*cfgs, cfgs[0]], tmp_path / "side", processes=2, progress=False)
    assert [r.config.key() for r in got] == [c.key() for c in [*cfgs, cfgs[0]]]
    for run, cfg in zip(got, cfgs):
        same_run(run, get_or_run(cfg, tmp_path / "alone", progress=False))
    # one process: the same runs, one after the other here
    again = get_or_run_many(cfgs, tmp_path / "one", processes=1, progress=False)
    for a, b in zip(again, got):
        same_run(a, b)
    with pytest.raises(ConfigError, match="processes"):
        get_or_run_many(cfgs, tmp_path / "x", processes=0)
