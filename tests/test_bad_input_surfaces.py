"""Bad input on the newer surfaces: experiment trackers, plugins, the pool of processes, the app's host and Runs
tab, settings beyond float32, a model that is one layer. Each case ends with one clear message naming the problem
(library: a FedalaError; command line: one line, exit 2; app: a visible error), loses no finished work and leaves
nothing half-written — or works, where the input is legitimate. Rows are tables as in test_bad_input.py; runs
are a round or two on the 8×8 digits."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import gradio as gr
import pytest
import torch
from test_bad_input import _cli, rows
from test_bad_input_open import _separable

import fedala_lab as fl
from fedala_lab.algorithms import registry
from fedala_lab.algorithms.plugins import load_plugins
from fedala_lab.errors import ConfigError, HookError, SplitFailed
from fedala_lab.experiments import pool as pool_mod
from fedala_lab.experiments import runs as runs_mod
from fedala_lab.experiments.execute import get_or_run_many
from fedala_lab.experiments.pool import processes_setting
from fedala_lab.experiments.presets import preset
from fedala_lab.experiments.runs import get_or_run
from fedala_lab.record.store import RunStore

REPO = Path(__file__).resolve().parents[1]


def tiny(**kw):
    """Two rounds of FedAvg on the 8×8 digits, 4 clients: a second of compute."""
    return preset("teach-digits", **{"algo": "fedavg", "rounds": 2, "num_clients": 4, **kw})


def _one_line(rc, err, pattern):
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert re.search(pattern, err), err


def _subprocess(args: list[str], cwd: Path, env: dict | None = None):
    """The command line as its console script runs it: ``-P`` keeps the current folder off ``sys.path``, as the
    ``fedala-lab`` script does (``python -m`` would put it first by itself)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-P", "-m", "fedala_lab.cli", *args], cwd=cwd, env=env, check=False,
                          capture_output=True, text=True, timeout=600)


# ------------------------------------------------------------------------------------------------ trackers

tensorboard = pytest.importorskip("tensorboard")
mlflow = pytest.importorskip("mlflow")
from fedala_lab.experiments.trackers import MLflow, TensorBoard, check_trackers

ML_WARNINGS = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy is deprecated")


def _scalars(folder: Path, tag: str) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return [e.step for e in acc.Scalars(tag)]


def test_one_destination_named_twice_is_one_tracker(tmp_path):
    assert len(check_trackers([TensorBoard(tmp_path / "tb"), TensorBoard(f"{tmp_path / 'tb'}/"),
                               TensorBoard(tmp_path / "tb" / "." )])) == 1
    assert len(check_trackers([TensorBoard(tmp_path / "tb"), TensorBoard(tmp_path / "tb2")])) == 2
    with pytest.raises(ConfigError, match=r"trackers=TensorBoard\(.*\) is not allowed: one tracker per destination"):
        check_trackers([TensorBoard(tmp_path / "tb"), TensorBoard(tmp_path / "tb", clients="all")])


@ML_WARNINGS
def test_the_cli_logs_a_destination_named_twice_once(tmp_path, capsys, monkeypatch):
    """The second MLflow tracker of one store deleted the first's run mid-run (traceback, nothing stored); two
    TensorBoard trackers of one folder logged every scalar twice."""
    monkeypatch.chdir(tmp_path)
    rc, out, err = _cli(["run", "--preset", "teach-digits", "--algos", "fedavg", "--rounds", "2", "--clients", "4",
                         "--store", "runs", "--no-progress", "--json", "--tracker", "mlflow=ml", "--tracker",
                         "mlflow=ml/", "--tracker", "tensorboard=tb", "--tracker", f"tensorboard={tmp_path / 'tb'}"],
                        capsys)
    assert rc == 0, err
    row = json.loads(out)
    name = Path(row["run_dir"]).name
    assert RunStore(tmp_path / "runs").find(tiny()) is not None
    assert _scalars(tmp_path / "tb" / name, "acc") == [1, 2]
    [logged] = MLflow(tmp_path / "ml").runs(tiny().key())
    assert logged.data.tags["fedala_lab.logged"] == "true"


