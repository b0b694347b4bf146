"""FedAMP and FedPHP (the FedALA paper's pFL baselines): two rounds of each ≡ a plain-torch transcription of its
update, their oracles (FedAMP with every attention weight on the client itself and no pull ≡ Local; FedPHP at
the FedAvg end, μ = λ = 0 ≡ FedAvg), the vectorised backend against the loop, and +ALA on both (FedAMP's per-client
cloud models blended per client).

A transcription (nn.Modules, one client at a time) and the engine compute the same arithmetic in other orders:
they agree to float rounding, STEP_TOL for one or two rounds' models, RUN_TOL for losses and for runs of
several rounds (conftest says how large the measured differences are and why these sizes); so do the
vectorised and loop backends. Where one method is another (an oracle with the same arithmetic) and a resumed
run, the comparison is bit for bit."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import RUN_TOL, STEP_TOL, assert_same_run, run_sim, small_cfg, tol
from pfl_oracles import accuracy, batches, descend, mean, module, sgd, state

from fedala_lab.engine.simulate import Simulation
from fedala_lab.errors import ConfigError, RunCancelled, TrainingDiverged

COMMON = {"rounds": 2, "model": "mlp", "lr": 0.1, "batch_size": 4}


def _correct(template, params_of, data, round_rows):
    """Each client's test-split count of right answers of its model ``params_of[c]``, next to the run's."""
    for c in range(data.num_clients):
        x, y = data.client_test(c)
        assert accuracy(template, params_of[c], x, y) == round_rows["test_correct"].iloc[c], c


# -- FedAMP --------------------------------------------------------------------------------------------


def test_two_fedamp_rounds_are_its_paper(ragged, device):
    cfg = small_cfg(device=device, **COMMON, algo="fedamp", fedamp_alpha=0.2, fedamp_sigma=2.0, fedamp_lambda=0.1, backend="loop")
    sim, run = run_sim(cfg, ragged)
    fed = sim.data  # the clients' data on the run's device
    g0, n = state(sim.model), fed.num_clients
    alpha, sigma, pull = cfg.fedamp_alpha, cfg.fedamp_sigma, cfg.fedamp_lambda / cfg.fedamp_alpha

    def train(c, u):  # from the model received, SGD on F_i(w) + (λ/(2α))‖w − u‖²
        return state(sgd(module(sim.model, u), batches(fed, c, cfg.batch_size), cfg.lr,
                         extra=lambda k, p: pull * (p - u[k])))

    w = {c: train(c, g0) for c in range(n)}  # round 1: nothing uploaded yet, everyone gets the initial model
    flat = {c: torch.cat([v.flatten() for v in w[c].values()]).double() for c in w}
    cloud, xi_rows = {}, {}
    for i in range(n):
        xi = {j: alpha / sigma * math.exp(-float((flat[i] - flat[j]) @ (flat[i] - flat[j])) / sigma)
              for j in range(n) if j != i}
        xi[i] = 1 - sum(xi.values())
        xi_rows[i] = [xi[j] for j in range(n)]
        cloud[i] = {k: sum(xi[j] * w[j][k].double() for j in range(n)).float() for k in g0}
    assert all(0.2 < r[i] < 0.8 for i, r in xi_rows.items())  # a convex mixture, not Local
    for c in range(n):
        trained = train(c, cloud[c])  # round 2: from u_i, pulled towards it
        for k, v in cloud[c].items():
            torch.testing.assert_close(sim.state.cloud[k][c], v, atol=tol(device, STEP_TOL), rtol=0)
            torch.testing.assert_close(sim.state.models[k][c], trained[k], atol=tol(device, STEP_TOL), rtol=0)
        np.testing.assert_allclose(run.arrays[f"fedamp_xi/{c}/xi"][-1], xi_rows[c], atol=tol(device, STEP_TOL))
    # evaluated: the cloud model each client received, before its training
    _correct(sim.model, cloud, fed, run.clients[run.clients["round"] == 2].reset_index())
    assert all(torch.equal(sim.global_params[k], v) for k, v in g0.items())  # no global model
    model_bytes = sim.setup.param_bytes()
    assert run.rounds["bytes_down"].tolist() == [n * model_bytes] * 2  # one model per client
    assert run.rounds["bytes_up"].tolist() == [n * model_bytes] * 2


def test_fedamp_with_all_attention_on_itself_and_no_pull_is_local(ragged, device):
    # α_K → 0 puts every weight on the client itself (ξ_ii = 1, u_i = w_i); λ = 0 removes the proximal pull
    cfg = small_cfg(device=device, **{**COMMON, "rounds": 3}, shuffle=True, join_ratio=0.6)
    sim_a, a = run_sim(cfg.replace(algo="fedamp", fedamp_alpha=1e-30, fedamp_lambda=0.0), ragged)
    sim_l, loc = run_sim(cfg.replace(algo="local"), ragged)
    for k in sim_l.param_names:
        assert torch.equal(sim_a.local_params[k], sim_l.local_params[k]), k
    assert a.clients["test_loss"].equals(loc.clients["test_loss"])


def test_fedamp_divergence_names_the_proximal_weight(ragged):
    with pytest.raises(TrainingDiverged, match="λ/α_K = 100"):
        run_sim(small_cfg(**COMMON, algo="fedamp", fedamp_alpha=0.01, fedamp_lambda=1.0), ragged)


def test_ala_blends_each_clients_cloud_model(ragged):
    cfg = small_cfg(**{**COMMON, "rounds": 3}, algo="fedamp+ala", s=60, fedamp_alpha=0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = Simulation(cfg, ragged)
        for t in (1, 2):
            sim.run_round(t)
            sim.round = t
        rnd = sim.round_view(3)
        sent = sim.algo.initialise(rnd, rnd.everyone)
    st = sim.state
    assert list(st.weights) == ["fc.weight", "fc.bias"] and bool(st.started.all())
    cloud = st.inner.cloud
    assert not torch.equal(cloud["fc1.1.weight"][0], cloud["fc1.1.weight"][1])  # a model per client
    for k in ("fc1.1.weight", "fc2.0.bias"):  # below the top block: u_i received as it is (Eq. 4's "1")
        assert torch.equal(sent.rows[k], cloud[k])
    for k in ("fc.weight", "fc.bias"):  # the top block: the client's model blended with its own u_i (Eq. 4)
        loc = sim.local_params[k]
        assert torch.equal(sent.rows[k], loc + (cloud[k] - loc) * st.weights[k]), k
    assert not torch.equal(sent.rows["fc.weight"], cloud["fc.weight"])  # W has learned
    _, run = run_sim(cfg, ragged)
    assert run.config.algorithm.label == "FedAMP+ALA" and len(run.ala) > 0
    assert run.summary()["best_acc"] > 0


# -- FedPHP --------------------------------------------------------------------------------------------


def _mmd(x, y):
    """PFLlib's MMD(x, y, 'rbf'), transcribed."""
    xx, yy, zz = x @ x.T, y @ y.T, x @ y.T
    rx, ry = xx.diag().unsqueeze(0).expand_as(xx), yy.diag().unsqueeze(0).expand_as(yy)
    dxx, dyy, dxy = rx.T + rx - 2 * xx, ry.T + ry - 2 * yy, rx.T + ry - 2 * zz
    k = [sum(torch.exp(-0.5 * d / a) for a in (10, 15, 20, 50)) for d in (dxx, dyy, dxy)]
    return torch.mean(k[0] + k[1] - 2 * k[2])


