"""Systems heterogeneity (engine/stragglers.py, docs/design.md#fedprox): stragglers do exactly their drawn
part of the local work, dropped ones send nothing, and every oracle of the round loop still holds."""

import numpy as np
import pytest
import torch
from conftest import RUN_TOL, STEP_TOL, assert_same_run, small_cfg

from fedala_lab.config import RunConfig
from fedala_lab.engine.simulate import Simulation
from fedala_lab.engine.stragglers import partial_steps
from fedala_lab.errors import ConfigError, RunCancelled

METRICS = ["test_acc", "test_loss", "train_loss", "init_loss", "trained_loss", "test_correct", "test_num"]


def run_sim(cfg, data):
    sim = Simulation(cfg, data)
    return sim, sim.run(progress=False)


def test_fields_validation_defaults_and_key():
    for bad in (-0.1, 1.5, "half", True, float("nan")):
        with pytest.raises(ConfigError, match="stragglers"):
            RunConfig(stragglers=bad)
    with pytest.raises(ConfigError, match="drop_stragglers"):
        RunConfig(stragglers=0.5, drop_stragglers="yes")
    with pytest.raises(ConfigError, match="stragglers=0.5 is not allowed: 0 with FedLAMA"):
        RunConfig(algo="fedlama", stragglers=0.5).check()
    # who drops: the FedProx paper's choice per algorithm, unless set
    drops = {a: RunConfig(algo=a, stragglers=0.5).drops_stragglers
             for a in ("fedavg", "fedala", "fedavg-c", "local", "fedprox", "fedprox+ala", "fedprox-c")}
    assert drops == {"fedavg": True, "fedala": True, "fedavg-c": True, "local": True,
                     "fedprox": False, "fedprox+ala": False, "fedprox-c": False}
    assert RunConfig(algo="fedavg", stragglers=0.5, drop_stragglers=False).drops_stragglers is False
    # without stragglers neither field enters the key (runs stored before them keep theirs)
    plain = RunConfig(algo="fedprox")
    assert "stragglers" not in plain.canonical() and "drop_stragglers" not in plain.canonical()
    assert plain.key() == RunConfig(algo="fedprox", stragglers=0, drop_stragglers=True).key()
    # with them, "the algorithm's default" and that default spelled out are one run; the other choice is not
    cfg = RunConfig(algo="fedprox", stragglers=0.9)
    assert cfg.key() == cfg.replace(drop_stragglers=False).key() != cfg.replace(drop_stragglers=True).key()
    assert RunConfig(stragglers=1).stragglers == 1.0  # integral floats stored as floats