def _overwrite_db(tmp_path, name):
    (tmp_path / "ml" / "mlflow.db").write_bytes(b"not a database any more " * 400)


def _replace_folder(tmp_path, name):
    folder = tmp_path / "tb" / name
    shutil.rmtree(folder)
    folder.write_text("a file where the run's folder was")


def _remove_folder(tmp_path, name):
    shutil.rmtree(tmp_path / "tb" / name)


MID_RUN = [
    ("mlflow.db overwritten", "mlflow", _overwrite_db, (r"tracker mlflow=.*/ml failed and logs nothing more of run "
                                                       r"fedavg-.*: MlflowException: .*file is not a database")),
    ("TensorBoard folder replaced", "tensorboard", _replace_folder,
     r"tracker tensorboard=.*/tb failed .*: FileNotFoundError: the run's folder .* was removed or replaced"),
    ("TensorBoard folder removed", "tensorboard", _remove_folder, r"tracker tensorboard=.*/tb failed"),
]


@ML_WARNINGS
@pytest.mark.parametrize("what,kind,hurt,pattern", rows(MID_RUN))
def test_a_tracker_failing_mid_run_is_one_warning_and_the_run_is_stored(what, kind, hurt, pattern, tmp_path, capfd):
    tracker = MLflow(tmp_path / "ml") if kind == "mlflow" else TensorBoard(tmp_path / "tb")
    store = RunStore(tmp_path / "runs")
    cfg = tiny(rounds=3)

    def after_round(sim, row):
        if row["round"] == 1:
            hurt(tmp_path, store.name_for(cfg))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = get_or_run(cfg, store, trackers=[tracker], callback=after_round, progress=False)
    assert run.status == "complete" and len(run.rounds) == 3 and store.find(cfg) is not None
    mine = [str(w.message) for w in caught if "tracker" in str(w.message)]
    assert len(mine) == 1 and "\n" not in mine[0] and re.search(pattern, mine[0]), mine
    assert "Traceback" not in capfd.readouterr().err


def _other_program(db: Path):
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE people (name TEXT)")
    con.execute("INSERT INTO people VALUES ('ada')")
    con.commit()
    con.close()


STORES = [
    ("another program's SQLite database", _other_program, (r"is another program's SQLite database \(tables people\), "
                                                          r"left untouched")),
    ("a text file", lambda db: db.write_text("hello\n"), r"is not a SQLite database"),
    ("a corrupt SQLite file", lambda db: db.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 16),
     r"cannot be read as one \(file is not a database\)"),
    ("a folder", lambda db: db.mkdir(), r"is a folder"),
]


@pytest.mark.parametrize("what,make,pattern", rows(STORES))
def test_an_mlflow_db_that_is_no_mlflow_store_is_refused_untouched(what, make, pattern, tmp_path, capsys,
                                                                   monkeypatch):
    (tmp_path / "ml").mkdir()
    db = tmp_path / "ml" / "mlflow.db"
    make(db)
    before = db.read_bytes() if db.is_file() else None
    with pytest.raises(ConfigError, match=r"tracker='mlflow=.*/ml' is not allowed: a folder whose mlflow.db is an "
                                          r"MLflow store; .*mlflow.db " + pattern):
        MLflow(tmp_path / "ml")
    monkeypatch.chdir(tmp_path)
    rc, _, err = _cli(["run", "--preset", "teach-digits", "--algos", "fedavg", "--rounds", "1", "--store", "runs",
                       "--no-progress", "--tracker", "mlflow=ml"], capsys)
    _one_line(rc, err, pattern)
    assert not (tmp_path / "runs").exists() and (db.read_bytes() if db.is_file() else None) == before


