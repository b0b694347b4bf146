"""Bad input, as a new user would give it: one table per face, every row refused with one clear line.

- library: a ConfigError/DataError (never a TypeError, IndexError or a silent acceptance) whose message
  names the setting;
- command line: exit code 2, one line on stderr, no traceback, nothing written to the run store;
- app: the widgets refuse (never round or clamp) with a visible one-line gr.Error, no traceback logged.

Each row is a test case, so the report counts the refused inputs. Everything here is fast: the CLI is
called in-process and no row trains a model (refusals come before any work).
"""

from __future__ import annotations

import json
import math

import pytest
from conftest import make_ragged_data, small_cfg

from fedala_lab.cli import main
from fedala_lab.config import DataConfig, RunConfig, read_config_file
from fedala_lab.errors import ConfigError, DataError, FedalaError
from fedala_lab.experiments.presets import preset

# ------------------------------------------------------------------------------------------ library

LIBRARY = [
    ("from_dict(None)", lambda: RunConfig.from_dict(None), r"config=None is not allowed: a mapping"),
    ("from_dict([])", lambda: RunConfig.from_dict([]), r"config=\[\] is not allowed: a mapping"),
    ("from_dict(data='x')", lambda: RunConfig.from_dict({"data": "x"}), r"data='x' is not allowed: a mapping"),
    ("from_dict(data=[1,2])", lambda: RunConfig.from_dict({"data": [1, 2]}), r"data=\[1, 2\]"),
    ("from_dict(bogus)", lambda: RunConfig.from_dict({"bogus": 1}), r"bogus=1 is not allowed: .*one of .*rounds"),
    ("from_dict(data.bogus)", lambda: RunConfig.from_dict({"data": {"bogus": 1}}), r"bogus=1 .*one of .*beta"),
    ("preset(bogus=1)", lambda: preset("teach", bogus=1), r"bogus=1 is not allowed: a known setting; one of"),
    ("preset(name)", lambda: preset("nope"), r"preset='nope' is not allowed: one of teach"),
    ("replace(bogus=1)", lambda: RunConfig().replace(bogus=1), r"bogus=1 is not allowed: a known setting"),
    ("rounds=1e12", lambda: RunConfig(rounds=10**12), r"rounds=1000000000000 .*<= 100000"),
    ("rounds=2.5", lambda: RunConfig(rounds=2.5), r"rounds=2.5 is not allowed: an integer"),
    ("rounds=True", lambda: RunConfig(rounds=True), r"rounds=True is not allowed: an integer"),
    ("rounds=0", lambda: RunConfig(rounds=0), r"rounds=0 is not allowed: an integer >= 1"),
    ("lr=nan", lambda: RunConfig(lr=math.nan), r"lr=nan is not allowed: a finite number > 0"),
    ("lr=-1", lambda: RunConfig(lr=-1.0), r"lr=-1.0 is not allowed"),
    ("lr='0.1'", lambda: RunConfig(lr="0.1"), r"lr='0.1' is not allowed: a finite number"),
    ("batch_size=0", lambda: RunConfig(batch_size=0), r"batch_size=0 is not allowed: an integer >= 1"),
    ("local_epochs=1e6", lambda: RunConfig(local_epochs=10**6), r"local_epochs=1000000 .*<= 1000"),
    ("local_steps=0", lambda: RunConfig(local_steps=0), r"local_steps=0"),
    ("algo", lambda: RunConfig(algo="fedsgd"), r"algo='fedsgd' is not allowed: one of fedavg"),
    ("p=0", lambda: RunConfig(p=0), r"p=0 is not allowed: an integer >= 1"),
    ("s=0", lambda: RunConfig(s=0), r"s=0 is not allowed: a finite number > 0 and <= 100"),
    ("s=101", lambda: RunConfig(s=101), r"s=101 is not allowed"),
    ("eta=0", lambda: RunConfig(eta=0), r"eta=0 is not allowed"),
    ("mu=-1", lambda: RunConfig(mu=-1), r"mu=-1 is not allowed: a finite number >= 0"),
    ("join_ratio=0", lambda: RunConfig(join_ratio=0), r"join_ratio=0 is not allowed"),
    ("threshold=0", lambda: RunConfig(threshold=0), r"threshold=0 is not allowed"),
    ("track_clients", lambda: RunConfig(track_clients="a,b"), r"track_clients='a,b' is not allowed"),
    ("device", lambda: RunConfig(device="tpu"), r"device='tpu' is not allowed: auto, cpu, cuda"),
    ("backend", lambda: RunConfig(backend="gpu"), r"backend='gpu' is not allowed"),
    ("threads=0", lambda: RunConfig(threads=0), r"threads=0 is not allowed"),
    ("lama_rule", lambda: RunConfig(lama_rule="x"), r"lama_rule='x' is not allowed: one of spec, authors"),
    ("data=str", lambda: RunConfig(data="digits"), r"data='digits' is not allowed: a DataConfig"),
    ("beta=0", lambda: DataConfig(beta=0), r"beta=0 is not allowed: a finite number > 0"),
    ("beta=inf", lambda: DataConfig(beta=math.inf), r"beta=inf is not allowed"),
    ("num_clients=0", lambda: DataConfig(num_clients=0), r"num_clients=0 is not allowed"),
    ("dataset", lambda: DataConfig(dataset="imagenet"), r"dataset='imagenet' is not allowed"),
    ("dataset pfllib:", lambda: DataConfig(dataset="pfllib:"), r"dataset='pfllib:' is not allowed"),
    ("partition", lambda: DataConfig(partition="x"), r"partition='x' is not allowed: one of iid"),
    ("train_ratio=1", lambda: DataConfig(train_ratio=1), r"train_ratio=1 is not allowed"),
    ("resize=3", lambda: DataConfig(resize=3), r"resize=3 is not allowed: an integer >= 4"),
    ("download='no'", lambda: DataConfig(download="no"), r"download='no' is not allowed: true or false"),
]