def _body(m, x):
    """The representation: every block below the top one."""
    return m.fc2(m.fc1(x))


def _php_loss(lam, teacher):
    def loss(m, x, y):
        return (1 - lam) * F.cross_entropy(m(x), y) + lam * _mmd(_body(m, x), _body(teacher, x))

    return loss


def test_two_fedphp_rounds_are_pfllibs_2024_rule(ragged, device):
    cfg = small_cfg(device=device, **COMMON, algo="fedphp", fedphp_rule="2024", fedphp_mu=0.6, fedphp_lambda=0.3,
                    fedphp_ramp=2, backend="loop")
    sim, run = run_sim(cfg, ragged)
    fed = sim.data  # the clients' data on the run's device
    g, n, lam = state(sim.model), fed.num_clients, cfg.fedphp_lambda
    h = {c: g for c in range(n)}  # the private models start as the initial model
    for t in (1, 2):
        trained = {}
        for c in range(n):
            private = module(sim.model, h[c]).requires_grad_(False)
            trained[c] = state(descend(module(sim.model, g), batches(fed, c, cfg.batch_size), cfg.lr,
                                       _php_loss(lam, private)))
        _correct(sim.model, h, fed, run.clients[run.clients["round"] == t].reset_index())  # evaluated: h_i
        mu = cfg.fedphp_mu * (t - 1) / cfg.fedphp_ramp
        h = {c: {k: mu * h[c][k] + (1 - mu) * trained[c][k] for k in g} for c in range(n)}
        g = mean(trained, fed.train_sizes)
    for k, v in g.items():
        torch.testing.assert_close(sim.global_params[k], v, atol=tol(device, STEP_TOL), rtol=0)
    for c in range(n):
        for k, v in h[c].items():
            torch.testing.assert_close(sim.state.params[k][c], v, atol=tol(device, STEP_TOL), rtol=0)


