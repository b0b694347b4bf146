"""Experiment trackers (experiments/trackers.py) with the real packages, read back with their own readers:
TensorBoard's EventAccumulator and MLflow's client on a SQLite store. A run computed now is logged as it
goes; its final log equals the replay of the stored run (also when it resumed or branched); every run is
logged once per tracker, from a sweep's worker processes too."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest

from fedala_lab.cli import main
from fedala_lab.errors import ConfigError, FedalaError, RunCancelled, TrainingDiverged
from fedala_lab.experiments.plans import SweepSpec
from fedala_lab.experiments.presets import preset
from fedala_lab.experiments.runs import RunCache, get_or_run
from fedala_lab.experiments.sweeps import run_sweep
from fedala_lab.experiments.trackers import (
    ClientRounds,
    MLflow,
    TensorBoard,
    hyper_parameters,
    log_run,
    parse_tracker,
)
from fedala_lab.record.store import RunStore

pytest.importorskip("tensorboard")
pytest.importorskip("mlflow")
# MLflow's own database layer, not ours
pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")

# FedALA on the 8×8 digits, 4 clients, 3 rounds: ALA's start phase in round 2, a second of compute
TINY = {"algo": "fedala", "rounds": 3, "num_clients": 4}


def tiny(**kw):
    return preset("teach-digits", **{**TINY, **kw})


@pytest.fixture(scope="module")
def mlflow_dir(tmp_path_factory):
    """One SQLite store for the module (creating one takes seconds); tests keep apart by experiment."""
    return tmp_path_factory.mktemp("mlflow")


def trackers(tmp_path, mlflow_dir, label, clients="all"):
    return [TensorBoard(tmp_path / f"tb-{label}", clients=clients),
            MLflow(mlflow_dir, clients=clients, experiment=f"{tmp_path.name}-{label}")]


def tb_content(folder) -> dict:
    """What TensorBoard reads back from a run's folder: {tag: [(step, value)]}, its hyper-parameters and the
    HParams status."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    scalars = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    hp, status = {}, None
    for content in acc.PluginTagToContent("hparams").values():
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        if data.HasField("session_start_info"):
            hp = {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind"))
                  for k, v in data.session_start_info.hparams.items()}
        if data.HasField("session_end_info"):
            status = data.session_end_info.status
    return {"scalars": scalars, "hparams": hp, "status": status}


def ml_content(tracker: MLflow, name: str) -> dict:
    """What MLflow's client reads back of the run ``name``: metric histories, params, status, our tags."""
    [run] = tracker.runs(name.rsplit("-", 1)[1])  # the name ends with the config's key
    client, _ = tracker.client()
    metrics = {k: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, k))
               for k in run.data.metrics}
    tags = {k: v for k, v in run.data.tags.items() if k.startswith("fedala_lab.")}
    return {"metrics": metrics, "params": run.data.params, "status": run.info.status, "tags": tags,
            "name": run.info.run_name}


def both(trk, name) -> tuple[dict, dict]:
    tb, ml = trk
    return tb_content(tb.directory / name), ml_content(ml, name)


def test_a_computed_run_is_logged_as_it_goes_and_equals_its_replay(tmp_path, mlflow_dir):
    store = RunStore(tmp_path / "runs")
    cfg = tiny()
    live = trackers(tmp_path, mlflow_dir, "live")
    name = store.name_for(cfg)
    seen = []  # the user's callback: called for the rounds simulated now, never for a stored run
    logged_by_then = []  # the rounds each tracker had when the user's callback of a round ran

    def cb(sim, row):
        seen.append(row["round"])
        logged_by_then.append((len(tb_content(live[0].directory / name)["scalars"]["acc"]),
                               len(ml_content(live[1], name)["metrics"]["acc"])))

    run = get_or_run(cfg, store, progress=False, callback=cb, trackers=live)
    assert seen == [1, 2, 3]
    assert logged_by_then == [(1, 1), (2, 2), (3, 3)]  # as it goes
    tb, ml = both(live, name)

    # the content is the run's: every round column, exactly in MLflow (float64), as float32 in TensorBoard
    for col in run.rounds.columns.drop("round"):
        want = [(int(t), float(v)) for t, v in zip(run.rounds["round"], run.rounds[col]) if math.isfinite(v)]
        assert ml["metrics"][col] == want, col
        assert tb["scalars"][col] == [(t, float(np.float32(v))) for t, v in want], col
    assert ml["metrics"]["acc"][-1][1] == pytest.approx(run.final_acc) and run.final_acc > 1  # percent
    c1 = run.clients[run.clients["client"] == 1]
    assert ml["metrics"]["client_1/test_acc"] == list(zip(c1["round"].tolist(), c1["test_acc"].tolist()))
    passes = run.ala.groupby(["round", "client"]).size()
    assert ml["metrics"]["ala_passes"] == [(int(t), float(n)) for t, n in passes.groupby(level="round").mean().items()]
    assert ml["metrics"]["client_2/ala_passes"] == [(int(t), float(n)) for (t, c), n in passes.items() if c == 2]
    assert passes.loc[2].min() > 1  # the start phase: several passes (a real count, not a constant)
    # the config as hyper-parameters, the store's folder name as the run's name, its status
    hp = hyper_parameters(cfg)
    assert ml["name"] == name and ml["status"] == "FINISHED" and ml["tags"]["fedala_lab.key"] == cfg.key()
    assert ml["params"]["algo"] == "fedala" and ml["params"]["data.num_clients"] == "4"
    assert set(ml["params"]) == set(hp)
    assert tb["hparams"]["algo"] == "fedala" and tb["hparams"]["data.num_clients"] == 4
    assert set(tb["hparams"]) == set(hp) and tb["hparams"]["local_steps"] == "null"

    # the stored run, asked for again: nothing new in these trackers, the user's callback not called
    again = get_or_run(cfg, store, progress=False, callback=cb, trackers=live)
    assert seen == [1, 2, 3] and again.path == run.path
    assert both(live, name) == (tb, ml)
    assert len(list((live[0].directory / name).glob("events.out.tfevents.*"))) == 1

    # asked for with other trackers: logged from its records (a replay), the same content
    replay = trackers(tmp_path, mlflow_dir, "replay")
    get_or_run(cfg, store, progress=False, trackers=replay)
    rtb, rml = both(replay, name)
    assert rtb == tb
    assert rml == ml


