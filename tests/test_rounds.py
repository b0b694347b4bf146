"""The round's records (engine/rounds.py): what each client row says about the client's training and traffic,
and how it adds up to the round's row, on every backend and with the clients and server apart.

- ``seconds``: each client's training time, never NaN: measured per client on the loop and worker backends, a
  share of each batched call (by the rows it processed) on the vectorised one, 0 for a client that did not
  train;
- ``bytes_up`` / ``bytes_down``: what each client sent and received; the round's totals are their sums;
- the evaluation schedule is one function, which the run store's branching reads too.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import small_cfg

from fedala_lab.engine import rounds
from fedala_lab.engine.simulate import Simulation
from fedala_lab.experiments import prefix
from fedala_lab.flower import run_split


def engine_run(cfg, data, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Simulation(cfg, data, **kw).run(progress=False)


def assert_sums(run):
    """Every evaluated round's traffic is the sum of its clients'; the clients' bytes are whole numbers."""
    per_round = run.clients.groupby("round")[["bytes_up", "bytes_down"]].sum()
    totals = run.rounds.set_index("round").loc[per_round.index, ["bytes_up", "bytes_down"]]
    assert (per_round.to_numpy() == totals.to_numpy()).all(), (per_round, totals)
    assert run.clients["bytes_up"].dtype == np.int64 and run.clients["bytes_down"].dtype == np.int64


@pytest.mark.parametrize("backend", ["loop", "vectorised", "workers"])
def test_every_client_row_has_its_training_seconds_on_every_backend(backend, ragged):
    cfg = small_cfg(algo="fedavg", backend=backend, rounds=2, join_ratio=0.6, stragglers=0.5)
    run = engine_run(cfg, ragged, workers=1)
    seconds, trained = run.clients["seconds"], run.clients["local_steps"] > 0
    assert seconds.notna().all() and (seconds >= 0).all()
    assert (seconds[trained] > 0).all() and (seconds[~trained] == 0).all()
    # the clients' training is part of the round's training phase
    per_round = run.clients.groupby("round")["seconds"].sum()
    assert (per_round <= run.rounds.set_index("round")["train_seconds"] + 1e-9).all()


@pytest.mark.parametrize("algo,kw", [
    ("fedavg", {"stragglers": 0.5}),  # dropped stragglers send nothing
    ("fedrep", {}),  # the body only, both ways
    ("fedfomo", {"rounds": 4, "fomo_m": 2}),  # each selected client downloads as many models as were uploaded
    ("fedlama", {"rounds": 4, "tau0": 2, "phi": 2}),  # some layers a round
    ("fedala", {"join_ratio": 0.4, "ala_all_clients": False}),
])
def test_the_rounds_traffic_is_the_sum_of_its_clients(algo, kw, ragged):
    cfg = small_cfg(algo=algo, backend="loop", join_ratio=kw.pop("join_ratio", 0.6), **kw)
    run = engine_run(cfg, ragged)
    assert_sums(run)
    sent = run.clients.query("selected and local_steps > 0")
    if algo != "fedlama":  # FedLAMA's senders upload only the layers due that round, sometimes none
        assert (sent["bytes_up"] > 0).all()
    assert (run.clients.query("not selected")["bytes_up"] == 0).all()


def test_fedfomos_clients_download_what_each_of_them_picked(ragged):
    run = engine_run(small_cfg(algo="fedfomo", backend="loop", rounds=4, fomo_m=3, join_ratio=0.6), ragged)
    model = run.meta["model_bytes"]
    down = run.clients.query("round >= 2 and selected")["bytes_down"]
    assert (down % model == 0).all() and set(down // model) <= {1, 2, 3} and (down > 0).all()
    assert (run.clients.query("not selected")["bytes_down"] == 0).all()


def test_the_split_round_records_the_same_traffic_and_times_every_client(ragged):
    cfg = small_cfg(algo="fedala", backend="loop", join_ratio=0.6, stragglers=0.5)
    split, engine = run_split(cfg, ragged), engine_run(cfg, ragged)
    assert_sums(split)
    cols = ["bytes_up", "bytes_down"]
    assert split.clients[cols].equals(engine.clients[cols])
    assert split.clients["seconds"].notna().all()


def test_the_evaluation_schedule_is_defined_once(ragged):
    cfg = small_cfg(algo="fedavg", backend="loop", rounds=6, eval_every=2)
    assert prefix.evaluated is rounds.evaluated
    run = engine_run(cfg, ragged)
    evaluated = run.rounds.dropna(subset=["acc"])["round"].tolist()
    assert evaluated == [t for t in range(1, 7) if rounds.evaluated(cfg, t)] == [1, 3, 5, 6]
    assert sorted(run.clients["round"].unique()) == evaluated