LIBRARY_TRACKERS = [
    ("trackers='tensorboard=x'", lambda d: get_or_run(tiny(), d / "runs", trackers="tensorboard=x", progress=False),
     (r"trackers='tensorboard=x' is not allowed: a list of trackers, e.g. \[TensorBoard\('tb'\), MLflow\('ml'\)\] "
     r"\(a KIND=DIR text: parse_tracker\('tensorboard=tb'\)\)")),
    ("trackers=[None]", lambda d: get_or_run(tiny(), d / "runs", trackers=[None], progress=False),
     (r"trackers=None is not allowed: trackers made as TensorBoard\(DIR\) or MLflow\(DIR\) \(an instance, not the "
     r"class\)")),
    ("trackers=[TensorBoard]", lambda d: get_or_run(tiny(), d / "runs", trackers=[TensorBoard], progress=False),
     r"trackers=<class '.*TensorBoard'> is not allowed: trackers made as TensorBoard\(DIR\)"),
    ("RunCache(trackers='x')", lambda d: runs_mod.RunCache(d / "runs", trackers="x"), r"trackers='x' is not allowed"),
    ("MLflow(experiment='')", lambda d: MLflow(d / "ml", experiment=""),
     r"experiment='' is not allowed: the name of an MLflow experiment"),
    ("MLflow(experiment=None)", lambda d: MLflow(d / "ml", experiment=None), r"experiment=None is not allowed"),
]


@pytest.mark.parametrize("what,call,pattern", rows(LIBRARY_TRACKERS))
def test_library_tracker_misuse_is_a_config_error(what, call, pattern, tmp_path):
    with pytest.raises(ConfigError, match=pattern):
        call(tmp_path)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "ml").exists()


def test_tracker_clients_without_a_tracker_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for cmd in (["run", "--preset", "teach-digits"], ["sweep", "--preset", "teach-digits", "--seeds", "0"]):
        rc, _, err = _cli([*cmd, "--tracker-clients", "bogus", "--store", "runs"], capsys)
        _one_line(rc, err, r"tracker_clients='bogus' is not allowed: given with --tracker KIND=DIR")
    assert not (tmp_path / "runs").exists()


# --------------------------------------------------------------------------------------- processes, splits


def test_processes_beyond_the_machine_are_refused_with_the_range(monkeypatch, tmp_path, capsys):
    most, _ = pool_mod.most_processes()
    assert processes_setting(most) == most
    with pytest.raises(ConfigError, match=rf"processes='1000' is not allowed: a whole number from 1 to {most} "
                                          r"\(this machine: \d+ CPU core\(s\)"):
        processes_setting("1000")
    monkeypatch.setenv("FEDALA_LAB_PROCESSES", "1000")
    with pytest.raises(ConfigError, match=rf"FEDALA_LAB_PROCESSES='1000' is not allowed: a whole number from 1 to "
                                          rf"{most}"):
        processes_setting("auto")
    monkeypatch.delenv("FEDALA_LAB_PROCESSES")
    with pytest.raises(ConfigError, match=rf"processes=1000 is not allowed: a whole number from 1 to {most}"):
        pool_mod.RunPool(1000, tmp_path / "store")  # the app's own (LectureApp(processes=…)) too
    rc, _, err = _cli(["app", "--processes", "1000", "--store", str(tmp_path / "store")], capsys)
    _one_line(rc, err, rf"processes='1000' is not allowed: a whole number from 1 to {most}")
    assert not (tmp_path / "store").exists()


def test_clients_the_split_cannot_serve_are_refused_at_once(tmp_path, capsys):
    """2,000 clients of 3,000 images: refused after the first batch of draws, not after 100,000."""
    rc, _, err = _cli(["run", "--preset", "teach", "--clients", "2000", "--store", str(tmp_path / "runs"),
                       "--no-progress"], capsys)
    _one_line(rc, err, r"dirichlet split failed: every one of the first \d+ draws \(beta=0.1, 2000 clients, 3000 "
                       r"samples, 10 classes\) left at least \d+ clients below least_samples=1")
    with pytest.raises(SplitFailed, match=r"would not find a split either"):
        get_or_run(preset("teach", num_clients=2000), tmp_path / "runs", progress=False)
    assert not (tmp_path / "runs").exists()


