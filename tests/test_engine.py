"""Oracle tests of the round loop: two backends, FedProx(μ=0), determinism, resume, divergence."""

import numpy as np
import pytest
import torch
from conftest import RUN_TOL, assert_frames_exact, assert_same_models, assert_same_run, small_cfg, tol

from fedala_lab.algorithms.base import state_to_dict
from fedala_lab.engine.simulate import Simulation, bind, read_checkpoint
from fedala_lab.errors import RunCancelled, TrainingDiverged

METRICS = ["test_acc", "test_loss", "train_loss", "init_loss", "trained_loss", "test_correct", "test_num"]
ALGOS = ["fedavg", "fedprox", "fedala", "fedprox+ala", "fedavg-c", "fedprox-c", "local"]


def run_sim(cfg, data, **kw):
    sim = Simulation(cfg, data, **kw)
    run = sim.run(progress=False)
    return sim, run


@pytest.mark.parametrize("algo", ALGOS)
def test_vectorised_matches_loop_to_float_rounding(algo, ragged, device):
    # ragged sizes, reshuffled epochs, partial last batches and half the clients per round. One vmap call for
    # all clients against a client at a time: the same arithmetic summed in other orders, so not bit for bit;
    # RUN_TOL (conftest: 20x the largest difference measured, 4.8e-7 in W) bounds 3 rounds of it
    cfg = small_cfg(algo=algo, shuffle=True, drop_last=False, join_ratio=0.6, rounds=3, s=60, device=device)
    sim_v, run_v = run_sim(cfg, ragged)
    sim_l, run_l = run_sim(cfg.replace(backend="loop"), ragged)
    at = tol(device, RUN_TOL)
    for c in METRICS:
        np.testing.assert_allclose(run_v.clients[c], run_l.clients[c], atol=at, rtol=0, err_msg=c)
    for n in sim_v.param_names:
        torch.testing.assert_close(sim_v.local_params[n], sim_l.local_params[n], atol=at, rtol=0)
        torch.testing.assert_close(sim_v.global_params[n], sim_l.global_params[n], atol=at, rtol=0)
    assert run_v.clients["selected"].tolist() == run_l.clients["selected"].tolist()
    if "ala" in algo:
        torch.testing.assert_close(state_to_dict(sim_v.state), state_to_dict(sim_l.state), atol=at, rtol=0)
        assert_frames_exact(run_v.ala[["round", "client", "epoch"]], run_l.ala[["round", "client", "epoch"]])
        np.testing.assert_allclose(run_v.ala["loss"], run_l.ala["loss"], atol=at)


@pytest.mark.parametrize("algo", ["fedavg", "fedprox", "fedala", "ditto", "perfedavg", "fedlama+ala"])
def test_static_steps_equal_the_plain_vectorised_backend_bit_for_bit(algo, ragged, device):
    # graphs=True: local SGD, evaluation and ALA's steps from persistent static buffers, one per call shape
    # (CUDA: captured once, replayed); the same kernels on the same values, so the same floats
    from conftest import assert_same_run

    kw = {"tau0": 2, "phi": 2, "local_steps": 2} if algo.startswith("fedlama") else {}
    cfg = small_cfg(algo=algo, shuffle=True, drop_last=False, join_ratio=0.6, rounds=3, s=60, device=device,
                    backend="vectorised", **kw)
    sim_a, run_a = run_sim(cfg, ragged)
    sim_b, run_b = run_sim(cfg, ragged, graphs=True)
    static = [st for b in (sim_b.setup.backend, *sim_b.setup._backends.values()) for st in b._static.values()]
    assert static and all(st.shapes for st in static)  # the steps did go through the static buffers
    if device == "cuda":
        assert all(g is not None for st in static for _, _, g, _ in st.shapes.values())  # graphs captured
    assert_same_run(sim_a, run_a, sim_b, run_b)


