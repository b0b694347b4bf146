"""Your own method's hooks returning the wrong thing (issue 33's reproducers), one row each.

- a wrong type, shape or client id: one HookError (the package's error type) that names the hook, the
  algorithm and what was expected — never a traceback from inside the engine;
- a NaN or infinite model from a hook (in any round, the last one too): the run stops as diverged, nothing is
  stored as complete, and the message names the hook whose output it was, not the learning rate.

The same checks hold where the clients and the server run apart (flower.run_split): the round is one.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from conftest import small_cfg

import fedala_lab as fl
from fedala_lab.engine.simulate import Simulation
from fedala_lab.errors import FedalaError, HookError, TrainingDiverged
from fedala_lab.experiments.runs import get_or_run
from fedala_lab.flower import run_split
from fedala_lab.record.store import RunStore


def register(name: str, **hooks) -> str:
    """A FedAvg whose hooks are replaced by ``hooks`` (plain functions of (self, rnd, …)), registered as ``name``."""
    fl.register_algorithm(name, type(name, (fl.Algorithm,), hooks), label=name.capitalize(), modifiers=())
    return name


def run(cfg, data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Simulation(cfg, data).run(progress=False)


def nan_like(params: dict) -> dict:
    return {k: torch.full_like(v, math.nan) for k, v in params.items()}


WRONG = [
    ("aggregate returns a dict", {"aggregate": lambda self, rnd, senders: {"params": {}, "bytes": 0}},
     r"Hookagg's aggregate returned dict: expected an Aggregated\(params, bytes\)"),
    ("initialise returns None", {"initialise": lambda self, rnd, clients: None},
     r"Hookinit's initialise returned NoneType: expected a Sent"),
    ("select returns a list", {"select": lambda self, rnd: [0, 99]},
     (r"Hooksellist's select returned \[0, 99\]: expected a non-empty 1-D integer tensor of distinct client ids "
     r"in 0 … 4")),
    ("select returns client 99", {"select": lambda self, rnd: torch.tensor([0, 99])},
     r"Hooksel99's select returned clients \[0, 99\]: expected .* in 0 … 4"),
    ("select returns a client twice", {"select": lambda self, rnd: torch.tensor([1, 1])},
     r"Hookseltwice's select returned clients \[1, 1\]: expected .*distinct"),
    ("aggregate returns a wrong shape",
     {"aggregate": lambda self, rnd, senders: fl.Aggregated({"fc.bias": torch.zeros(7)}, 0)},
     r"Hookaggshape's aggregate returned parameter 'fc.bias' of shape \(7,\): expected a tensor of shape \(4,\)"),
    ("aggregate returns a parameter the model lacks",
     {"aggregate": lambda self, rnd, senders: fl.Aggregated({"head.w": torch.zeros(4)}, 0)},
     r"Hookaggname's aggregate returned a parameter 'head.w' the model does not have"),
    ("initialise rows for too few clients",
     {"initialise": lambda self, rnd, clients: fl.Sent({}, 0, rows={"fc.bias": torch.zeros(1, 4)})},
     (r"Hookinitrows's initialise returned row of parameter 'fc.bias' of shape \(1, 4\): expected a tensor of "
     r"shape \(5, 4\)")),
    ("local_train returns a dict", {"local_train": lambda self, rnd, work: {}},
     r"Hooktrain's local_train returned dict: expected a Trained\(params, buffers, losses\)"),
    ("personalise returns a list", {"personalise": lambda self, rnd: [1, 2]},
     r"Hookpers's personalise returned \[1, 2\]: expected None or \{\"params\""),
    ("aggregate's bytes are a float",
     {"aggregate": lambda self, rnd, senders: fl.Aggregated(rnd.weighted_mean(senders).params, 1.5)},
     r"Hookaggbytes's aggregate returned 1.5: expected an int >= 0 as its bytes"),
]
NAMES = ["hookagg", "hookinit", "hooksellist", "hooksel99", "hookseltwice", "hookaggshape", "hookaggname",
         "hookinitrows", "hooktrain", "hookpers", "hookaggbytes"]


@pytest.mark.parametrize("case,name", [pytest.param(w, n, id=w[0]) for w, n in zip(WRONG, NAMES)])
def test_a_hook_returning_the_wrong_thing_is_one_clear_error_naming_it(case, name, ragged):
    _, hooks, message = case
    algo = register(name, **hooks)
    with pytest.raises(HookError, match=message) as err:
        run(small_cfg(algo=algo, rounds=2, backend="loop"), ragged)
    assert isinstance(err.value, FedalaError) and "\n" not in str(err.value)
    assert err.value.algo == algo and err.value.hook in str(err.value)


def test_the_same_error_where_clients_and_server_run_apart(ragged):
    algo = register("hookinitsplit", initialise=lambda self, rnd, clients: None)
    with (pytest.raises(HookError, match="Hookinitsplit's initialise returned NoneType: expected a Sent"),
          warnings.catch_warnings()):
        warnings.simplefilter("ignore")
        run_split(small_cfg(algo=algo, rounds=2, backend="loop"), ragged)


# ---------------------------------------------------------------------------------- NaN from a hook


def nan_in_last_round(self, rnd, senders):
    mean = rnd.weighted_mean(senders)
    return fl.Aggregated(nan_like(mean.params) if rnd.t == self.cfg.rounds else mean.params, mean.bytes)


def nan_personal(self, rnd):
    return {"params": nan_like(rnd.local_params), "buffers": rnd.local_buffers}


def nan_initialise(self, rnd, clients):
    sent = rnd.send_global(clients)
    return fl.Sent(nan_like(sent.params), sent.bytes)


def nan_trained(self, rnd, work):
    trained = fl.Algorithm.local_train(self, rnd, work)
    return fl.Trained(nan_like(trained.params), trained.buffers, trained.losses, trained.done)


NAN = [
    ("aggregate NaN in the last round", "hooknanlast", {"aggregate": nan_in_last_round}, 3,
     "Hooknanlast's aggregate hook returned a NaN or infinite model"),
    ("personalise NaN", "hooknanpers", {"personalise": nan_personal}, 1,
     "Hooknanpers's personalise hook returned a NaN or infinite model for client(s) [0, 1, 2, 3, 4]"),
    ("initialise NaN", "hooknaninit", {"initialise": nan_initialise}, 1,
     "Hooknaninit's initialise hook returned a NaN or infinite model for client(s) [0, 1, 2, 3, 4]"),
    ("local_train's model NaN, its losses finite", "hooknantrain", {"local_train": nan_trained}, 1,
     ("the model Hooknantrain's local_train returned for client(s) [0, 1, 2, 3, 4] is NaN or infinite while its "
     "losses were finite")),
]


@pytest.mark.parametrize("case", NAN, ids=[c[0] for c in NAN])
def test_a_nan_model_from_a_hook_is_divergence_naming_the_hook_and_never_stored_complete(case, ragged, tmp_path):
    _, name, hooks, at, message = case
    cfg = small_cfg(algo=register(name, **hooks), rounds=3, backend="loop")
    store = RunStore(tmp_path)
    with pytest.raises(TrainingDiverged) as err, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        get_or_run(cfg, store, data=ragged, progress=False)
    msg = str(err.value)
    assert f"training diverged in round {at}: " in msg and message in msg, msg
    if "local_train" not in hooks:
        assert "lr=" not in msg  # the hook is named, not the step size
    run = err.value.run
    assert run.status == "diverged" and len(run.rounds) == at - 1
    assert store.find(cfg) is None and store.status(cfg).state == "diverged"


def test_a_nan_from_the_loss_still_blames_the_step_size(ragged):
    with pytest.raises(TrainingDiverged, match=r"the loss of client\(s\) .* became NaN or infinite\. The learning "
                                               r"rate lr=1e\+20 is most likely too large"):
        run(small_cfg(algo="fedavg", lr=1e20, rounds=3, backend="loop"), ragged)


def test_a_built_in_methods_nan_personal_models_name_its_own_setting(tmp_path):
    """Ditto with λ·lr far above 1: its personal models (what personalise returns) blow up while every loss
    that reaches the engine is finite. The run is diverged, not complete, and the message names ditto_lambda."""
    cfg = fl.preset("teach", algo="ditto", rounds=3, ditto_lambda=1000, lr=0.1)
    store = RunStore(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(TrainingDiverged, match=r"Ditto's personalise hook returned a NaN or infinite model .*"
                                                   r"ditto_lambda=1000 is most likely too large"):
            get_or_run(cfg, store, progress=False)
    assert store.status(cfg).state == "diverged"
