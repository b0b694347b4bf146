"""Bad input on the open surfaces: your own data, model and algorithm, the pFL settings, devices and workers,
the run store and a full disk, a sweep's size. Every row is refused with one clear line naming the field and
what is allowed (library: a FedalaError; command line: exit 2, one line), before anything is written, and
nothing half-written is stored as complete. The rows are tables as in test_bad_input.py; the few tests that
train do so for a round or a few on tiny data.
"""

from __future__ import annotations

import errno
import itertools
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import small_cfg
from test_bad_input import _cli, rows

import fedala_lab as fl
from fedala_lab.algorithms import registry
from fedala_lab.algorithms.fedavg import FedAvg
from fedala_lab.config import RunConfig
from fedala_lab.data.federated import FederatedData
from fedala_lab.engine.simulate import Simulation
from fedala_lab.errors import ConfigError, DataError, FedalaError

# ---------------------------------------------------------------------------------- FederatedData.from_arrays


def _client(n, d=8, k=3, seed=0):
    g = np.random.default_rng(seed + n)
    return g.normal(size=(n, d)).astype(np.float32), g.integers(0, k, n)


GOOD = [_client(10), _client(12)]
X10 = _client(10)[0]

FROM_ARRAYS = [
    ("x 10 rows, y 9", [(X10, _client(9)[1]), _client(12)], GOOD, 3,
     r"train\[0\] \(client 0's train data\): y has shape \(9,\) but x has 10 rows; y must hold one label per row"),
    ("test x 12 rows, y 13", GOOD, [_client(10), (_client(12)[0], _client(13)[1])], 3,
     r"test\[1\] \(client 1's test data\): y has shape \(13,\) but x has 12 rows"),
    ("label 5 of 3 classes", [(X10, np.full(10, 5)), _client(12)], GOOD, 3,
     r"train\[0\] .*label 5 \(row 0\) is out of range; labels must be whole numbers from 0 to 2 \(num_classes=3\)"),
    ("label -1", GOOD, [_client(10), (_client(12)[0], np.r_[np.zeros(11, int), -1])], 3,
     r"test\[1\] .*label -1 \(row 11\) is out of range; labels must be whole numbers from 0 to 2"),
    ("label 0.5", [(X10, np.r_[np.zeros(3), 0.5, np.zeros(6)]), _client(12)], GOOD, 3,
     r"train\[0\] .*label 0.5 \(row 3\) is not a whole number; labels must be whole numbers from 0 to 2"),
    ("label nan", [(X10, np.r_[np.nan, np.zeros(9)]), _client(12)], GOOD, 3, r"label nan \(row 0\) is not a whole"),
    ("labels as text", [(X10, np.array(["cat"] * 10)), _client(12)], GOOD, 3, r"y holds <U3 values; labels must"),
    ("num_classes=0", GOOD, GOOD, 0, r"num_classes=0 is not allowed: an integer >= 1"),
    ("num_classes=-3", GOOD, GOOD, -3, r"num_classes=-3 is not allowed: an integer >= 1"),
    ("num_classes=3.7", GOOD, GOOD, 3.7, r"num_classes=3.7 is not allowed: an integer >= 1"),
    ("num_classes=True", GOOD, GOOD, True, r"num_classes=True is not allowed"),
    ("num_classes='3'", GOOD, GOOD, "3", r"num_classes='3' is not allowed"),
    ("feature sizes differ", [_client(10), _client(12, d=9)], GOOD, 3,
     r"train\[1\] .*x's rows have shape \(9,\) but train\[0\]'s have \(8,\); every client's samples must have one"),
    ("test feature size differs", GOOD, [_client(10), _client(12, d=7)], 3, r"test\[1\] .*x's rows have shape \(7,\)"),
    ("x as text", [(np.array([["a"] * 8] * 10), _client(10)[1]), _client(12)], GOOD, 3,
     r"train\[0\] .*x holds <U1 values; x must hold numbers"),
    ("ragged x", [([[1.0, 2.0], [3.0]], [0, 1]), _client(12)], GOOD, 3,
     r"train\[0\] .*x is not an array of numbers: its rows differ in length"),
    ("x infinite", [(np.full((10, 8), np.inf, np.float32), _client(10)[1]), _client(12)], GOOD, 3,
     r"custom: client 0's train images: 80 pixel value\(s\) in 10 of its 10 images are NaN or infinite"),
    ("a client not a pair", [X10, _client(12)], GOOD, 3, (r"train\[0\] .*is not an \(x, y\) pair but a ndarray of "
                                                          r"length 10")),
    ("train and test clients differ", GOOD, GOOD[:1], 3, r"test='1 clients' is not allowed: as many clients as train"),
    ("no clients", [], [], 3, r"num_clients=0 is not allowed"),
    ("train a single array", X10, GOOD, 3, (r"train='an array of shape \(10, 8\)' is not allowed: a list with one "
                                           r"\(x, y\) pair per client")),
    ("train a number", 5, GOOD, 3, r"train='int' is not allowed: a list with one \(x, y\) pair per client"),
    ("no samples at all", [(np.zeros((0, 8)), [])], [(np.zeros((0, 8)), [])], 3, r"no client holds a sample"),
]