@pytest.mark.parametrize("what,call,pattern", LIBRARY, ids=[r[0] for r in LIBRARY])
def test_library_refuses_with_a_config_error(what, call, pattern):
    with pytest.raises(ConfigError, match=pattern):
        call()


def _write(tmp_path, name, content):
    p = tmp_path / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    elif content is None:
        p.mkdir()
    else:
        p.write_text(content)
    return p


CONFIG_FILES = [
    ("empty.yaml", "", "is empty"),
    ("empty.json", "  \n", "is empty"),
    ("bad.json", '{"rounds": 3,', r"is not valid JSON \(line 1, column 14"),
    ("bad.yaml", "rounds: [3\n", r"is not valid YAML \(line 2"),
    ("binary.yaml", bytes(range(256)), "holds binary data"),
    ("nul.json", b'{"rounds": 3}\x00', "holds binary data"),
    ("object.yaml", 'rounds: !!python/object/apply:os.system ["echo pwned"]\n', "never loaded"),
    ("data5.yaml", "data: 5\n", r"'data' must be a mapping of data settings, not 5"),
    ("datalist.yaml", "data: [1, 2]\n", r"'data' must be a mapping of data settings, not \[1, 2\]"),
    ("folder.yaml", None, "is a folder, not a settings file"),
    ("list.yaml", "- 1\n- 2\n", "holds a list, not a mapping"),
    ("scalar.json", "42", "holds a int, not a mapping"),
    ("comments.yaml", "# nothing\n", "holds no settings"),
]