def test_two_fedphp_rounds_are_pfllibs_2022_rule(ragged, device):
    # PFLlib clientphp.py / serverphp.py at 7221835 (April 2022) … 04240b9 (December 2022): set_parameters(G, R)
    # makes G the teacher (model_s) and the client's model G·(1 − μR/T) + model·μR/T; the server evaluates
    # before the clients train; the teacher's representation enters the MMD, the trained models FedAvg's mean
    cfg = small_cfg(device=device, **COMMON, algo="fedphp", fedphp_rule="2022", fedphp_mu=0.6, fedphp_lambda=0.3,
                    fedphp_ramp=2, backend="loop", snapshot_clients="all")
    sim, run = run_sim(cfg, ragged)
    fed = sim.data
    g, n, lam = state(sim.model), fed.num_clients, cfg.fedphp_lambda
    local = {c: g for c in range(n)}  # every client's model starts as the initial model
    for t in (1, 2):
        mu = cfg.fedphp_mu / cfg.fedphp_ramp * (t - 1)  # PFLlib: self.mu = mu / T, times R = t − 1
        local = {c: {k: g[k] * (1 - mu) + local[c][k] * mu for k in g} for c in range(n)}
        _correct(sim.model, local, fed, run.clients[run.clients["round"] == t].reset_index())  # the blend
        teacher = module(sim.model, g).requires_grad_(False)
        local = {c: state(descend(module(sim.model, local[c]), batches(fed, c, cfg.batch_size), cfg.lr,
                                  _php_loss(lam, teacher))) for c in range(n)}
        g = mean(local, fed.train_sizes)
    # STEP_TOL: the engine's MMD sums the kernels in another order (measured on the CPU: 3.0e-8)
    for k, v in g.items():
        torch.testing.assert_close(sim.global_params[k], v, atol=tol(device, STEP_TOL), rtol=0)
    for c in range(n):
        for k, v in local[c].items():
            torch.testing.assert_close(sim.local_params[k][c], v, atol=tol(device, STEP_TOL), rtol=0)
    assert sim.state is None  # nothing kept beyond the local models


def test_fedphp_2022_blend_is_pfllibs_arithmetic_bit_for_bit(ragged):
    # the start of round 2 from the engine's own round 1: G·(1 − μ_t) + w·μ_t, the same float32 operations
    cfg = small_cfg(**COMMON, algo="fedphp", fedphp_mu=0.6, fedphp_lambda=0.3, fedphp_ramp=2,
                    snapshot_clients="all", join_ratio=0.6)
    one, _ = run_sim(cfg.replace(rounds=1), ragged)
    _, run = run_sim(cfg, ragged)
    mu = cfg.fedphp_mu * 1 / cfg.fedphp_ramp
    sel = run.clients[(run.clients["round"] == 2) & run.clients["selected"]]["client"].tolist()
    for c in range(ragged.num_clients):
        start = run.arrays[f"snap_start/{c}"][1]  # round 2's model after initialisation, flattened
        if c in sel:
            want = torch.cat([(g * (1 - mu) + one.local_params[k][c] * mu).reshape(-1)
                              for k, g in one.global_params.items()])
        else:  # not sent anything: it keeps (and shows) its model
            want = torch.cat([one.local_params[k][c].reshape(-1) for k in one.global_params])
        assert torch.equal(torch.from_numpy(start), want), c


def test_fedphp_rule_is_checked_and_named():
    with pytest.raises(ConfigError, match="fedphp_rule"):
        small_cfg(algo="fedphp", fedphp_rule="2023")
    assert small_cfg(algo="fedphp").key() != small_cfg(algo="fedphp", fedphp_rule="2024").key()