@pytest.mark.parametrize("what,train,test,num_classes,pattern", rows(FROM_ARRAYS))
def test_from_arrays_refuses_before_building(what, train, test, num_classes, pattern):
    with pytest.raises(FedalaError, match=pattern) as err:
        FederatedData.from_arrays(train, test, num_classes)
    assert "\n" not in str(err.value)


def test_from_arrays_class_names_one_per_class():
    with pytest.raises(ConfigError, match=r"class_names=\('a', 'b'\) is not allowed: one name per class: 3 names"):
        FederatedData.from_arrays(GOOD, GOOD, 3, class_names=["a", "b"])


def test_from_arrays_takes_what_is_whole_and_keeps_every_clients_rows():
    """Whole-number float labels, a numpy integer num_classes, torch tensors and an empty client are fine; each
    client keeps exactly its own rows (the offsets follow x and y, never shift)."""
    a, b = _client(10), _client(12)
    fd = FederatedData.from_arrays([(a[0], a[1].astype(np.float64)), ([], []), (torch.as_tensor(b[0]), b[1])],
                                   [a, b, a], np.int64(3))
    assert fd.num_classes == 3 and isinstance(fd.num_classes, int) and fd.train_sizes.tolist() == [10, 0, 12]
    assert fd.train_x.dtype == torch.float32 and fd.train_y.dtype == torch.int64
    x2, y2 = fd.client_train(2)
    assert torch.equal(x2, torch.as_tensor(b[0])) and torch.equal(y2, torch.as_tensor(b[1]))
    tokens = FederatedData.from_arrays([(np.ones((4, 5), np.int64), [0, 1, 0, 1]), (np.zeros((0, 5), np.int64), [])],
                                       [(np.ones((2, 5), np.int64), [1, 0])] * 2, 2)
    assert tokens.train_x.dtype == torch.int64  # an empty client does not turn token ids into floats


# ---------------------------------------------------------------------------------------- registration


def test_a_refused_re_registration_keeps_the_earlier_one_whole():
    fl.register_algorithm("badinput_keep", FedAvg, params=[fl.Param("badinput_x", 1, fl.Int(0, 5))])
    with pytest.raises(ConfigError, match=r"params='lr' is not allowed: .*already a config field"):
        fl.register_algorithm("badinput_keep", FedAvg, params=[fl.Param("badinput_y", 2, fl.Int(0, 5)),
                                                               fl.Param("lr", 0.1, fl.Float(0, 1))])
    assert registry.resolve("badinput_keep").param_names == ("badinput_x",)
    assert registry.param("badinput_x").default == 1 and registry.param("badinput_y") is None
    assert RunConfig(algo="badinput_keep", badinput_x=3).badinput_x == 3  # still a setting