def test_fedprox_with_mu_zero_is_fedavg_exactly(ragged, device):
    # every recorded number, every client's model, G and the state, bit for bit
    sim_a, a = run_sim(small_cfg(algo="fedavg", device=device), ragged)
    sim_b, b = run_sim(small_cfg(algo="fedprox", mu=0.0, device=device), ragged)
    assert_same_run(sim_a, a, sim_b, b)
    # and it sees a μ as small as 1e-4, which moves 3 rounds by 2e-6 in the parameters and 4.5e-6 (relative)
    # in the losses: within pandas' default rtol 1e-5, which compared the metrics alone and let it through
    sim_c, c = run_sim(small_cfg(algo="fedprox", mu=1e-4, device=device), ragged)
    with pytest.raises(AssertionError):
        assert_same_models(sim_a, sim_c)
    with pytest.raises(AssertionError):
        assert_frames_exact(a.clients.drop(columns="seconds"), c.clients.drop(columns="seconds"))


def test_same_seed_same_result_other_seed_other_result(ragged, device):
    cfg = small_cfg(algo="fedala", shuffle=True, join_ratio=0.6, device=device)
    sim_a, a = run_sim(cfg, ragged)
    sim_b, b = run_sim(cfg, ragged)
    assert_same_run(sim_a, a, sim_b, b)
    _, c = run_sim(cfg.replace(seed=1), ragged)
    assert not a.clients["test_loss"].equals(c.clients["test_loss"])


def test_selection_and_communication_accounting(ragged):
    sim, run = run_sim(small_cfg(algo="fedavg", join_ratio=0.6, rounds=4), ragged)
    model_bytes = sum(v.numel() * 4 for v in sim.global_params.values())
    assert (run.rounds["num_selected"] == 3).all()  # ⌊0.6 · 5⌋
    assert (run.clients.groupby("round")["selected"].sum() == 3).all()
    assert (run.rounds["bytes_up"] == 3 * model_bytes).all()
    assert (run.rounds["bytes_down"] == 5 * model_bytes).all()  # every client receives G (reference)
    assert run.summary()["bytes_up"] == 4 * 3 * model_bytes
    _, local = run_sim(small_cfg(algo="local", rounds=2), ragged)
    assert local.summary()["bytes_up"] == 0 and local.summary()["bytes_down"] == 0


def test_pooled_accuracy_is_weighted_by_test_size(ragged):
    _, run = run_sim(small_cfg(algo="fedala"), ragged)
    for t, g in run.clients.groupby("round"):
        row = run.rounds.set_index("round").loc[t]
        assert row["acc"] == 100 * g["test_correct"].sum() / g["test_num"].sum()  # the same division: exactly
        assert row["acc_std"] == np.std(g["test_acc"])
        assert g["test_num"].tolist() == [9, 5, 11, 4, 8]
    assert run.rounds["best_acc"].is_monotonic_increasing


def test_eval_drop_last_restores_reference_counting(ragged):
    _, run = run_sim(small_cfg(algo="fedavg", rounds=1, eval_drop_last=True, batch_size=4), ragged)
    assert run.clients["test_num"].tolist() == [8, 4, 8, 4, 8]


def test_resume_after_interruption_equals_uninterrupted(ragged, tmp_path, device):
    cfg = small_cfg(algo="fedala", rounds=5, checkpoint_every=2, shuffle=True, join_ratio=0.6, device=device)
    full_sim, full = run_sim(cfg, ragged)
    ckpt = tmp_path / "ckpt.pt"

    def stop_at_3(sim, row):
        return row["round"] < 3

    with pytest.raises(RunCancelled) as stopped:
        Simulation(cfg, ragged).run(progress=False, callback=stop_at_3, checkpoint=ckpt)
    # the error carries what was recorded so far, and the checkpoint reads back as the same partial run
    partial = stopped.value.run
    assert partial.status == "partial" and partial.summary()["rounds"] == 3
    times = [c for c in full.rounds.columns if c.endswith("seconds")]
    assert_frames_exact(partial.rounds.drop(columns=times), full.rounds[:3].drop(columns=times))
    again = read_checkpoint(ckpt)
    assert again.config == bind(cfg, ragged) and again.status == "partial" and again.meta["stopped_round"] == 3
    assert_frames_exact(again.rounds, partial.rounds)
    assert_frames_exact(again.ala, partial.ala)
    assert read_checkpoint(tmp_path / "absent.pt") is None
    resumed_sim = Simulation(cfg, ragged)
    assert resumed_sim.load_checkpoint(ckpt) and resumed_sim.round == 3
    resumed = resumed_sim.run(progress=False, checkpoint=ckpt)
    # the resumed run is the uninterrupted one: its records, every model, buffer and ALA's W, bit for bit
    assert_same_run(full_sim, full, resumed_sim, resumed)


