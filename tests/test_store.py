"""Run store: cache by config, atomic folders, resume after a kill, concurrent writers."""

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import small_cfg

from fedala_lab.errors import DataError, TrainingDiverged
from fedala_lab.record.run import Run
from fedala_lab.record.store import RunStore

ROOT = Path(__file__).resolve().parents[1]


def test_get_or_run_caches_and_roundtrips(ragged, tmp_path):
    store = RunStore(tmp_path)
    cfg = small_cfg(algo="fedala", rounds=3, snapshot_clients="1")
    run = store.get_or_run(cfg, data=ragged, progress=False)
    d = store.dir_for(cfg)
    assert run.path == d and (d / "manifest.json").is_file()
    assert d.name.startswith("fedala-digits-dir0.1-n5-r3-s0-") and d.name.endswith(cfg.key())
    again = store.get_or_run(cfg, data=None, progress=False)  # no data needed: it is a cache hit
    pd.testing.assert_frame_equal(run.clients, again.clients)
    pd.testing.assert_frame_equal(run.rounds, again.rounds)
    pd.testing.assert_frame_equal(run.ala, again.ala)
    assert again.config == cfg and again.summary() == run.summary()
    for k, v in run.arrays.items():
        np.testing.assert_array_equal(v, again.arrays[k])
    assert list(store.list()["name"]) == [d.name]
    assert not list((tmp_path / ".checkpoints").glob("*.pt"))


def test_folder_without_manifest_is_not_a_run(ragged, tmp_path):
    store = RunStore(tmp_path)
    cfg = small_cfg(algo="fedavg", rounds=1)
    d = store.dir_for(cfg)
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(cfg.to_dict()))  # half-written
    assert store.find(cfg) is None
    with pytest.raises(DataError, match="not a finished run"):
        Run.load(d)
    run = store.get_or_run(cfg, data=ragged, progress=False)  # replaces the stale folder
    assert (d / "manifest.json").is_file() and run.path == d


def test_store_load_refuses_paths_outside(tmp_path):
    store = RunStore(tmp_path / "store")
    for bad in ("../x", "/etc", ".checkpoints", "a/b", ""):
        with pytest.raises(DataError):
            store.load(bad)


def test_diverged_run_is_saved_with_its_status(ragged, tmp_path):
    store = RunStore(tmp_path)
    cfg = small_cfg(algo="fedavg", lr=1e20, rounds=4)
    with pytest.raises(TrainingDiverged):
        store.get_or_run(cfg, data=ragged, progress=False)
    assert store.find(cfg).status == "diverged"


SCRIPT = textwrap.dedent("""
    import sys, time, json
    sys.path.insert(0, {tests!r})
    from conftest import make_ragged_data, small_cfg
    from fedala_lab.record.store import RunStore
    cfg = small_cfg(algo="fedala", rounds=6, checkpoint_every=1, shuffle=True)
    slow = float(sys.argv[2])
    def cb(sim, row):
        print("round", row["round"], flush=True)
        time.sleep(slow)
    run = RunStore(sys.argv[1]).get_or_run(cfg, data=make_ragged_data(), progress=False, callback=cb)
    print("DONE", json.dumps(run.summary()), flush=True)
""")


def _spawn(tmp_path, store, slow):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT.format(tests=str(ROOT / "tests")))
    return subprocess.Popen([sys.executable, str(script), str(store), str(slow)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)


def test_killed_run_resumes_to_the_same_result(ragged, tmp_path):
    store_dir = tmp_path / "store"
    proc = _spawn(tmp_path, store_dir, slow=0.5)
    for line in proc.stdout:  # wait until round 3 is done (and checkpointed), then kill hard
        if line.startswith("round 3"):
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=60)
    store = RunStore(store_dir)
    cfg = small_cfg(algo="fedala", rounds=6, checkpoint_every=1, shuffle=True)
    assert store.find(cfg) is None and store.checkpoint_for(cfg).is_file()
    rounds_seen = []
    resumed = store.get_or_run(cfg, data=ragged, progress=False,
                               callback=lambda sim, row: rounds_seen.append(row["round"]))
    assert rounds_seen[0] >= 4  # it continued, it did not start over
    fresh = RunStore(tmp_path / "fresh").get_or_run(cfg, data=ragged, progress=False)
    pd.testing.assert_frame_equal(fresh.clients.drop(columns="seconds"), resumed.clients.drop(columns="seconds"))
    pd.testing.assert_frame_equal(fresh.ala, resumed.ala)


def test_two_processes_same_config_do_not_corrupt(tmp_path):
    store_dir = tmp_path / "store"
    a, b = _spawn(tmp_path, store_dir, slow=0.05), _spawn(tmp_path, store_dir, slow=0.05)
    out_a, err_a = a.communicate(timeout=120)
    out_b, err_b = b.communicate(timeout=120)
    assert a.returncode == 0 and b.returncode == 0, err_a + err_b
    sa = json.loads(out_a.strip().splitlines()[-1].split(" ", 1)[1])
    sb = json.loads(out_b.strip().splitlines()[-1].split(" ", 1)[1])
    assert sa == sb
    runs = [p for p in store_dir.iterdir() if not p.name.startswith(".")]
    assert len(runs) == 1 and (runs[0] / "manifest.json").is_file()
    # exactly one of them simulated; the other waited on the lock and loaded the finished run
    assert sorted(["round 1" in out_a, "round 1" in out_b]) == [False, True]
    assert not [p for p in store_dir.iterdir() if p.name.startswith(".tmp-")]
    Run.load(runs[0])
