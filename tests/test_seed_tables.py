"""Tables over seeds say what the seeds did: a custom model on your own data at ρ = 1 gives every seed the same
run, and the table says so instead of a "± 0.00 over 3 seeds"; your own data is labelled as given, never with
a partition it never used."""

import warnings

import numpy as np
import torch

import fedala_lab as fl
from fedala_lab.analysis.tables import (
    accuracy_table,
    data_title,
    format_seed_table,
    seed_table,
    setting_label,
    table_markdown,
)
from fedala_lab.experiments.runs import get_or_run


def _runs(tmp_path, seeds, **kw):
    rng = np.random.default_rng(0)
    clients = [(rng.normal(size=(40, 6)).astype("float32"), rng.integers(0, 3, 40)) for _ in range(3)]
    data = fl.FederatedData.from_arrays(train=[(x[:30], y[:30]) for x, y in clients],
                                        test=[(x[30:], y[30:]) for x, y in clients], num_classes=3, name="mine")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [get_or_run(fl.RunConfig(algo="fedavg", rounds=3, lr=0.1, seed=s, **kw), tmp_path, data=data,
                           model=model, progress=False) for s in seeds]


def test_seeds_that_change_nothing_are_called_identical(tmp_path):
    same = _runs(tmp_path, (0, 1, 2))
    differ = _runs(tmp_path, (0, 1, 2), shuffle=True)  # the seed now draws each epoch's order
    table = accuracy_table(same + differ, by=("algo", "shuffle"))
    assert table["identical"].tolist() == [True, False] and table["best_std"].iloc[0] == 0
    md = table_markdown(table)
    assert "| fedavg | False | " in md and "| 3, identical runs |" in md and "identical runs: every seed" in md
    assert "| fedavg | True | " in md and md.count(", identical runs |") == 1
    shown = format_seed_table(seed_table({"given": same, "shuffled": differ}))
    assert shown["seeds"].tolist() == ["3, identical runs", 3]


def test_your_own_data_is_labelled_as_given(tmp_path):
    cfg = _runs(tmp_path, (0,))[0].config
    assert setting_label(cfg) == "mine"
    assert data_title(cfg.data) == "mine (your data, split as given), 3 clients"
    assert "Dir" not in setting_label(cfg) + data_title(cfg.data)