def test_a_straggler_does_exactly_its_drawn_number_of_steps(ragged):
    # FedProx keeps the stragglers' partial work; 2 local epochs of batch 4: full work 2·⌊n/4⌋ steps
    cfg = small_cfg(algo="fedprox", stragglers=0.6, local_epochs=2, rounds=3, backend="loop",
                    snapshot_clients="all")
    _, run = run_sim(cfg, ragged)
    full = 2 * (ragged.train_sizes // 4)
    c = run.clients
    assert (run.rounds["stragglers"] == 3).all() and (run.rounds["dropped"] == 0).all()  # 5 − round(5·0.4)
    for row in c.itertuples():
        want = partial_steps(cfg.seed, row.round, row.client, full[row.client]) if row.straggler \
            else full[row.client]
        assert row.local_steps == want, row
        if row.straggler:
            assert 1 <= row.local_steps < full[row.client]
    assert c["straggler"].any() and (c.groupby("round")["straggler"].sum() == 3).all()
    # the model a straggler sends is the one of a round of exactly that many steps
    first = c[(c["round"] == 1) & c["straggler"]].iloc[0]
    client, steps = int(first.client), int(first.local_steps)
    _, exact = run_sim(small_cfg(algo="fedprox", local_steps=steps, rounds=1, backend="loop",
                                 snapshot_clients=str(client)), ragged)
    _, ends = run.snapshots(client)[1:]
    np.testing.assert_array_equal(ends[0], exact.snapshots(client)[2][0])  # the same steps: bit for bit


def test_dropped_stragglers_train_nothing_and_send_nothing(ragged):
    cfg = small_cfg(algo="fedavg", stragglers=0.4, rounds=3)  # FedAvg drops them: 2 of 5 each round
    sim = Simulation(cfg, ragged)
    model_bytes = sim.setup.param_bytes()
    w_all = torch.tensor(ragged.train_sizes, dtype=torch.float64)
    for t in (1, 2, 3):
        before = {n: v.clone() for n, v in sim.global_params.items()}
        row = sim.run_round(t)
        run = sim.to_run()
        last = run.clients[run.clients["round"] == t]
        dropped = last["client"][last["straggler"]].to_numpy(copy=True)
        sent = last["client"][~last["straggler"]].to_numpy(copy=True)
        assert len(dropped) == 2 and row["dropped"] == 2 and row["stragglers"] == 2
        assert row["bytes_up"] == 3 * model_bytes and row["bytes_down"] == 5 * model_bytes
        assert (last["local_steps"][last["straggler"]] == 0).all()
        assert last["train_loss"][last["straggler"]].isna().all()
        w = (w_all[sent] / w_all[sent].sum()).to(sim.dtype)
        for n in sim.param_names:
            for d in dropped:  # they kept the model they received
                torch.testing.assert_close(sim.local_params[n][d], before[n], atol=0, rtol=0)
            # the server averaged the others only (a transcription of the weighted mean, its sum in its own
            # order: STEP_TOL, conftest)
            torch.testing.assert_close(sim.global_params[n], torch.tensordot(w, sim.local_params[n][sent], dims=1),
                                       atol=STEP_TOL, rtol=0)
    # every selected client a straggler, all dropped: nothing reaches the server and G stays
    sim, run = run_sim(small_cfg(algo="fedavg", stragglers=1.0, rounds=2), ragged)
    assert (run.rounds["bytes_up"] == 0).all() and (run.rounds["dropped"] == 5).all()
    g0 = Simulation(small_cfg(algo="fedavg", rounds=2), ragged).global_params
    for n in sim.param_names:
        torch.testing.assert_close(sim.global_params[n], g0[n], atol=0, rtol=0)


def test_keeping_the_stragglers_fedprox_mu_zero_is_fedavg_exactly(ragged):
    kept = {"stragglers": 0.6, "local_epochs": 2, "rounds": 3}
    sim_a, a = run_sim(small_cfg(algo="fedavg", drop_stragglers=False, **kept), ragged)
    sim_b, b = run_sim(small_cfg(algo="fedprox", mu=0.0, **kept), ragged)
    assert_same_run(sim_a, a, sim_b, b)  # every record, model and state, bit for bit
    # the default FedAvg drops them: same stragglers (same seed), other work
    _, c = run_sim(small_cfg(algo="fedavg", **kept), ragged)
    assert c.clients["straggler"].tolist() == a.clients["straggler"].tolist()
    assert (c.rounds["dropped"] > 0).all() and not c.clients["local_steps"].equals(a.clients["local_steps"])


def test_determinism_backends_and_resume_with_stragglers(ragged, tmp_path):
    cfg = small_cfg(algo="fedprox+ala", stragglers=0.5, local_epochs=2, shuffle=True, drop_last=False,
                    join_ratio=0.6, rounds=4, s=60, checkpoint_every=2)
    sim_v, run_v = run_sim(cfg, ragged)
    sim_again, again = run_sim(cfg, ragged)
    assert_same_run(sim_v, run_v, sim_again, again)  # deterministic: bit for bit
    # the loop backend: the same run up to float rounding (vmapped against one client at a time: RUN_TOL,
    # conftest); who straggles and how many steps each does, exactly
    sim_l, run_l = run_sim(cfg.replace(backend="loop"), ragged)
    for c in METRICS:
        np.testing.assert_allclose(run_v.clients[c], run_l.clients[c], atol=RUN_TOL, rtol=0, err_msg=c)
    for c in ("selected", "straggler", "local_steps"):
        assert run_v.clients[c].tolist() == run_l.clients[c].tolist()
    for n in sim_v.param_names:
        torch.testing.assert_close(sim_v.global_params[n], sim_l.global_params[n], atol=RUN_TOL, rtol=0)
        torch.testing.assert_close(sim_v.local_params[n], sim_l.local_params[n], atol=RUN_TOL, rtol=0)
    assert run_v.rounds["stragglers"].tolist() == [1, 1, 1, 1]  # 3 selected (⌊0.6·5⌋): 3 − round(3·0.5) = 3 − 2
    # stopped after round 3 and resumed: the same run
    ckpt = tmp_path / "ckpt.pt"
    with pytest.raises(RunCancelled):
        Simulation(cfg, ragged).run(progress=False, callback=lambda sim, row: row["round"] < 3, checkpoint=ckpt)
    resumed = Simulation(cfg, ragged)
    assert resumed.load_checkpoint(ckpt) and resumed.round == 3
    assert_same_run(sim_v, run_v, resumed, resumed.run(progress=False))  # records, models, W: bit for bit