def test_stopped_resumed_and_branched_runs_are_logged_whole(tmp_path, mlflow_dir):
    store = RunStore(tmp_path / "runs")
    cfg = tiny()
    name = store.name_for(cfg)
    live = trackers(tmp_path, mlflow_dir, "live")
    with pytest.raises(RunCancelled):
        get_or_run(cfg, store, progress=False, callback=lambda sim, row: row["round"] < 2, trackers=live)
    # a log cut short: not marked whole (MLflow: KILLED), and replaced when the run is finished
    assert ml_content(live[1], name)["status"] == "KILLED"
    assert not (live[0].directory / name / TensorBoard.DONE).exists()
    resumed = []
    get_or_run(cfg, store, progress=False, callback=lambda sim, row: resumed.append(row["round"]), trackers=live)
    assert resumed == [3]  # from the checkpoint: round 3 only was simulated, rounds 1-2 came with it
    replay = trackers(tmp_path, mlflow_dir, "replay")
    log_run(store.find(cfg), replay, store)
    assert both(live, name) == both(replay, name)
    assert ml_content(live[1], name)["metrics"]["acc"][0][0] == 1

    # five rounds of the same config: branched from the stored three, rounds 4-5 simulated, 1-5 logged
    longer = cfg.replace(rounds=5)
    branched = []
    get_or_run(longer, store, progress=False, callback=lambda sim, row: branched.append(row["round"]), trackers=live)
    assert branched == [4, 5]
    long_name = store.name_for(longer)
    log_run(store.find(longer), replay, store)
    tb, ml = both(live, long_name)
    assert (tb, ml) == both(replay, long_name)
    assert [t for t, _ in ml["metrics"]["acc"]] == [1, 2, 3, 4, 5]


def test_a_diverged_run_is_logged_with_its_status(tmp_path, mlflow_dir):
    store = RunStore(tmp_path / "runs")
    cfg = tiny(algo="fedavg", lr=1e20, rounds=4)
    live = trackers(tmp_path, mlflow_dir, "live")
    with pytest.raises(TrainingDiverged) as err:
        get_or_run(cfg, store, progress=False, trackers=live)
    run = err.value.run
    ml = ml_content(live[1], store.name_for(cfg))
    assert ml["status"] == "FAILED" and ml["tags"]["fedala_lab.status"] == "diverged"
    assert [t for t, _ in ml["metrics"].get("acc", [])] == run.rounds["round"].tolist()
    tb = tb_content(live[0].directory / store.name_for(cfg))
    assert tb["status"] == 2  # STATUS_FAILURE
    # asked again: the stored diverged run, replayed into other trackers
    replay = trackers(tmp_path, mlflow_dir, "replay")
    with pytest.raises(TrainingDiverged):
        get_or_run(cfg, store, progress=False, trackers=replay)
    assert ml_content(replay[1], store.name_for(cfg)) == ml