def test_re_registering_keeps_a_name_another_algorithm_shares():
    shared = fl.Param("badinput_shared", 0.5, fl.Float(0, 1))
    fl.register_algorithm("badinput_a", FedAvg, params=[shared])
    fl.register_algorithm("badinput_b", FedAvg, params=[shared])
    fl.register_algorithm("badinput_a", FedAvg)  # a drops it; b still declares it
    assert registry.param("badinput_shared") == shared and registry.owner("badinput_shared") == "badinput_b"


REGISTRATION = [
    ("a Param twice", lambda: fl.register_algorithm("badinput_dup", FedAvg, params=[
        fl.Param("badinput_d", 1), fl.Param("badinput_d", 2)]),
     (r"params='badinput_d' is not allowed: each hyper-parameter declared once; badinput_dup's registration "
     r"declares 'badinput_d' twice")),
    ("Param('')", lambda: fl.Param("", 1), r"Param.name='' is not allowed: a Python identifier in ASCII"),
    ("Param('a=b c')", lambda: fl.Param("a=b c", 1), r"Param.name='a=b c' is not allowed: a Python identifier"),
    ("Param('x²')", lambda: fl.Param("x²", 1), r"Param.name='x²' is not allowed: a Python identifier in ASCII"),
    ("Param('1x')", lambda: fl.Param("1x", 1), r"Param.name='1x' is not allowed"),
    ("Param('class')", lambda: fl.Param("class", 1), r"Param.name='class' is not allowed: .*not a Python keyword"),
    ("Param(a Cyrillic а)", lambda: fl.Param("fed\u0430vg_x", 1), r"Param.name='fed\u0430vg_x' is not allowed"),
    ("name with a Cyrillic е", lambda: fl.register_algorithm("f\u0435davg", FedAvg),
     r"name='f\u0435davg' is not allowed: lower-case ASCII letters a-z, digits, '_' and '-'"),
    ("name upper case", lambda: fl.register_algorithm("FedX", FedAvg), r"name='FedX' is not allowed"),
    ("name empty", lambda: fl.register_algorithm("", FedAvg), r"name='' is not allowed"),
    ("build not callable", lambda: fl.register_algorithm("badinput_nb", 5), r"build=5 is not allowed: an Algorithm"),
    ("a params entry not a Param", lambda: fl.register_algorithm("badinput_np", FedAvg, params=["x"]),
     r"params='x' is not allowed: Param\(...\) declarations"),
    ("a default outside its range", lambda: fl.register_algorithm("badinput_df", FedAvg, params=[
        fl.Param("badinput_df_x", 9, fl.Int(0, 5))]), r"badinput_df_x=9 is not allowed: an integer >= 0 and <= 5"),
    ("an unknown modifier", lambda: fl.register_algorithm("badinput_um", FedAvg, modifiers=("nope",)),
     r"modifiers=\['nope'\] is not allowed: known modifiers"),
]


@pytest.mark.parametrize("what,call,pattern", rows(REGISTRATION))
def test_registration_refuses_naming_the_field(what, call, pattern):
    before = (registry.names(), registry.param_names())
    with pytest.raises(ConfigError, match=pattern):
        call()
    assert (registry.names(), registry.param_names()) == before  # nothing registered, nothing forgotten


# ------------------------------------------------------------------------------------------ custom models


def _separable(clients=4, n=60, test=30, d=8, k=3, seed=0):
    """Clients' samples labelled by a linear rule (argmax of W·x): what logistic regression can learn."""
    g = np.random.default_rng(seed)
    w = g.normal(size=(d, k))

    def split(m):
        x = g.normal(size=(m, d)).astype(np.float32)
        return x, (x @ w).argmax(1)

    return FederatedData.from_arrays([split(n) for _ in range(clients)], [split(test) for _ in range(clients)], k,
                                     name="separable")


