"""The command line: one line on stderr and exit code 2 for bad input; tables and JSON for runs."""

import json
import subprocess
import sys

import pytest

from fedala_lab.cli import main

TINY = ["--preset", "teach", "--rounds", "3", "--clients", "6", "--no-progress"]


def test_run_json_one_object_per_algorithm(tmp_path, capsys):
    assert main(["run", *TINY, "--algos", "fedavg,fedala", "--json", "--store", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    rows = [json.loads(x) for x in lines]
    assert [r["algo"] for r in rows] == ["fedavg", "fedala"]
    for r in rows:
        assert set(r) >= {"algo", "best_acc", "final_acc", "rounds", "seconds", "bytes_up", "bytes_down", "run_dir"}
        assert 0 <= r["final_acc"] <= r["best_acc"] <= 100 and r["rounds"] == 3
        assert (tmp_path / r["run_dir"].split("/")[-1] / "manifest.json").is_file()
    model_bytes = (196 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10) * 4  # teach: 14×14 MNIST, MLP 196→128→64→10
    assert rows[0]["bytes_up"] == 3 * 6 * model_bytes and rows[0]["bytes_down"] == 3 * 6 * model_bytes


def test_run_table_and_cache(tmp_path, capsys):
    args = ["run", *TINY, "--algos", "fedavg,fedprox,fedala", "--store", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:4] == ["algorithm", "best", "acc", "%"]
    assert [line.split()[0] for line in out.splitlines()[2:5]] == ["fedavg", "fedprox", "fedala"]
    folders = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))
    assert main(args) == 0  # second time: from the store, same folders
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == folders


def test_config_file_and_set(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("algo: fedprox\nmu: 0.01\nrounds: 2\ndata:\n  num_clients: 4\n  partition: iid\n")
    assert main(["run", "--config", str(cfg), "--set", "shuffle=true", "--set", "model=mlp", "--json",
                 "--store", str(tmp_path / "s")]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["algo"] == "fedprox" and row["rounds"] == 2
    saved = json.loads((tmp_path / "s" / row["run_dir"].split("/")[-1] / "config.json").read_text())
    assert saved["mu"] == 0.01 and saved["shuffle"] is True and saved["data"]["partition"] == "iid"


@pytest.mark.parametrize("argv,pattern", [
    (["run", "--beta", "0"], "beta=0.0 is not allowed: a finite number > 0"),
    (["run", "--algos", "fedsgd"], "algo='fedsgd' is not allowed"),
    (["run", "--p", "9", "--rounds", "1"], r"p=9 is not allowed: 1 <= p <= 4 \(the model.s blocks: conv1"),
    (["run", "--clients", "5000"], "num_clients=5000 is not allowed: at most the 1797 samples"),
    (["run", "--dataset", "imagenet"], "dataset='imagenet'"),
    (["run", "--set", "warp=9"], "warp=9 is not allowed: a known setting"),
    (["run", "--set", "shuffle=maybe"], "shuffle='maybe' is not allowed: true or false"),
    (["run", "--lr", "abc"], "argument --lr: invalid float value: 'abc'"),
    (["run", "--download", "False", "--dataset", "mnist", "--root", "/nonexistent"], "/nonexistent/MNIST/raw"),
    (["data", "--partition", "pathological", "--classes-per-client", "11"], "classes_per_client=11"),
    (["data", "--train-ratio", "1.5"], "train_ratio=1.5"),
    (["data", "--dataset", "pfllib:/nonexistent"], "/nonexistent"),
])
def test_bad_input_is_one_line_exit_2(argv, pattern, tmp_path):
    out = subprocess.run([sys.executable, "-m", "fedala_lab.cli", *argv, "--store", str(tmp_path)]
                         if argv[0] == "run" else [sys.executable, "-m", "fedala_lab.cli", *argv,
                                                   "--out", str(tmp_path / "x.png")],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert __import__("re").search(pattern, lines[0]), lines[0]


def test_data_command_writes_the_figure(tmp_path, capsys):
    out = tmp_path / "data_dir0.1.png"
    assert main(["data", "--dataset", "digits", "--partition", "dirichlet", "--beta", "0.1", "--clients", "20",
                 "--out", str(out), "--csv", str(tmp_path / "counts.csv")]) == 0
    assert out.is_file() and out.stat().st_size > 5_000
    text = capsys.readouterr().out
    assert "20 clients, 1340 train / 457 test samples" in text
    import pandas as pd

    counts = pd.read_csv(tmp_path / "counts.csv")
    assert counts["count"].sum() == 1797 and set(counts.columns) == {"client", "label", "count"}


def test_methods_lists_every_algorithm(capsys):
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    for label in ("FedAvg", "Per-FedAvg", "FedRep", "pFedMe", "Ditto", "FedAMP", "FedPHP", "FedFomo", "APPLE",
                  "PartialFed", "FedLAMA", "Local"):
        assert label in out, label
    assert "ditto_lambda=0.1" in out and "modifier +ala" in out
    assert main(["methods", "--json"]) == 0
    import json

    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["name"] for r in rows} >= {"fedfomo", "apple"} and "fedala" in rows[0]["aliases"]