def test_client_rounds_are_chosen(tmp_path, mlflow_dir):
    pick = ClientRounds.parse("every:2,last,1")
    assert [t for t in range(1, 8) if pick(t, 7)] == [1, 2, 4, 6, 7]
    assert not any(ClientRounds.parse("none")(t, 3) for t in (1, 2, 3))
    for bad in ("", "every:0", "0", "sometimes", "none,last", 3):
        with pytest.raises(ConfigError, match="tracker_clients="):
            ClientRounds.parse(bad)
    store = RunStore(tmp_path / "runs")
    cfg = tiny(rounds=4)
    tb = TensorBoard(tmp_path / "tb", clients="every:3,last")
    get_or_run(cfg, store, progress=False, trackers=[tb])
    scalars = tb_content(tb.directory / store.name_for(cfg))["scalars"]
    assert [t for t, _ in scalars["client_0/test_acc"]] == [3, 4]
    assert [t for t, _ in scalars["acc"]] == [1, 2, 3, 4]

    # asked again with more client rounds: a log is written once, and the missing rounds are named
    ml = MLflow(mlflow_dir, clients="last", experiment=f"{tmp_path.name}-again")
    get_or_run(cfg, store, progress=False, trackers=[ml])
    for more in (TensorBoard(tmp_path / "tb", clients="all"), MLflow(mlflow_dir, clients="all",
                                                                    experiment=f"{tmp_path.name}-again")):
        with pytest.warns(UserWarning, match=r"logged already, .* adds nothing to it \(rounds 1, 2(, 3)? missing\)"):
            get_or_run(cfg, store, progress=False, trackers=[more])
    assert tb_content(tb.directory / store.name_for(cfg))["scalars"] == scalars  # unchanged
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # asking for what is logged says nothing
        get_or_run(cfg, store, progress=False, trackers=[TensorBoard(tmp_path / "tb", clients="last")])


def test_run_cache_logs_every_run_it_hands_out(tmp_path, mlflow_dir):
    """The figures' path: a RunCache with trackers logs computed runs and runs from its memo alike."""
    cfg = tiny(rounds=2)
    tb = TensorBoard(tmp_path / "tb")
    cache = RunCache(tmp_path / "runs", trackers=[tb])
    cache.get_or_run(cfg, progress=False)
    name = cache.store.name_for(cfg)
    first = tb_content(tb.directory / name)
    other = TensorBoard(tmp_path / "tb2")
    cache.get_or_run(cfg, progress=False, trackers=[other])  # from the memo: replayed into the new one
    assert cache.computed == 1
    assert tb_content(other.directory / name)["scalars"] == first["scalars"]
    assert len(list((tb.directory / name).glob("events.out.tfevents.*"))) == 1


def test_sweep_pool_logs_each_run_once(tmp_path, mlflow_dir):
    """Runs computed in a process pool's workers are logged there; the one stored before the sweep is
    logged from the store; each once, under the store's name."""
    store = RunStore(tmp_path / "runs")
    spec = SweepSpec(tiny(rounds=2), {"algo": ["fedavg", "fedala"], "seed": [0, 1]}, name="tracked")
    pairs = spec.expand()
    get_or_run(pairs[0][1], store, progress=False)  # stored already: not recomputed, logged from the store
    trk = trackers(tmp_path, mlflow_dir, "sweep", clients="last")
    result = run_sweep(spec, store=store, workers=2, progress=False, trackers=trk)
    assert result.computed == 3 and not result.failed
    names = sorted(store.name_for(c) for _, c in pairs)
    client, eid = trk[1].client()
    runs = client.search_runs([eid])
    assert sorted(r.info.run_name for r in runs) == names and {r.info.status for r in runs} == {"FINISHED"}
    assert sorted(p.name for p in trk[0].directory.iterdir()) == names
    for run in result.complete_runs():
        name = store.name_for(run.config)
        ml = ml_content(trk[1], name)
        assert ml["metrics"]["acc"] == list(zip(run.rounds["round"].tolist(), run.rounds["acc"].tolist()))
        assert len(list((trk[0].directory / name).glob("events.out.tfevents.*"))) == 1
    again = run_sweep(spec, store=store, workers=2, progress=False, trackers=trk)  # all stored, all logged
    assert again.computed == 0 and len(client.search_runs([eid])) == 4


def test_cli_tracker_flags(tmp_path, mlflow_dir, capsys):
    tb, ml = tmp_path / "tb", tmp_path / "ml"
    args = ["run", "--preset", "teach-digits", "--algos", "fedavg,fedala", "--rounds", "2", "--clients", "4",
            "--store", str(tmp_path / "runs"), "--no-progress", "--json",
            "--tracker", f"tensorboard={tb}", "--tracker", f"mlflow={ml}", "--tracker-clients", "none"]
    assert main(args) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    names = sorted(r["run_dir"].rsplit("/", 1)[-1] for r in rows)
    assert sorted(p.name for p in tb.iterdir()) == names
    mlt = MLflow(ml)
    assert sorted(r.info.run_name for r in mlt.client()[0].search_runs([mlt.client()[1]])) == names
    assert not any(k.startswith("client_") for k in tb_content(tb / names[0])["scalars"])
    for bad, field in ((["--tracker", "wandb=x"], "tracker="), (["--tracker", "mlflow"], "tracker="),
                       (["--tracker", f"tensorboard={tb}", "--tracker-clients", "every:0"], "tracker_clients=")):
        assert main(args[:-6] + bad) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and field in err, err


def test_a_missing_package_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed
    with pytest.raises(FedalaError, match=r"pip install 'fedala_lab\[mlflow\]'"):
        parse_tracker(f"mlflow={tmp_path}")
    assert main(["run", "--preset", "teach-digits", "--rounds", "1", "--tracker", f"mlflow={tmp_path}"]) == 2
    assert "pip install 'fedala_lab[mlflow]'" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="a folder, not a file"):
        TensorBoard(tmp_path / "file")
