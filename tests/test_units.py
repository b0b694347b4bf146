"""One unit for accuracy: percent (0–100) in Run's attributes, summary(), the frames, a stored run read back
(also one written in fractions by an older version), the CLI's JSON and the trackers' scalars."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fedala_lab.cli import main
from fedala_lab.experiments.presets import preset
from fedala_lab.experiments.runs import get_or_run
from fedala_lab.record.run import Run
from fedala_lab.record.store import RunStore


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    store = RunStore(tmp_path_factory.mktemp("units"))
    return store, get_or_run(preset("teach-digits", algo="fedavg", rounds=3, num_clients=4), store, progress=False)


def test_every_accuracy_of_a_run_is_percent(stored):
    _, run = stored
    s = run.summary()
    assert 10 < run.best_acc <= 100 and run.best_acc == pytest.approx(s["best_acc"], abs=1e-4)
    assert run.final_acc == pytest.approx(s["final_acc"], abs=1e-4)
    last = run.clients[run.clients["round"] == run.rounds["round"].max()]
    pooled = 100 * last["test_correct"].sum() / last["test_num"].sum()
    assert run.rounds["acc"].iloc[-1] == pytest.approx(pooled)
    np.testing.assert_allclose(last["test_acc"], 100 * last["test_correct"] / last["test_num"])
    assert run.rounds["acc_std"].iloc[-1] == pytest.approx(np.std(last["test_acc"]))
    assert run.rounds["best_acc"].iloc[-1] == pytest.approx(run.best_acc)


def test_a_run_stored_in_fractions_reads_in_percent(stored, tmp_path):
    _, run = stored
    old = tmp_path / "old"
    old.mkdir()
    run.save(old)
    for name, cols in (("rounds.csv", ("acc", "acc_std", "best_acc")), ("clients.csv", ("test_acc",))):
        import pandas as pd

        frame = pd.read_csv(old / name)
        for c in cols:
            frame[c] = frame[c] / 100
        frame.to_csv(old / name, index=False)
    man = json.loads((old / "manifest.json").read_text())
    man["format"] = 2
    man.pop("files")  # the files changed: a manifest of names only (as old ones were) skips their hashes
    (old / "manifest.json").write_text(json.dumps(man))
    back = Run.load(old)
    assert back.final_acc == pytest.approx(run.final_acc)
    np.testing.assert_allclose(back.clients["test_acc"], run.clients["test_acc"])


def test_the_cli_json_is_percent(tmp_path, capsys):
    code = main(["run", "--preset", "teach-digits", "--algos", "fedavg", "--rounds", "3", "--clients", "4",
                 "--store", str(tmp_path), "--json", "--no-progress"])
    assert code == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    run = RunStore(tmp_path).find(preset("teach-digits", algo="fedavg", rounds=3, num_clients=4))
    assert row["final_acc"] == pytest.approx(run.final_acc, abs=1e-4) and not math.isnan(row["final_acc"])
    assert row["final_acc"] > 1
