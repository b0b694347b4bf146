"""Run store: cache by config, atomic folders, resume after a kill, concurrent writers."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_frames_exact, assert_same_stored_run, small_cfg

from fedala_lab.errors import ConfigError, DataError, RunCancelled, TrainingDiverged
from fedala_lab.experiments.runs import get_or_run, load_stored, stored_runs, tracked_run
from fedala_lab.record.run import Run
from fedala_lab.record.store import RunStore

_TIMES = ["seconds", "init_seconds", "eval_seconds", "train_seconds", "aggregate_seconds"]

ROOT = Path(__file__).resolve().parents[1]


def test_get_or_run_caches_and_roundtrips(ragged, tmp_path):
    store = RunStore(tmp_path)
    cfg = small_cfg(algo="fedala", rounds=3, snapshot_clients="1")
    run = get_or_run(cfg, store, data=ragged, progress=False)
    d = store.dir_for(cfg)
    assert run.path == d and (d / "manifest.json").is_file()
    assert d.name.startswith("fedala-custom-ragged-n5-r3-s0-") and d.name.endswith(cfg.key())
    again = get_or_run(cfg, store, data=None, progress=False)  # no data needed: it is a cache hit
    assert_frames_exact(run.clients, again.clients)  # the store's files give back every bit
    assert_frames_exact(run.rounds, again.rounds)
    assert_frames_exact(run.ala, again.ala)
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
    run = get_or_run(cfg, store, data=ragged, progress=False)  # replaces the stale folder
    assert (d / "manifest.json").is_file() and run.path == d


def test_store_load_refuses_paths_outside(tmp_path):
    store = RunStore(tmp_path / "store")
    for bad in ("../x", "/etc", ".checkpoints", "a/b", ""):
        with pytest.raises(DataError):
            store.load(bad)


def test_stored_runs_lists_finished_and_stopped_runs_and_reloads_them_by_name_only(ragged, tmp_path):
    store = RunStore(tmp_path / "store")
    done = get_or_run(small_cfg(algo="fedavg", rounds=2), store, data=ragged, progress=False)
    cfg = small_cfg(algo="fedala", rounds=4)
    with pytest.raises(RunCancelled):
        get_or_run(cfg, store, data=ragged, progress=False, callback=lambda sim, row: row["round"] < 2)
    listed = stored_runs(store).set_index("name")
    assert list(listed.index) == [store.name_for(cfg), done.path.name]  # newest first
    stopped = listed.loc[store.name_for(cfg)]
    assert stopped["status"] == "stopped" and stopped["rounds_done"] == 2 and stopped["config"] == cfg
    assert listed.loc[done.path.name, "status"] == "complete" and listed.loc[done.path.name, "config"] == done.config
    partial = load_stored(store, store.name_for(cfg))
    assert partial.status == "partial" and list(partial.rounds["round"]) == [1, 2]
    assert stopped["best_acc"] == partial.summary()["best_acc"]  # in %, as for finished runs
    assert load_stored(store, done.path.name).summary() == done.summary()
    for bad in ("../" + done.path.name, "/etc/passwd", ".checkpoints", "no-such-run", str(tmp_path)):
        with pytest.raises(DataError, match="not a run name"):
            load_stored(store, bad)
    # resumed and finished, it is listed once, as finished
    get_or_run(cfg, store, data=ragged, progress=False)
    assert list(stored_runs(store)["status"]) == ["complete", "complete"]


def test_tracked_run_records_the_client_asked_for_keeping_those_stored(ragged, tmp_path):
    store = RunStore(tmp_path)
    cfg = small_cfg(algo="fedala", rounds=2, track_clients="0")
    assert get_or_run(cfg, store, data=ragged, progress=False).tracked_clients() == [0]
    widened = tracked_run(cfg, 3, store, data=ragged)  # recomputed with client 3 too, replacing the stored run
    assert widened.tracked_clients() == [0, 3] and store.find(cfg).tracked_clients() == [0, 3]
    again = tracked_run(cfg, 0, store, data=ragged, callback=lambda sim, row: pytest.fail("recomputed"))
    assert again.tracked_clients() == [0, 3]
    with pytest.raises(ConfigError, match="client=5 is not allowed: a client id from 0 to 4"):
        tracked_run(cfg, 5, store)


def test_diverged_run_is_saved_with_its_status_and_never_served_as_finished(ragged, tmp_path):
    store = RunStore(tmp_path)
    cfg = small_cfg(algo="fedavg", lr=1e20, rounds=4)
    with pytest.raises(TrainingDiverged) as first:
        get_or_run(cfg, store, data=ragged, progress=False)
    assert store.find(cfg, diverged=True).status == "diverged"
    # kept for inspection, but neither "had" nor found as a result
    assert not store.has(cfg) and store.find(cfg) is None
    assert store.status(cfg).state == "diverged"
    # asked again: the same error, with the same message, straight from the store (no recomputation)
    with pytest.raises(TrainingDiverged) as again:
        get_or_run(cfg, store, data=ragged, progress=False, callback=lambda sim, row: pytest.fail("recomputed"))
    assert str(again.value) == str(first.value)
    assert again.value.run is not None and again.value.run.status == "diverged"


SCRIPT = textwrap.dedent("""
    import sys, time, json
    sys.path.insert(0, {tests!r})
    from conftest import make_ragged_data, small_cfg
    from fedala_lab.experiments.runs import get_or_run
    cfg = small_cfg(algo="fedala", rounds=6, checkpoint_every=1, shuffle=True)
    slow = float(sys.argv[2])
    def cb(sim, row):
        print("round", row["round"], flush=True)
        time.sleep(slow)
    run = get_or_run(cfg, sys.argv[1], data=make_ragged_data(), progress=False, callback=cb)
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
    resumed = get_or_run(cfg, store, data=ragged, progress=False,
                         callback=lambda sim, row: rounds_seen.append(row["round"]))
    assert rounds_seen[0] >= 4  # it continued, it did not start over
    fresh_store = RunStore(tmp_path / "fresh")
    fresh = get_or_run(cfg, fresh_store, data=ragged, progress=False)
    assert_same_stored_run(fresh, resumed, fresh_store, store)  # records, final models and W, bit for bit


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