@pytest.mark.parametrize("backend", ["auto", "vectorised", "loop", "workers"])
def test_logistic_regression_as_a_bare_linear_layer_trains(backend):
    """nn.Linear(8, 3) as the whole model: its accuracy rises from the untrained layer's, on every backend (the
    vectorised one ran a bare layer as an empty model: 'element 0 of tensors does not require grad')."""
    data = _separable()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 3)
    cfg = RunConfig(algo="fedavg", rounds=5, lr=0.5, batch_size=10, device="cpu", checkpoint_every=0, backend=backend)
    sim = Simulation(cfg, data, model=model, workers=2 if backend == "workers" else None)
    with torch.no_grad():
        before = 100 * (model(data.test_x).argmax(1) == data.test_y).float().mean().item()
    run = sim.run(progress=False)
    acc = run.rounds["acc"].to_numpy()
    assert acc[-1] > max(before + 20, 70), (before, acc)
    assert acc[-1] >= acc[0]


def test_a_bare_layer_on_the_vectorised_and_the_loop_backend_agree():
    data, cfg = _separable(), RunConfig(algo="fedavg", rounds=3, lr=0.5, batch_size=10, device="cpu",
                                        checkpoint_every=0)
    runs = []
    for backend in ("vectorised", "loop"):
        torch.manual_seed(0)
        runs.append(Simulation(cfg.replace(backend=backend), data, model=torch.nn.Linear(8, 3)))
        runs[-1].run(progress=False)
    for n in runs[0].param_names:  # float rounding apart: one batched product against per-client steps
        torch.testing.assert_close(runs[0].global_params[n], runs[1].global_params[n], atol=1e-5, rtol=0)


class _NoParameters(torch.nn.Module):
    def forward(self, x):
        return x[:, :3]