def test_get_or_run_many_reports_an_impossible_config_once_and_keeps_the_others(tmp_path, monkeypatch):
    good, bad = tiny(), preset("teach", algo="fedavg", rounds=2, num_clients=2000)
    asked = []
    real = runs_mod.get_or_run

    def counting(cfg, *args, **kwargs):
        asked.append(cfg.key())
        return real(cfg, *args, **kwargs)

    monkeypatch.setattr(runs_mod, "get_or_run", counting)  # this process's calls (the pool's are its own)
    with pytest.raises(SplitFailed, match="2000 clients"):
        get_or_run_many([good, bad, good.replace(seed=1)], tmp_path / "runs", processes=2, progress=False)
    store = RunStore(tmp_path / "runs")
    assert store.find(good) is not None and store.find(good.replace(seed=1)) is not None
    assert bad.key() not in asked  # drawn once, in the pool: not a second time here


CFG = tiny()
MANY = [
    ("one config", lambda d: get_or_run_many(CFG, d), (r"cfgs=RunConfig\(.*\) is not allowed: a list of RunConfigs "
                                                      r"\(for one config: get_or_run\(cfg\)\)")),
    ("a name in the list", lambda d: get_or_run_many([CFG, "fedavg"], d),
     r"cfgs='fedavg' is not allowed: RunConfigs only"),
    ("None in the list", lambda d: get_or_run_many([CFG, None], d), r"cfgs=None is not allowed: RunConfigs only"),
    ("a number", lambda d: get_or_run_many(5, d), r"cfgs=5 is not allowed: a list of RunConfigs"),
]