@pytest.mark.parametrize("name,content,pattern", CONFIG_FILES, ids=[r[0] for r in CONFIG_FILES])
def test_config_files_are_refused_naming_the_file(name, content, pattern, tmp_path):
    path = _write(tmp_path, name, content)
    with pytest.raises(ConfigError, match=pattern) as err:
        read_config_file(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        read_config_file(tmp_path / "nope.yaml")


def test_a_store_that_is_a_file_is_refused(tmp_path):
    from fedala_lab.record.store import RunStore

    (tmp_path / "f").write_text("x")
    with pytest.raises(DataError, match="is a file, not a folder"):
        RunStore(tmp_path / "f")


ENGINE = [
    # no client holds a full batch: nothing would ever train (refused up front, nothing written)
    ("batch beyond every client", {"batch_size": 1000}, r"batch_size=1000 is not allowed: at most 41"),
    ("p beyond the model", {"p": 9, "algo": "fedala"}, r"p=9 is not allowed: 1 <= p <= 4"),
    ("clients beyond the data", {"data": DataConfig(num_clients=6)}, r"num_clients=6 is not allowed: 5"),
    ("track a client that is not there", {"track_clients": "7"}, r"track_clients='7' .*below num_clients=5"),
]


@pytest.mark.parametrize("what,changes,pattern", ENGINE, ids=[r[0] for r in ENGINE])
def test_simulation_refuses_before_any_work(what, changes, pattern, tmp_path):
    from fedala_lab.experiments.runs import get_or_run
    from fedala_lab.record.store import RunStore

    store = RunStore(tmp_path / "store")
    with pytest.raises(ConfigError, match=pattern):
        get_or_run(small_cfg(**changes), store, data=make_ragged_data(), progress=False)
    assert not (tmp_path / "store").exists()  # nothing written, not even a lock


def test_clients_without_a_batch_are_reported_and_the_others_train(tmp_path):
    """Two of five clients hold fewer samples than a batch: they keep the model they receive (as the
    reference's drop_last), the run says so, the others train."""
    from fedala_lab.engine.simulate import simulate

    data = make_ragged_data()  # train sizes 23, 7, 41, 12, 30
    with pytest.warns(UserWarning, match=r"2 of 5 clients \(1, 3\) hold fewer than batch_size=13"):
        run = simulate(small_cfg(batch_size=13, algo="fedavg"), data, progress=False)
    assert run.untrained_clients == [1, 3] and run.summary()["untrained_clients"] == [1, 3]
    c = run.clients
    assert c[c["client"].isin([1, 3])]["train_loss"].isna().all()
    assert c[~c["client"].isin([1, 3])]["train_loss"].notna().all()


# ------------------------------------------------------------------------------------- command line

CLI = [
    (["run", "--rounds", "0"], r"rounds=0 is not allowed: an integer >= 1"),
    (["run", "--rounds", "2.5"], r"argument --rounds: invalid int value: '2.5'"),
    (["run", "--rounds", "1000000000000"], r"rounds=1000000000000 is not allowed: .*<= 100000"),
    (["run", "--lr", "nan"], r"lr=nan is not allowed: a finite number > 0"),
    (["run", "--lr", "abc"], r"argument --lr: invalid float value: 'abc'"),
    (["run", "--beta", "0"], r"beta=0.0 is not allowed"),
    (["run", "--algos", "fedx"], r"algo='fedx' is not allowed"),
    (["run", "--partition", "x"], r"partition='x' is not allowed"),
    (["run", "--device", "tpu"], r"device='tpu' is not allowed"),
    (["run", "--download", "maybe"], r"argument --download: 'maybe' is not a boolean"),
    (["run", "--mu", "-1"], r"mu=-1.0 is not allowed"),
    (["run", "--set", "data=x"], r"data='x' is not allowed: a known setting"),
    (["run", "--set", "bogus=1"], r"bogus=1 is not allowed: a known setting"),
    (["run", "--set", "rounds"], r"--set 'rounds': expected KEY=VALUE"),
    (["run", "--set", "rounds=abc"], r"rounds='abc' is not allowed: an integer"),
    (["run", "--batch-size", "100000", "--rounds", "1"], r"batch_size=100000 is not allowed: at most \d+"),
    (["run", "--clients", "1797", "--partition", "iid", "--rounds", "1"], r"batch_size=10 is not allowed"),
    (["run", "--clients", "100", "--partition", "iid", "--batch-size", "64"], r"batch_size=64 is not allowed"),
    (["run", "--p", "9", "--rounds", "1"], r"p=9 is not allowed"),
    (["run", "--clients", "5000"], r"num_clients=5000 is not allowed: at most the 1797 samples"),
    (["data", "--out", "x.xyz"], r"out='x.xyz' is not allowed: an image path ending in .png, .pdf or .svg"),
    (["data", "--csv", "x.txt"], r"csv='x.txt' is not allowed: a path ending in .csv"),
    (["data", "--out", "/proc/nope/x.png"], r"/proc/nope.*No such file or directory"),
    (["data", "--beta", "0"], r"beta=0.0 is not allowed"),
    (["data", "--clients", "0"], r"num_clients=0 is not allowed"),
    (["sweep", "--grid", "bogus=1,2"], r"grid='bogus' is not allowed"),
    (["sweep", "--grid", "p"], r"--grid 'p': expected AXIS=V1,V2"),
    (["sweep", "--workers", "x", "--rounds", "1"], r"workers='x' is not allowed"),
    (["sweep", "--spec", "nope.yaml"], r"config file nope.yaml: no such file"),
    (["figures", "--only", "nope"], r"only='nope' is not allowed"),
    (["figures", "--formats", "gif"], r"formats='gif' is not allowed"),
    (["figures", "--fig4", "1,2"], r"fig4='1,2' is not allowed"),
]


def _cli(argv, capsys):
    try:
        rc = main(argv)
    except SystemExit as exit_:  # argparse's own refusals
        rc = exit_.code
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("argv,pattern", CLI, ids=[" ".join(a) for a, _ in CLI])
def test_cli_refuses_with_one_line_and_exit_2(argv, pattern, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = ["--store", str(tmp_path / "store")] if argv[0] in ("run", "sweep", "figures") else []
    rc, _, err = _cli([*argv, *store], capsys)
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert __import__("re").search(pattern, lines[0]), lines[0]
    assert not (tmp_path / "store").exists()  # nothing written


CLI_FILES = [(name, content, pattern) for name, content, pattern in CONFIG_FILES] + [
    ("bogus.yaml", "bogus: 1\n", r"bogus=1 is not allowed: .* \(in config file .*bogus.yaml\)"),
    ("rounds.yaml", "rounds: abc\n", r"rounds='abc' is not allowed: .* \(in config file"),
    ("nan.json", '{"rounds": NaN}', r"rounds=nan is not allowed"),
]


@pytest.mark.parametrize("name,content,pattern", CLI_FILES, ids=[r[0] for r in CLI_FILES])
def test_cli_config_files_one_line_exit_2(name, content, pattern, tmp_path, capsys):
    path = _write(tmp_path, name, content)
    rc, _, err = _cli(["run", "--config", str(path), "--store", str(tmp_path / "store")], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert __import__("re").search(pattern, err), err
    assert not (tmp_path / "store").exists()


def test_cli_store_that_is_a_file(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    rc, _, err = _cli(["run", "--rounds", "1", "--store", str(tmp_path / "f")], capsys)
    assert rc == 2 and err.strip() == f"fedala-lab: error: run store {tmp_path / 'f'} is a file, not a folder: " \
                                      "give a folder (it is created if missing)"


def test_a_diverged_run_fails_every_time_with_valid_json(tmp_path, capsys):
    argv = ["run", "--preset", "teach", "--rounds", "2", "--clients", "6", "--lr", "1e6", "--algos",
            "fedavg,fedala", "--store", str(tmp_path), "--no-progress"]
    for attempt in range(2):  # the second time from the store: still refused, never a table of NaN
        rc, out, err = _cli(argv, capsys)
        assert rc == 2 and out == "" and "Traceback" not in err
        assert err.count("training diverged in round 1") == 2 and "lr=1e+06 is most likely too large" in err
        rc, out, err = _cli([*argv, "--json"], capsys)
        rows = [json.loads(line) for line in out.strip().splitlines()]  # strict JSON: no bare NaN
        assert rc == 2 and [r["status"] for r in rows] == ["diverged", "diverged"]
    assert all(json.loads((d / "manifest.json").read_text())["status"] == "diverged"
               for d in tmp_path.iterdir() if not d.name.startswith("."))


def test_fedprox_divergence_names_mu_first(tmp_path, capsys):
    rc, _, err = _cli(["run", "--preset", "teach", "--rounds", "1", "--clients", "6", "--algos", "fedprox",
                       "--mu", "1e6", "--store", str(tmp_path), "--no-progress"], capsys)
    assert rc == 2 and "FedProx's mu=1e+06 is most likely too large for lr=0.1" in err
    assert err.index("mu=1e+06") < err.index("learning rate")


# ----------------------------------------------------------------------------------------------- app

gr = pytest.importorskip("gradio")


def _app_widgets():
    from fedala_lab.webapp import widgets

    return {
        "rounds": widgets.Slider(1, 300, value=50, step=1, field="rounds", whole=True),
        "join_ratio": widgets.Slider(0.05, 1.0, value=1.0, step=0.05, field="join_ratio"),
        "seed": widgets.Number(0, minimum=0, field="seed", whole=True),
        "lr": widgets.Number(0.1, field="lr"),
    }


APP = [
    ("rounds", 2.5, r"rounds=2.5 is not allowed: a whole number from 1 to 300"),
    ("rounds", True, r"rounds=True is not allowed"),
    ("rounds", math.nan, r"rounds=nan is not allowed"),
    ("rounds", None, r"rounds=None is not allowed"),
    ("rounds", 0, r"rounds=0 is not allowed: a whole number from 1 to 300"),
    ("rounds", -1, r"rounds=-1 is not allowed"),
    ("rounds", 301, r"rounds=301 is not allowed"),
    ("rounds", "abc", r"rounds='abc' is not allowed"),
    ("join_ratio", 0.0, r"join_ratio=0.0 is not allowed: a number from 0.05 to 1"),
    ("join_ratio", math.inf, r"join_ratio=inf is not allowed"),
    ("seed", 2.5, r"seed=2.5 is not allowed: a whole number >= 0"),
    ("seed", math.nan, r"seed=nan is not allowed"),
    ("lr", math.nan, r"lr=nan is not allowed: a number, finite"),
    ("lr", None, r"lr=None is not allowed"),
]


@pytest.mark.parametrize("field,value,pattern", APP, ids=[f"{f}={v!r}" for f, v, _ in APP])
def test_app_widgets_refuse_never_round_or_clamp(field, value, pattern, caplog):
    w = _app_widgets()[field]
    with pytest.raises(gr.Error, match=pattern) as err:
        w.preprocess(value)
    assert err.value.print_exception is False  # no traceback in the server log
    assert len([r for r in caplog.records if "refused" in r.getMessage()]) == 1  # one line instead


def test_app_widgets_pass_good_values_unchanged():
    w = _app_widgets()
    assert w["rounds"].preprocess(20.0) == 20 and isinstance(w["rounds"].preprocess(20.0), int)
    assert w["join_ratio"].preprocess(0.35) == 0.35
    assert w["lr"].preprocess(1e-3) == 1e-3


def test_app_train_refuses_a_config_where_no_client_can_train(tmp_path):
    from conftest import APP_SMALL

    from fedala_lab.webapp import ui

    app = ui.LectureApp(tmp_path / "store")
    bad = {**APP_SMALL, "partition": "iid", "num_clients": 100, "batch_size": 64}
    with pytest.raises(gr.Error, match=r"batch_size=64 is not allowed: at most \d+, the largest client"):
        app.train(["fedavg"], **bad, progress=lambda *a, **k: None)


def test_every_error_the_library_raises_on_purpose_is_a_fedala_error():
    assert issubclass(ConfigError, FedalaError) and issubclass(DataError, FedalaError)


def test_app_widgets_draw_as_gradios_own():
    """The checked widgets are drawn from the same page config as Gradio's (label, range, id…)."""
    from fedala_lab.webapp import widgets

    kw = {"label": "rounds T", "elem_id": "rounds", "step": 1}
    ours, theirs = widgets.Slider(1, 300, 50, field="rounds", whole=True, **kw), gr.Slider(1, 300, 50, **kw)
    assert ours.get_block_name() == theirs.get_block_name() == "slider"
    assert ours.get_config() == theirs.get_config()
    ours, theirs = widgets.Number(0.1, field="lr", label="learning rate"), gr.Number(0.1, label="learning rate")
    assert ours.get_config() == theirs.get_config()


def test_app_shows_a_diverged_run_as_an_error_every_time(tmp_path):
    from conftest import APP_SMALL

    from fedala_lab.webapp import ui

    app = ui.LectureApp(tmp_path / "store")
    for _ in range(2):  # the second time from the store: still an error, never a table of NaN
        with pytest.raises(gr.Error, match=r"training diverged in round 1.*lr=1e\+06 is most likely too large"):
            app.train(["fedavg"], **{**APP_SMALL, "lr": 1e6}, progress=lambda *a, **k: None)


def test_the_widgets_write_no_stub_files():
    """Gradio writes a .pyi next to a component subclass's source unless told not to (site-packages!)."""
    from pathlib import Path

    from fedala_lab.webapp import widgets

    assert not Path(widgets.__file__).with_suffix(".pyi").exists()