class _Pair(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(x), x


class _Raises(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 3)

    def forward(self, x):
        raise RuntimeError


MODELS = [
    ("no parameters", "fedavg", _NoParameters, (r"model='_NoParameters' is not allowed: a module with parameters to "
                                               r"train \(it has none\)")),
    ("forward returns a tuple", "fedavg", _Pair, (r"model='_Pair' is not allowed: a module whose forward returns one "
                                                 r"tensor of scores, \(batch, 3\); it returns a tuple")),
    ("4 scores for 3 classes", "fedavg", lambda: torch.nn.Linear(8, 4),
     (r"model='Linear' is not allowed: a module whose output has 3 scores per sample \(one per class, num_classes=3\); "
     r"it gives shape \(2, 4\)")),
    ("inputs of another size", "fedavg", lambda: torch.nn.Linear(5, 3),
     r"model='Linear' is not allowed: a module that accepts inputs of shape \(8,\) \(torch.float32\) \(mat1 and "),
    ("an error without a message", "fedavg", _Raises, r"model='_Raises' is not allowed: .* \(RuntimeError\)"),
    ("ALA's p=2 on a bare layer", "fedala", lambda: torch.nn.Linear(8, 3),
     r"p=2 is not allowed: 1 <= p <= 1 \(the model's blocks: the whole Linear\)"),
    ("FedRep on a bare layer", "fedrep", lambda: torch.nn.Linear(8, 3),
     r"model='Linear' is not allowed: a model of two blocks or more for FedRep"),
    ("FedRep on one block", "fedrep", lambda: torch.nn.Sequential(torch.nn.Linear(8, 3)),
     r"model='Sequential' is not allowed: a model of two blocks or more for FedRep"),
]


@pytest.mark.parametrize("what,algo,make,pattern", rows(MODELS))
def test_a_custom_model_that_cannot_train_is_refused_naming_model(what, algo, make, pattern, tmp_path):
    from fedala_lab.experiments.runs import get_or_run

    cfg = RunConfig(algo=algo, rounds=1, lr=0.1, batch_size=10, device="cpu", **({"p": 2} if "p=2" in what else {}))
    with pytest.raises(ConfigError, match=pattern):
        get_or_run(cfg, tmp_path / "store", data=_separable(clients=2), model=make(), progress=False)
    assert not (tmp_path / "store").exists()


def test_fedala_on_a_one_block_logistic_regression_trains():
    """The refusal's advice works: nn.Sequential(nn.Linear) is one block, p=1 learns ALA's weights over all of it."""
    torch.manual_seed(0)
    run = fl.simulate(RunConfig(algo="fedala", rounds=3, lr=0.5, batch_size=10, device="cpu", checkpoint_every=0),
                      _separable(), model=torch.nn.Sequential(torch.nn.Linear(8, 3)), progress=False)
    assert run.meta["ala_params"] == ["0.weight", "0.bias"] and run.rounds["acc"].iloc[-1] > 70


# ------------------------------------------------------------------------------------------ pFL settings

PFL_CLI = [
    ("pfedme", "pfedme_lambda=1e308", r"pfedme_lambda=1e\+308 is not allowed: a finite number >= 0 and <= 1000"),
    ("pfedme", "pfedme_beta=1e308", r"pfedme_beta=1e\+308 is not allowed: a finite number > 0 and < 2"),
    ("pfedme", "pfedme_beta=2", r"pfedme_beta=2 is not allowed: a finite number > 0 and < 2"),
    ("pfedme", "pfedme_plr=1e308", r"pfedme_plr=1e\+308 is not allowed: a finite number > 0 and <= 10"),
    ("perfedavg", "perfedavg_beta=1e308", (r"perfedavg_beta=1e\+308 is not allowed: a finite number > 0 and <= 10, "
                                          r"or none")),
    ("fedamp", "fedamp_alpha=1e308", r"fedamp_alpha=1e\+308 is not allowed: a finite number > 0 and <= 10"),
    ("fedamp", "fedamp_sigma=1e308", r"fedamp_sigma=1e\+308 is not allowed: a finite number > 0 and <= 1000000"),
    ("fedamp", "fedamp_lambda=1e308", r"fedamp_lambda=1e\+308 is not allowed: a finite number >= 0 and <= 1000"),
    ("apple", "apple_dr_lr=1e308", r"apple_dr_lr=1e\+308 is not allowed: a finite number >= 0 and <= 1"),
    ("apple", "apple_mu=1e308", r"apple_mu=1e\+308 is not allowed: a finite number >= 0 and <= 1000"),
    ("ditto", "ditto_lambda=1e308", r"ditto_lambda=1e\+308 is not allowed: a finite number >= 0 and <= 1000"),
]


@pytest.mark.parametrize("algo,setting,pattern", PFL_CLI, ids=[s for _, s, _ in PFL_CLI])
def test_pfl_settings_out_of_range_one_line_exit_2(algo, setting, pattern, tmp_path, capsys):
    rc, _, err = _cli(["run", "--preset", "teach", "--rounds", "1", "--algos", algo, "--set", setting,
                       "--store", str(tmp_path / "store"), "--no-progress"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert re.search(pattern, err), err
    assert not (tmp_path / "store").exists()


HINTS = [  # in range, but what a diverged run most likely owes to: named before the learning rate
    ({"algo": "pfedme", "pfedme_lambda": 100.0}, r"pFedMe's pfedme_lambda=100 is most likely too large for lr=0.05"),
    ({"algo": "pfedme", "pfedme_plr": 0.1, "pfedme_lambda": 1.0},
     r"pFedMe's pfedme_plr=0.1, the learning rate of its K=5 personal steps per batch, is most likely too large"),
    ({"algo": "pfedme", "pfedme_beta": 1.9}, (r"pFedMe's pfedme_beta=1.9 steps the server's model past the clients' "
                                             r"mean every round")),
    ({"algo": "perfedavg", "perfedavg_beta": 5.0}, (r"Per-FedAvg's perfedavg_beta=5, the step size of each local "
                                                   r"step, is most likely too large \(it is above the inner step")),
    ({"algo": "fedamp", "fedamp_alpha": 5.0}, (r"FedAMP's fedamp_alpha=5 is most likely too large for fedamp_sigma=1: "
                                              r"the 4 other clients' attention weights .* can sum to 20")),
    ({"algo": "fedamp", "fedamp_lambda": 100.0}, r"FedAMP's proximal weight λ/α_K = 2000 is most likely too large"),
    ({"algo": "apple", "apple_mu": 1000.0, "apple_dr_lr": 0.01},
     r"APPLE's apple_mu=1000 is most likely too large for apple_dr_lr=0.01"),
    ({"algo": "apple", "apple_dr_lr": 0.5}, (r"APPLE's apple_dr_lr=0.5, the step of the relationship vectors p_i .* "
                                            r"is most likely too large: try a smaller one \(default 0.001\)")),
    ({"algo": "ditto", "ditto_lambda": 100.0}, r"Ditto's ditto_lambda=100 is most likely too large for lr=0.05"),
]


@pytest.mark.parametrize("changes,pattern", HINTS, ids=[",".join(f"{k}={v}" for k, v in c.items()) for c, _ in HINTS])
def test_a_divergence_names_the_method_setting_first(changes, pattern):
    from fedala_lab.engine.rounds import divergence_message

    msg = divergence_message(small_cfg(**changes), 3, [0, 1])
    hit = re.search(pattern, msg)
    assert hit and hit.start() < msg.index("Otherwise the learning rate lr="), msg


@pytest.mark.parametrize("algo", ["pfedme", "perfedavg", "fedamp", "apple", "ditto"])
def test_default_settings_blame_the_learning_rate(algo):
    from fedala_lab.engine.rounds import divergence_message

    msg = divergence_message(small_cfg(algo=algo), 3, [0])
    assert "The learning rate lr=0.05 is most likely too large" in msg and "Otherwise" not in msg


@pytest.mark.parametrize("algo,setting,field", [("perfedavg", "perfedavg_beta=10", "perfedavg_beta=10,"),
                                               ("apple", "apple_dr_lr=1", "apple_dr_lr=1,")],
                         ids=["perfedavg_beta=10", "apple_dr_lr=1"])
def test_a_diverged_pfl_run_names_its_setting(algo, setting, field, tmp_path, capsys):
    """Trained until it diverges (round 1 of the teach data): one line naming the setting, then lr."""
    rc, _, err = _cli(["run", "--preset", "teach", "--rounds", "1", "--clients", "6", "--algos", algo, "--set",
                       setting, "--store", str(tmp_path), "--no-progress"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "training diverged in round 1" in err, err
    assert field in err and err.index(field) < err.index("Otherwise the learning rate lr=0.1"), err


# --------------------------------------------------------------------------------------- devices, workers

DEVICES = [
    (["run", "--device", "cuda:-1"], (r"device='cuda:-1' is not allowed: auto, cpu, cuda, cuda:<n> \(n a GPU index "
                                     r">= 0\) or mps")),
    (["run", "--device", "cuda:x"], r"device='cuda:x' is not allowed"),
    (["run", "--device", "cuda:"], r"device='cuda:' is not allowed"),
    (["run", "--device", "cpu:-1"], r"device='cpu:-1' is not allowed"),
    (["run", "--device", "auto:1"], r"device='auto:1' is not allowed"),
    (["run", "--device", "cuda:0:1"], r"device='cuda:0:1' is not allowed"),
    (["run", "--device", "cuda:99"], r"device='cuda:99' is not allowed: a device this machine has"),
]


@pytest.mark.parametrize("argv,pattern", DEVICES, ids=[" ".join(a) for a, _ in DEVICES])
def test_cli_device_one_line_exit_2(argv, pattern, tmp_path, capsys):
    rc, _, err = _cli([*argv, "--rounds", "1", "--store", str(tmp_path / "store"), "--no-progress"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert re.search(pattern, err), err
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("workers", [0, -2, 2.5, True, "2"])
def test_simulation_refuses_workers_that_are_not_a_count(workers, ragged):
    from fedala_lab.compute.workers import WorkerPool

    with pytest.raises(ConfigError, match=rf"workers={workers!r} is not allowed: a whole number >= 1 \(worker "
                                          r"processes\), a WorkerPool, or None"):
        Simulation(small_cfg(backend="loop"), ragged, workers=workers)
    with pytest.raises(ConfigError, match=r"workers="):
        WorkerPool(workers)


# ---------------------------------------------------------------------------------------------- the store

STORE = [
    ["run", "--rounds", "1", "--store", ""],
    ["run", "--rounds", "1", "--store", "  "],
    ["sweep", "--rounds", "1", "--dry-run", "--store", ""],
    ["figures", "--only", "table2", "--store", ""],
]


@pytest.mark.parametrize("argv", STORE, ids=[" ".join(a[:1] + [repr(a[-1])]) for a in STORE])
def test_an_empty_store_is_refused_never_this_folder(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, _, err = _cli([*argv, "--no-progress"], capsys)
    assert rc == 2 and err.strip() == (f"fedala-lab: error: store={argv[-1]!r} is not allowed: a folder path (the "
                                       "run store; unset: $FEDALA_LAB_RUNS or ./runs)")
    assert not any(tmp_path.iterdir())  # no run folder, no .locks, no figures folder


def test_the_library_refuses_an_empty_store(tmp_path, monkeypatch, ragged):
    from fedala_lab.experiments.runs import get_or_run
    from fedala_lab.record.store import RunStore

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"store='' is not allowed: a folder path"):
        RunStore("")
    with pytest.raises(ConfigError, match=r"store='' is not allowed"):
        get_or_run(small_cfg(rounds=1), "", data=ragged, progress=False)
    assert not any(tmp_path.iterdir())


# -- a full disk: torch reports a failed write as "RuntimeError: [enforce fail at inline_container.cc] unexpected
# pos"; the store must say "No space left on device" and keep nothing half-written. The disk is made full for
# the files torch writes: each opened through a writer that takes a few bytes, then fails as a full disk does.


class _FullDisk:
    """A file opened for writing that holds ``room`` bytes, then fails every write with ENOSPC."""

    def __init__(self, path, room=512):
        self.fh, self.room = open(path, "wb"), room  # noqa: SIM115 - closed by close()

    def write(self, b):
        if self.room < len(b):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(b)
        return self.fh.write(b)

    def flush(self):
        self.fh.flush()

    def close(self):
        self.fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _fill_disk_for(monkeypatch, which):
    """Files torch_save writes whose name ``which(name)`` picks are written to a full disk."""
    import builtins

    from fedala_lab.record import run as run_module

    def fake_open(path, mode="r", *args, **kwargs):
        if "w" in mode and which(Path(path).name):
            return _FullDisk(path)
        return builtins.open(path, mode, *args, **kwargs)

    monkeypatch.setattr(run_module, "open", fake_open, raising=False)


def _complete_runs(store: Path) -> list[Path]:
    import json

    return [d for d in store.iterdir() if (d / "manifest.json").is_file()
            and json.loads((d / "manifest.json").read_text()).get("status") == "complete"] if store.is_dir() else []


def test_torch_save_reports_a_full_disk_as_such(tmp_path, monkeypatch):
    from fedala_lab.record.run import torch_save

    _fill_disk_for(monkeypatch, lambda name: True)
    with pytest.raises(OSError) as err:
        torch_save({"w": torch.zeros(10_000)}, tmp_path / "state.pt")
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(tmp_path / "state.pt")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
def test_torch_save_onto_a_real_full_device():
    """/dev/full fails every write with ENOSPC from the kernel: what a full disk gives torch.save."""
    from fedala_lab.record.run import torch_save

    with pytest.raises(OSError) as err:
        torch_save({"w": torch.zeros(10_000)}, "/dev/full")
    assert err.value.errno == errno.ENOSPC


def test_a_full_disk_at_the_final_save_one_line_exit_2_nothing_stored(tmp_path, capsys, monkeypatch):
    store = tmp_path / "store"
    _fill_disk_for(monkeypatch, lambda name: name.startswith("state"))  # the last round's engine state
    rc, _, err = _cli(["run", "--preset", "teach", "--rounds", "2", "--clients", "6", "--algos", "fedavg",
                       "--store", str(store), "--no-progress"], capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err and "enforce fail" not in err, err
    assert re.fullmatch(rf"fedala-lab: error: cannot write the run store {re.escape(str(store))}: No space left on "
                        r"device \(.*state\.pt\)", lines[0]), lines[0]
    assert _complete_runs(store) == [] and not list(store.glob(".tmp-*"))  # no run, no temporary folder left
    monkeypatch.undo()  # room again: the same command now stores the run
    rc, _out, err = _cli(["run", "--preset", "teach", "--rounds", "2", "--clients", "6", "--algos", "fedavg",
                         "--store", str(store), "--no-progress"], capsys)
    assert rc == 0 and len(_complete_runs(store)) == 1, err


def test_a_full_disk_at_a_checkpoint_one_line_exit_2_no_partial_file(tmp_path, capsys, monkeypatch):
    store = tmp_path / "store"
    _fill_disk_for(monkeypatch, lambda name: name.endswith(".tmp"))  # checkpoints are written as .<name>.<pid>.tmp
    rc, _, err = _cli(["run", "--preset", "teach", "--rounds", "3", "--clients", "6", "--algos", "fedavg",
                       "--set", "checkpoint_every=1", "--store", str(store), "--no-progress"], capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert re.fullmatch(r"fedala-lab: error: .*\.checkpoints/\.fedavg-.*\.pt\.\d+\.tmp: No space left on device",
                        lines[0]), lines[0]
    assert _complete_runs(store) == [] and not any((store / ".checkpoints").iterdir())


def test_get_or_run_raises_a_data_error_on_a_full_disk(tmp_path, monkeypatch, ragged):
    from fedala_lab.experiments.runs import get_or_run

    _fill_disk_for(monkeypatch, lambda name: name.startswith("state"))
    with pytest.raises(DataError, match=r"No space left on device"):
        get_or_run(small_cfg(rounds=1), tmp_path, data=ragged, progress=False)
    assert _complete_runs(tmp_path) == []


# ------------------------------------------------------------------------------------------ a sweep's size

SWEEP_SIZE = [
    (["--seeds", "0-100000"], r"seeds='0-100000' is not allowed: at most 10,000 values \(it lists 100,001\); split"),
    (["--seeds", "0-1000000000000"], r"seeds='0-1000000000000' is not allowed: at most 10,000 values"),
    (["--seeds", "0-5000,6000-11000"], r"seeds='0-5000,6000-11000' is not allowed: .*\(it lists 10,002 or more\)"),
    (["--seeds", "0-99", "--grid", "p=1,2,3", "--grid", "s=" + ",".join(str(v) for v in range(1, 41))],
     r"grid='p 3 × s 40 × seed 100 = 12,000 points' is not allowed: at most 10,000 grid points in one sweep"),
]


@pytest.mark.parametrize("args,pattern", SWEEP_SIZE, ids=[" ".join(a)[:40] for a, _ in SWEEP_SIZE])
def test_a_sweep_too_large_is_refused_at_once(args, pattern, tmp_path, capsys):
    rc, out, err = _cli(["sweep", "--preset", "teach", *args, "--dry-run", "--store", str(tmp_path / "s")], capsys)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert re.search(pattern, err), err


def test_a_sweep_spec_bounds_its_axes_before_reading_them():
    from fedala_lab.experiments.plans import SweepSpec

    for values in (range(10**12), itertools.count()):  # never read whole: an endless axis is refused too
        with pytest.raises(ConfigError, match=r"grid.seed='more than 10,000 values' is not allowed: at most 10,000"):
            SweepSpec(RunConfig(), {"seed": values})
    assert len(SweepSpec(RunConfig(), {"seed": range(10_000)}).grid[0][1]) == 10_000  # the bound itself is fine