@pytest.mark.parametrize("rule", ["2022", "2024"])
def test_fedphp_at_the_fedavg_end_is_fedavg(rule, ragged, device):
    # μ = 0: 2022 starts every client from G (2024: the private model is the trained model itself); λ = 0: no MMD
    # term. On the loop backend: FedPHP's step (a vmapped custom step on the vectorised one) and FedAvg's (a
    # batched SGD step) round differently. ρ = 1 for 2022, which sends nothing to the clients left out
    ratio = 0.6 if rule == "2024" else 1.0
    cfg = small_cfg(device=device, **{**COMMON, "rounds": 3}, shuffle=True, join_ratio=ratio, backend="loop")
    sim_p, p = run_sim(cfg.replace(algo="fedphp", fedphp_rule=rule, fedphp_mu=0.0, fedphp_lambda=0.0), ragged)
    sim_f, f = run_sim(cfg.replace(algo="fedavg"), ragged)
    for part in ("global_params", "local_params"):
        for k, v in getattr(sim_f, part).items():
            assert torch.equal(getattr(sim_p, part)[k], v), (part, k)
    same = ["bytes_up", "bytes_down", "train_loss"]
    assert p.rounds[same].equals(f.rounds[same])
    if rule == "2022":  # evaluated: the blend, here G, as FedAvg
        assert p.clients["test_loss"].equals(f.clients["test_loss"])
        return
    last = f.clients[(f.clients["round"] == 3) & f.clients["selected"]]["client"].tolist()
    for k, v in sim_f.local_params.items():  # h_i: the model client i trained last
        assert torch.equal(sim_p.state.params[k][last], v[last]), k
    # evaluated: h_i, which is FedAvg's local model after the client's last training (PFLlib's evaluation)
    one, _ = run_sim(cfg.replace(algo="fedavg", rounds=1, join_ratio=1.0), ragged)
    _, p2 = run_sim(cfg.replace(algo="fedphp", fedphp_rule=rule, fedphp_mu=0.0, fedphp_lambda=0.0, rounds=2,
                                join_ratio=1.0), ragged)
    want = one.evaluate(one.local_params, one.local_buffers, "test")["correct"]
    np.testing.assert_array_equal(p2.clients[p2.clients["round"] == 2]["test_correct"].to_numpy(), want)


def test_ala_on_fedphp(ragged):
    _, run = run_sim(small_cfg(**{**COMMON, "rounds": 3}, algo="fedphp+ala", s=60), ragged)
    assert run.meta["ala_params"] == ["fc.weight", "fc.bias"] and len(run.ala) > 0
    assert run.config.algorithm.label == "FedPHP+ALA" and run.summary()["best_acc"] > 0


# -- both ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algo", ["fedamp", "fedphp", "fedphp-2024"])
def test_vectorised_matches_loop_to_float_rounding(algo, ragged, device):
    algo, _, rule = algo.partition("-")
    rule = {"fedphp_rule": rule} if rule else {}
    cfg = small_cfg(device=device, algo=algo, **{**COMMON, "rounds": 3}, **rule, shuffle=True, join_ratio=0.6,
                    drop_last=False, fedamp_alpha=0.2, fedphp_lambda=0.3, fedphp_mu=0.6, fedphp_ramp=2)
    sim_v, v = run_sim(cfg, ragged)
    sim_l, lo = run_sim(cfg.replace(backend="loop"), ragged)
    np.testing.assert_allclose(v.clients["test_loss"], lo.clients["test_loss"], atol=tol(device, RUN_TOL))
    for k in sim_l.param_names:
        torch.testing.assert_close(sim_v.local_params[k], sim_l.local_params[k], atol=tol(device, RUN_TOL), rtol=0)


@pytest.mark.parametrize("algo", ["fedamp", "fedphp", "fedphp-2024"])
def test_resume_after_interruption_equals_uninterrupted(algo, ragged, tmp_path, device):
    algo, _, rule = algo.partition("-")
    cfg = small_cfg(device=device, algo=algo, **({"fedphp_rule": rule} if rule else {}), **{**COMMON, "rounds": 4}, checkpoint_every=2, shuffle=True, join_ratio=0.6)
    sim, full = run_sim(cfg, ragged)
    ckpt = tmp_path / "ckpt.pt"
    with pytest.raises(RunCancelled), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Simulation(cfg, ragged).run(progress=False, callback=lambda s, row: row["round"] < 3, checkpoint=ckpt)
    resumed_sim = Simulation(cfg, ragged)
    assert resumed_sim.load_checkpoint(ckpt) and resumed_sim.round == 3
    assert_same_run(sim, full, resumed_sim, resumed_sim.run(progress=False))


def test_fedphp_needs_a_model_of_blocks(ragged):
    class Net(torch.nn.Module):  # no blocks to take the representation from
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(64, 4)

        def forward(self, x):
            return self.fc(x.flatten(1))

    cfg = small_cfg(algo="fedphp", rounds=1)
    with pytest.raises(ConfigError, match="FedPHP"):
        Simulation(cfg, ragged, model=Net())
    seq = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    _, run = run_sim(cfg, ragged, model=seq)  # an nn.Sequential: everything below its last layer
    assert run.summary()["rounds"] == 1