def _damage(folder, how):
    if how == "clients.csv missing":
        (folder / "clients.csv").unlink()
    elif how == "arrays.npz truncated":
        b = (folder / "arrays.npz").read_bytes()
        (folder / "arrays.npz").write_bytes(b[: len(b) // 2])
    elif how == "config.json corrupt":
        (folder / "config.json").write_text("{not json")
    elif how == "rounds.csv changed, same size":
        t = (folder / "rounds.csv").read_text()
        i = next(i for i, ch in enumerate(t) if ch.isdigit() and ch != "9" and i > t.index("\n"))
        (folder / "rounds.csv").write_text(t[:i] + str(int(t[i]) + 1) + t[i + 1:])
    elif how == "manifest.json corrupt":
        (folder / "manifest.json").write_text("{")


@pytest.mark.parametrize("how", ["clients.csv missing", "arrays.npz truncated", "config.json corrupt",
                                 "rounds.csv changed, same size", "manifest.json corrupt"])
def test_a_damaged_run_folder_is_reported_and_replaced(how, ragged, tmp_path):
    store = RunStore(tmp_path)
    cfg = small_cfg(algo="fedavg", rounds=2)
    first = get_or_run(cfg, store, data=ragged, progress=False)
    _damage(first.path, how)
    with pytest.warns(UserWarning, match="damaged"):
        assert store.find(cfg) is None  # never served as a finished run
    with pytest.warns(UserWarning, match="damaged"):
        again = get_or_run(cfg, store, data=ragged, progress=False)  # recomputed, and the folder replaced
    assert again.path == first.path and store.has(cfg)
    fresh = store.find(cfg)
    assert_frames_exact(fresh.rounds.drop(columns=_TIMES), first.rounds.drop(columns=_TIMES))


def test_leftovers_of_dead_writers_are_swept(ragged, tmp_path):
    import subprocess

    from fedala_lab.record import store as store_mod

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs
    host = store_mod._HOST
    stale = tmp_path / f".tmp-fedavg-x-{os.urandom(2).hex()}.{host}.{dead.pid}.abcd1234"
    alive = tmp_path / f".tmp-fedavg-y.{host}.{os.getpid()}.abcd1234"
    foreign = tmp_path / f".tmp-fedavg-z.otherhost.{dead.pid}.abcd1234"
    for d in (stale, alive, foreign):
        d.mkdir()
        (d / "clients.csv").write_text("half written")
    (tmp_path / ".checkpoints").mkdir()
    torn = tmp_path / ".checkpoints" / f".fedavg-x.pt.{dead.pid}.tmp"
    torn.write_bytes(b"torn")
    store = RunStore(tmp_path)
    get_or_run(small_cfg(algo="fedavg", rounds=1), store, data=ragged, progress=False)
    assert not stale.exists() and not torn.exists()
    assert alive.exists()  # a writer still at work
    assert foreign.exists()  # another machine's: swept only when a day old
    os.utime(foreign, (0, 0))
    store.sweep()
    assert not foreign.exists()


def test_manifests_of_older_versions_still_load(ragged, tmp_path):
    import json

    store = RunStore(tmp_path)
    cfg = small_cfg(algo="fedavg", rounds=1)
    run = get_or_run(cfg, store, data=ragged, progress=False)
    man = json.loads((run.path / "manifest.json").read_text())
    man["files"] = list(man["files"])  # names only, as before sizes and hashes were recorded
    (run.path / "manifest.json").write_text(json.dumps(man))
    assert store.has(cfg) and store.find(cfg) is not None


def test_train_loss_is_recording_only_and_asked_for_with_needs(ragged, tmp_path):
    """record_train_loss changes no result: one key, one folder; Fig. 5 asks for it through needs=."""
    from fedala_lab.experiments.runs import has_train_loss

    store = RunStore(tmp_path)
    cfg = small_cfg(algo="fedavg", rounds=2, record_train_loss=False)
    plain = get_or_run(cfg, store, data=ragged, progress=False)
    assert not has_train_loss(plain) and plain.rounds["trained_loss"].isna().all()
    with_loss = cfg.replace(record_train_loss=True)
    assert store.dir_for(with_loss) == plain.path and store.find(with_loss) is not None
    again = get_or_run(with_loss, store, data=ragged, progress=False, needs=has_train_loss)  # recomputed
    assert has_train_loss(again) and again.path == plain.path and has_train_loss(store.find(cfg))
    cols = ["round", "acc", "test_loss", "train_loss", "best_acc"]
    assert_frames_exact(plain.rounds[cols], again.rounds[cols])