def test_checkpoint_of_another_config_is_ignored(ragged, tmp_path):
    ckpt = tmp_path / "c.pt"
    sim = Simulation(small_cfg(algo="fedavg", rounds=2), ragged)
    sim.run(progress=False)
    sim.save_checkpoint(ckpt)
    other = Simulation(small_cfg(algo="fedprox", rounds=2), ragged)
    assert other.load_checkpoint(ckpt) is False and other.round == 0
    (tmp_path / "torn.pt").write_bytes(b"not a checkpoint")
    assert other.load_checkpoint(tmp_path / "torn.pt") is False


def test_checkpoint_of_an_older_format_is_ignored_and_the_state_round_trips(ragged, tmp_path):
    cfg = small_cfg(algo="fedala", rounds=2)
    sim = Simulation(cfg, ragged)
    sim.run(progress=False)
    sim.save_checkpoint(tmp_path / "now.pt")
    old = {k: v for k, v in sim.state_dict().items() if k != "state"}  # format 1 kept ALA's W under string keys
    old.update(format=1, algo_state={f"ala.w.{n}": w for n, w in sim.state.weights.items()})
    torch.save(old, tmp_path / "old.pt")
    fresh = Simulation(cfg, ragged)
    assert fresh.load_checkpoint(tmp_path / "old.pt") is False and fresh.round == 0
    assert not fresh.state.started.any()
    assert fresh.load_checkpoint(tmp_path / "now.pt") and fresh.round == 2  # read with weights_only=True
    torch.testing.assert_close(state_to_dict(fresh.state), state_to_dict(sim.state), atol=0, rtol=0)


def test_divergence_stops_with_a_message_and_keeps_the_record(ragged):
    with pytest.raises(TrainingDiverged, match=r"lr=1e\+20 is most likely too large") as info:
        run_sim(small_cfg(algo="fedavg", lr=1e20, rounds=5), ragged)
    run = info.value.run
    assert run.status == "diverged"
    assert len(run.rounds) < 5 and "too large" in run.message


def test_snapshots_and_tracking(ragged):
    sim, run = run_sim(small_cfg(algo="fedala", rounds=4, snapshot_clients="1,3", snapshot_from=2,
                                 track_clients="0,2"), ragged)
    rounds, start, end = run.snapshots(3)
    n_params = sum(v[0].numel() for v in sim.local_params.values())
    assert rounds.tolist() == [2, 3, 4] and start.shape == end.shape == (3, n_params)
    flat_now = torch.cat([v[3].reshape(-1) for v in sim.local_params.values()]).numpy()
    np.testing.assert_array_equal(end[-1], flat_now)
    assert run.tracked_clients() == [0, 2]
    assert set(run.ala["client"]) == {0, 2}
    r, w = run.ala_weights(2)
    assert r == 4 and set(w) == {"fc.weight", "fc.bias"}
    assert torch.equal(torch.as_tensor(w["fc.weight"]), sim.state.weights["fc.weight"][2])  # W as recorded
    with pytest.raises(KeyError, match="no parameter snapshots for client 0"):
        run.snapshots(0)


def test_auto_backend_picks_by_device_and_model_size(ragged):
    from fedala_lab.algorithms.base import SMALL_MODEL, resolve_backend

    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert resolve_backend("auto", cpu, SMALL_MODEL - 1) == "vectorised"
    assert resolve_backend("auto", cpu, 582_026) == "workers"  # local training in worker processes
    assert resolve_backend("auto", gpu, 582_026) == "vectorised"
    assert resolve_backend("loop", gpu, 10) == "loop"
    sim, run = run_sim(small_cfg(algo="fedavg", rounds=1), ragged)
    assert sim.backend.name == "vectorised" and run.meta["env"]["backend"] == "vectorised"