@pytest.mark.parametrize("what,call,pattern", rows(MANY))
def test_get_or_run_many_refuses_what_is_not_a_list_of_configs(what, call, pattern, tmp_path):
    with pytest.raises(ConfigError, match=pattern):
        call(tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------------------------------------ plugins

GOOD_PLUGIN = """
import json, os, sys
with open(f"path-{os.getpid()}.json", "w") as fh:  # the import path as the plugin found it
    json.dump(sys.path, fh)
import fedala_lab as fl
from fedala_lab.algorithms.fedavg import FedAvg


class SurfMine(FedAvg):
    pass


fl.register_algorithm("surf-mine", SurfMine, modifiers=())
"""


def test_a_plugin_in_the_current_folder_shadows_no_installed_module(tmp_path):
    """``--plugin`` put the current folder first on the import path: a ``./yaml.py`` ran in place of PyYAML,
    in this process and in a sweep's workers."""
    (tmp_path / "p_surf.py").write_text(GOOD_PLUGIN)
    (tmp_path / "yaml.py").write_text("open('SHADOWED', 'w').write('./yaml.py ran')\nraise ImportError('shadowed')\n")
    (tmp_path / "cfg.yaml").write_text("rounds: 1\nnum_clients: 4\n")
    sweep = _subprocess(["sweep", "--plugin", "p_surf", "--config", "cfg.yaml", "--preset", "teach-digits",
                         "--algos", "surf-mine,fedavg", "--workers", "2", "--store", "runs", "--no-progress"],
                        tmp_path)
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    assert not (tmp_path / "SHADOWED").exists()
    paths = [json.loads(p.read_text()) for p in tmp_path.glob("path-*.json")]
    assert len(paths) >= 2  # the command's process and at least one worker imported the plugin
    for path in paths:
        assert not {"", ".", str(tmp_path)} & set(path), path


def test_load_plugins_leaves_the_import_path_alone(tmp_path):
    (tmp_path / "surf_inproc.py").write_text("import fedala_lab as fl\nfrom fedala_lab.algorithms.fedavg import "
                                             "FedAvg\nfl.register_algorithm('surf-inproc', type('I', (FedAvg,), {}))\n")
    before = list(sys.path)
    assert load_plugins("surf_inproc", paths=[str(tmp_path)]) == ["surf_inproc"]  # a string: one name
    assert sys.path == before and "surf-inproc" in registry.names()
    assert sys.modules["surf_inproc"].__file__ == str(tmp_path / "surf_inproc.py")


def test_two_plugins_registering_one_name_are_refused(tmp_path):
    for mod in ("surf_dup_one", "surf_dup_two"):
        (tmp_path / f"{mod}.py").write_text("import fedala_lab as fl\nfrom fedala_lab.algorithms.fedavg import "
                                            "FedAvg\nfl.register_algorithm('surf-dup', type('D', (FedAvg,), {}))\n")
    load_plugins(["surf_dup_one"], paths=[str(tmp_path)])
    with pytest.raises(ConfigError, match=r"name='surf-dup' is not allowed: a name no other module registers: "
                                          r"surf_dup_one registered 'surf-dup' already, surf_dup_two registers it "
                                          r"again"):
        load_plugins(["surf_dup_two"], paths=[str(tmp_path)])
    assert registry.resolve("surf-dup").base.build.__module__ == "surf_dup_one"


PLUGINS = [
    ("load_plugins([None])", lambda d: load_plugins([None]), r"plugin=None is not allowed: an importable module name"),
    ("load_plugins(5)", lambda d: load_plugins(5), r"plugins=5 is not allowed: a module name or a list"),
    ("load_plugins('p_missing')", lambda d: load_plugins("surf_missing", paths=[str(d)]),
     r"plugin='surf_missing' is not allowed: a module in .* or on the import path .*No module named 'surf_missing'"),
    ("sys.exit(3) on import", lambda d: load_plugins(["surf_exit"], paths=[str(d)]),
     r"plugin='surf_exit' is not allowed: .*\(importing it called sys.exit\(3\)\)"),
]


@pytest.mark.parametrize("what,call,pattern", rows(PLUGINS))
def test_a_plugin_that_cannot_load_is_one_config_error(what, call, pattern, tmp_path):
    (tmp_path / "surf_exit.py").write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(ConfigError, match=pattern):
        call(tmp_path)
    assert "surf_exit" not in sys.modules


def test_a_plugin_calling_sys_exit_is_one_line_on_the_command_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "surf_exit2.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.chdir(tmp_path)
    rc, _, err = _cli(["methods", "--plugin", "surf_exit2"], capsys)
    _one_line(rc, err, r"plugin='surf_exit2' is not allowed: .*importing it called sys.exit\(3\)")


def test_a_malformed_plugin_variable_is_one_line_before_any_command(tmp_path):
    out = _subprocess(["--help"], tmp_path, {"FEDALA_LAB_PLUGINS": "../x"})
    _one_line(out.returncode, out.stderr, r"FEDALA_LAB_PLUGINS='../x' is not allowed: comma-separated importable "
                                          r"module names")
    assert not out.stdout


def test_an_unknown_name_says_why_the_plugin_variable_was_not_loaded(monkeypatch):
    monkeypatch.setenv("FEDALA_LAB_PLUGINS", "../x")
    with pytest.raises(ConfigError, match=r"algo='surf-nope' is not allowed: .*FEDALA_LAB_PLUGINS='../x' is not "
                                          r"allowed: .*; its modules were not loaded"):
        fl.RunConfig(algo="surf-nope")


def test_the_plugin_variable_takes_a_module_from_the_current_folder(tmp_path):
    """As docs/extending.md says (``FEDALA_LAB_PLUGINS=my_methods fedala-lab app`` beside my_methods.py)."""
    (tmp_path / "surf_envplug.py").write_text(GOOD_PLUGIN.replace("surf-mine", "surf-env"))
    out = _subprocess(["methods", "--json"], tmp_path, {"FEDALA_LAB_PLUGINS": "surf_envplug"})
    assert out.returncode == 0 and "warning" not in out.stderr, out.stderr[-2000:]
    assert "surf-env" in [json.loads(line)["name"] for line in out.stdout.splitlines()]
    assert all(str(tmp_path) not in json.loads(p.read_text()) for p in tmp_path.glob("path-*.json"))


class _Raises(fl.Algorithm):
    """A plugin's algorithm: registered as ``surf-raise-<hook>``, it raises in that hook."""

    def _maybe(self, hook):
        if self.cfg.algo == f"surf-raise-{hook}":
            raise ValueError(f"my bug in {hook}")

    def __init__(self, setup):
        super().__init__(setup)
        self._maybe("build")

    def init_state(self, setup):
        self._maybe("init_state")

    def select(self, rnd):
        self._maybe("select")
        return super().select(rnd)

    def initialise(self, rnd, clients):
        self._maybe("initialise")
        return super().initialise(rnd, clients)

    def local_train(self, rnd, work):
        self._maybe("local_train")
        return super().local_train(rnd, work)

    def aggregate(self, rnd, senders):
        self._maybe("aggregate")
        return super().aggregate(rnd, senders)


HOOKS = ["build", "init_state", "select", "initialise", "local_train", "aggregate"]


@pytest.fixture(scope="module")
def raising():
    for hook in HOOKS:
        fl.register_algorithm(f"surf-raise-{hook}", _Raises, label=f"Raise{hook}", modifiers=())


@pytest.mark.parametrize("hook", HOOKS)
def test_a_plugin_hook_that_raises_is_named_with_its_hook(hook, raising, tmp_path, capsys):
    what = "constructor \\(build\\)" if hook == "build" else f"{hook} hook"
    pattern = (rf"Raise{hook}'s {what} raised ValueError: my bug in {hook} \(test_bad_input_surfaces.py, "
               r"line \d+\)")
    with pytest.raises(HookError, match=pattern) as caught:
        get_or_run(tiny(algo=f"surf-raise-{hook}"), tmp_path / "runs", progress=False)
    assert caught.value.hook == hook and caught.value.algo == f"surf-raise-{hook}"
    rc, _, err = _cli(["run", "--preset", "teach-digits", "--algos", f"surf-raise-{hook}", "--rounds", "2",
                       "--clients", "4", "--store", str(tmp_path / "runs"), "--no-progress"], capsys)
    _one_line(rc, err, pattern)


def test_the_app_shows_a_plugin_hook_error_as_a_message(raising, tmp_path):
    from conftest import APP_SMALL

    from fedala_lab.webapp import ui

    app = ui.LectureApp(tmp_path / "store")
    with pytest.raises(gr.Error, match=r"Raiseaggregate's aggregate hook raised ValueError: my bug in aggregate") as e:
        app.train(["surf-raise-aggregate"], 1, **{**APP_SMALL, "rounds": 1}, progress=lambda *a, **k: None)
    assert "internal error" not in str(e.value)


def test_a_fedala_error_raised_by_a_hook_on_purpose_goes_on_as_it_is(tmp_path):
    class Refuses(fl.Algorithm):
        def init_state(self, setup):
            raise ConfigError("surf_setting", 1, "what this method allows")

    fl.register_algorithm("surf-refuses", Refuses, modifiers=())
    with pytest.raises(ConfigError, match=r"^surf_setting=1 is not allowed: what this method allows$"):
        get_or_run(tiny(algo="surf-refuses"), tmp_path / "runs", progress=False)


# --------------------------------------------------------------------------------------- float32, the app

FLOAT32 = [
    ("lr=1e39", lambda: fl.RunConfig(lr=1e39), r"lr=1e\+39 is not allowed: a finite number > 0 \(beyond float32"),
    ("eta=1e39", lambda: fl.RunConfig(eta=1e39), r"eta=1e\+39 is not allowed: .*\(beyond float32"),
    ("mu=1e300", lambda: fl.RunConfig(algo="fedprox", mu=1e300), r"mu=1e\+300 is not allowed"),
    ("beta=1e39", lambda: fl.DataConfig(beta=1e39), r"beta=1e\+39 is not allowed"),
    ("replace(lr=1e308)", lambda: tiny().replace(lr=1e308), r"lr=1e\+308 is not allowed"),
]


@pytest.mark.parametrize("what,call,pattern", rows(FLOAT32))
def test_settings_beyond_float32_are_refused_naming_the_field(what, call, pattern):
    with pytest.raises(ConfigError, match=pattern):
        call()
    assert fl.RunConfig(lr=3e38).lr == 3e38  # within float32: a setting like any other


@pytest.mark.parametrize("argv,pattern", [
    (["run", "--lr", "1e39"], r"lr=1e\+39 is not allowed: .*beyond float32"),
    (["run", "--algos", "fedala", "--eta", "1e39"], r"eta=1e\+39 is not allowed: .*beyond float32"),
    (["sweep", "--grid", "lr=0.1,1e39"], r"lr=1e\+39 is not allowed: .*beyond float32"),
], ids=["--lr", "--eta", "--grid lr"])
def test_the_cli_refuses_settings_beyond_float32(argv, pattern, tmp_path, capsys):
    rc, _, err = _cli([*argv, "--preset", "teach-digits", "--store", str(tmp_path / "runs"), "--no-progress"], capsys)
    _one_line(rc, err, pattern)
    assert not (tmp_path / "runs").exists()


def test_the_app_refuses_lr_beyond_float32(tmp_path):
    from conftest import APP_SMALL

    from fedala_lab.webapp import ui

    app = ui.LectureApp(tmp_path / "store")
    with pytest.raises(gr.Error, match=r"lr=1e\+308 is not allowed"):
        app.train(["fedavg"], 1, **{**APP_SMALL, "lr": 1e308, "rounds": 1}, progress=lambda *a, **k: None)


def test_an_empty_host_is_refused_whatever_gradio_server_name_says(monkeypatch, tmp_path, capsys):
    from fedala_lab import webapp

    def reached(host, port):
        raise AssertionError(f"the app went on to listen on {host!r}")

    monkeypatch.setattr(webapp, "_check_free", reached)
    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    for host in ("", " ", None):
        with pytest.raises(ConfigError, match=r"host=.* is not allowed: an address to listen on: 127.0.0.1"):
            webapp.launch(host=host, store=tmp_path / "store")
    rc, _, err = _cli(["app", "--host", "", "--store", str(tmp_path / "store")], capsys)
    _one_line(rc, err, r"host='' is not allowed: an address to listen on: 127.0.0.1 \(this machine only")
    assert not (tmp_path / "store").exists()


def test_the_runs_tab_does_not_echo_a_long_name(tmp_path):
    from fedala_lab.webapp import ui

    app = ui.LectureApp(tmp_path / "store")
    with pytest.raises(gr.Error) as caught:
        app.runs("a" * 100_000)
    message = str(caught.value)
    assert len(message) < 1000 and "100,002 characters" in message and "is not a run name" in message, message[:2000]
    with pytest.raises(ConfigError) as err:
        fl.RunConfig(algo="b" * 100_000)
    assert len(str(err.value).split(" is not allowed")[0]) < 300


# ---------------------------------------------------------------------------------------- a one-layer model


def test_fedala_on_a_bare_linear_layer_is_logistic_regression_with_ala():
    """A module without children is one block: p=1 learns ALA's weights over its weight and bias."""
    torch.manual_seed(0)
    cfg = fl.RunConfig(algo="fedala", rounds=4, lr=0.5, batch_size=10, device="cpu", checkpoint_every=0)
    run = fl.simulate(cfg, _separable(), model=torch.nn.Linear(8, 3), progress=False)
    assert run.meta["ala_params"] == ["weight", "bias"]
    assert len(run.ala) and run.ala["round"].min() == 2  # ALA learned weights from round 2 on
    assert run.rounds["acc"].iloc[-1] > 0.7
    with pytest.raises(ConfigError, match=r"p=2 is not allowed: 1 <= p <= 1 \(the model's blocks: the whole "
                                          r"Linear\)"):
        fl.simulate(cfg.replace(p=2), _separable(), model=torch.nn.Linear(8, 3), progress=False)
