"""Per-FedAvg, pFedMe and PartialFed (the FedALA paper's pFL baselines): rounds ≡ plain-torch transcriptions of
their papers (PartialFed-Fix's and PartialFed-Adaptive's rules), their oracles (Per-FedAvg(FO) with β = α moves
by the second of two SGD steps and is evaluated after one; pFedMe with K = 1, lr·λ = 1, β = 1 is FedAvg at the
personal lr; PartialFed loading every layer is FedAvg, loading none is Local; PartialFed-Adaptive without a
strategy step is FedAvg), the vectorised backend against the loop, and +ALA on each (Fix).

A transcription (nn.Modules, one client at a time) and the engine compute the same arithmetic in other orders:
they agree to float rounding, STEP_TOL for one or two rounds' models, RUN_TOL for losses and for runs of
several rounds (conftest says how large the measured differences are and why these sizes); so do the
vectorised and loop backends. Where one method is another (an oracle with the same arithmetic) and a resumed
run, the comparison is bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import RUN_TOL, STEP_TOL, assert_same_run, run_sim, small_cfg, tol
from pfl_oracles import batches, client_test_loss, grads, mean, module, sgd, state
from torch import nn
from torch.nn import functional as F

from fedala_lab.algorithms.partialfed import kept_local, layers
from fedala_lab.algorithms.perfedavg import pairs
from fedala_lab.compute.backends import BatchPlan
from fedala_lab.compute.rng import PARTIALFED_NOISE, generator
from fedala_lab.engine.simulate import Simulation
from fedala_lab.errors import RunCancelled
from fedala_lab.models import BlockNet

COMMON = {"model": "mlp", "lr": 0.1, "batch_size": 4}
CLIENTS = range(5)


def _close(got, want, atol=STEP_TOL):
    for k, v in want.items():
        torch.testing.assert_close(got[k], v, atol=atol, rtol=0, msg=k)


def _row(params, c):
    return {k: v[c] for k, v in params.items()}


def _test_losses(run, t):
    return run.clients[run.clients["round"] == t].sort_values("client")["test_loss"].to_numpy()


# -- Per-FedAvg ----------------------------------------------------------------------------------------


def _pairs(data, c, b):
    """(D, D') of each Per-FedAvg step: the reference's batches two by two (an odd last one left out)."""
    bs = batches(data, c, b)
    return list(zip(bs[0::2], bs[1::2]))


def test_two_perfedavg_rounds_are_its_paper(ragged, device):
    cfg = small_cfg(device=device, **COMMON, rounds=2, algo="perfedavg", perfedavg_beta=0.05, backend="loop")
    sim, run = run_sim(cfg, ragged)
    fed = sim.data  # the clients' data on the run's device
    alpha, beta = cfg.lr, cfg.perfedavg_beta
    g = state(sim.model)
    for t in (1, 2):
        # evaluated: each client's received model after one SGD step (lr α) on its first train batch
        adapted = [sgd(module(sim.model, g), batches(fed, c, cfg.batch_size)[:1], alpha) for c in CLIENTS]
        np.testing.assert_allclose(_test_losses(run, t), [client_test_loss(m, fed, c)
                                                           for c, m in enumerate(adapted)], atol=tol(device, RUN_TOL))
        trained = {}
        for c in CLIENTS:
            theta = dict(g)
            for d, d2 in _pairs(fed, c, cfg.batch_size):
                inner = sgd(module(sim.model, theta), [d], alpha)  # θ' = θ − α∇f(θ; D)
                outer = grads(inner, *d2)  # ∇f(θ'; D'), the FO step's gradient, applied at θ
                theta = {k: v - beta * outer[k] for k, v in theta.items()}
            trained[c] = theta
        g = mean(trained, fed.train_sizes)
    _close(sim.global_params, g, atol=tol(device, STEP_TOL))
    assert (run.rounds[["bytes_up", "bytes_down"]] == 5 * sim.setup.param_bytes()).all().all()  # whole models


def test_perfedavg_with_beta_alpha_moves_by_the_second_of_two_sgd_steps(ragged):
    cfg = small_cfg(**COMMON, rounds=1, algo="perfedavg")  # β: the run's lr, as PFLlib
    sim, _ = run_sim(cfg, ragged)
    for c in CLIENTS:
        theta = state(sim.model)
        for d, d2 in _pairs(ragged, c, cfg.batch_size):
            first = sgd(module(sim.model, theta), [d], cfg.lr)
            two = state(sgd(module(sim.model, state(first)), [d2], cfg.lr))
            theta = {k: theta[k] + (two[k] - state(first)[k]) for k in theta}  # FO-MAML: the 2nd step, at θ
        _close(_row(sim.local_params, c), theta)


def test_perfedavg_pairs_batches_within_each_pass():
    # 2 passes of 3 batches (the 3rd partial): (0, 1) and (3, 4); each pass's odd last batch is left out
    rows = [np.arange(4), np.arange(4, 8), np.arange(8, 10)]
    plan = BatchPlan.from_batches([rows + rows, rows[:1]], "cpu")
    got = pairs(plan, np.array([3, 3]))
    assert got.num_steps.tolist() == [2, 0]
    assert got.sizes[0].tolist() == [8, 8]
    assert got.rows[0, 1].tolist() == list(range(8))


# -- pFedMe --------------------------------------------------------------------------------------------


def test_two_pfedme_rounds_are_its_paper(ragged, device):
    cfg = small_cfg(device=device, **COMMON, rounds=2, algo="pfedme", pfedme_lambda=3.0, pfedme_k=2, pfedme_plr=0.05,
                    pfedme_beta=0.5, backend="loop")
    sim, run = run_sim(cfg, ragged)
    fed = sim.data  # the clients' data on the run's device
    lr, lam, plr, beta = cfg.lr, cfg.pfedme_lambda, cfg.pfedme_plr, cfg.pfedme_beta
    g, personal = state(sim.model), {c: state(sim.model) for c in CLIENTS}
    for t in (1, 2):
        # evaluated: each client's personal model θ_i as its last training left it
        np.testing.assert_allclose(_test_losses(run, t), [client_test_loss(module(sim.model, personal[c]), fed, c)
                                                           for c in CLIENTS], atol=tol(device, RUN_TOL))
        local = {}
        for c in CLIENTS:
            w, theta = dict(g), dict(g)  # θ starts from the model as received
            for d in batches(fed, c, cfg.batch_size):
                for _ in range(cfg.pfedme_k):  # K steps on h(θ; w, D) = f(θ; D) + λ/2 ‖θ − w‖²
                    theta = state(sgd(module(sim.model, theta), [d], plr, extra=lambda k, p, w=w: lam * (p - w[k])))
                w = {k: w[k] - lr * lam * (w[k] - theta[k]) for k in w}  # Algorithm 1, line 8
            local[c], personal[c] = w, theta
        avg = mean(local, fed.train_sizes)
        g = {k: (1 - beta) * g[k] + beta * avg[k] for k in g}
    _close(sim.global_params, g, atol=tol(device, STEP_TOL))
    for c in CLIENTS:
        _close(_row(sim.local_params, c), local[c], atol=tol(device, STEP_TOL))
        _close(_row(sim.state.params, c), personal[c], atol=tol(device, STEP_TOL))
    assert (run.rounds[["bytes_up", "bytes_down"]] == 5 * sim.setup.param_bytes()).all().all()  # θ_i stays home


def test_pfedme_with_one_step_lr_lambda_one_and_beta_one_is_fedavg(ragged, device):
    # K = 1 and lr·λ = 1: each batch starts θ at w, takes one plain SGD step (plr), and w becomes θ. Bit for
    # bit on the loop backend, where both run a client at a time (vectorised, pFedMe's step is vmapped and
    # FedAvg's batched: equal to float rounding)
    cfg = small_cfg(device=device, **COMMON, rounds=3, shuffle=True, join_ratio=0.6, backend="loop")
    sim_p, _ = run_sim(cfg.replace(algo="pfedme", lr=0.5, pfedme_lambda=2.0, pfedme_k=1, pfedme_plr=0.1,
                                   pfedme_beta=1.0), ragged)
    sim_f, _ = run_sim(cfg.replace(algo="fedavg", lr=0.1), ragged)
    for part in ("global_params", "local_params"):
        for k, v in getattr(sim_f, part).items():
            assert torch.equal(getattr(sim_p, part)[k], v), (part, k)


def test_pfedme_resumes_with_its_personal_models(ragged, tmp_path, device):
    cfg = small_cfg(device=device, **COMMON, rounds=3, algo="pfedme+ala", shuffle=True, join_ratio=0.6)
    full_sim, full = run_sim(cfg, ragged)
    ckpt = tmp_path / "ckpt.pt"
    with pytest.raises(RunCancelled):
        Simulation(cfg, ragged).run(progress=False, callback=lambda sim, row: row["round"] < 2, checkpoint=ckpt)
    resumed_sim = Simulation(cfg, ragged)
    assert resumed_sim.load_checkpoint(ckpt) and resumed_sim.round == 2
    assert_same_run(full_sim, full, resumed_sim, resumed_sim.run(progress=False))


# -- PartialFed ----------------------------------------------------------------------------------------


def test_two_partialfed_rounds_are_its_paper(ragged, device):
    cfg = small_cfg(device=device, **COMMON, rounds=2, algo="partialfed", backend="loop")  # the top block (fc) stays local
    sim, run = run_sim(cfg, ragged)
    fed = sim.data  # the clients' data on the run's device
    g0 = state(sim.model)
    top = {"fc.weight", "fc.bias"}
    g, own = dict(g0), {c: dict(g0) for c in CLIENTS}
    for _ in (1, 2):
        for c in CLIENTS:  # load G below the top block, keep the client's own top block; train everything
            start = {k: own[c][k] if k in top else g[k] for k in g}
            own[c] = state(sgd(module(sim.model, start), batches(fed, c, cfg.batch_size), cfg.lr))
        avg = mean(own, fed.train_sizes)
        g = {k: g[k] if k in top else avg[k] for k in g}
    _close(sim.global_params, g, atol=tol(device, STEP_TOL))
    for c in CLIENTS:
        _close(_row(sim.local_params, c), own[c], atol=tol(device, STEP_TOL))
    loaded = sim.setup.param_bytes([k for k in g0 if k not in top])
    assert (run.rounds["bytes_up"] == 5 * loaded).all() and (run.rounds["bytes_down"] == 5 * loaded).all()


@pytest.mark.parametrize(("blocks", "other"), [(0, "fedavg"), (3, "local"), (99, "local")])
def test_partialfed_loading_every_layer_is_fedavg_and_none_is_local(blocks, other, ragged):
    cfg = small_cfg(**COMMON, rounds=3, shuffle=True, join_ratio=0.6)
    sim_p, run_p = run_sim(cfg.replace(algo="partialfed", partialfed_local_blocks=blocks), ragged)
    sim_o, run_o = run_sim(cfg.replace(algo=other), ragged)
    assert_same_run(sim_p, run_p, sim_o, run_o)


def test_partialfed_keeps_batch_norm_local():
    net = BlockNet({"conv": nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2)), "fc": nn.Linear(2, 3)})
    assert kept_local(net, 0, batch_norm=True) == {"conv.1.weight", "conv.1.bias"}
    assert kept_local(net, 1, batch_norm=False) == {"fc.weight", "fc.bias"}
    assert kept_local(net, 0, batch_norm=False) == set()


# -- PartialFed-Adaptive -------------------------------------------------------------------------------


def test_two_partialfed_adaptive_rounds_are_its_rule(ragged, device):
    # round 1: every logit 0 and L = G, so its gradient is 0 and every layer loads G (FedAvg's round). Round 2,
    # each client: one straight-through Gumbel-sigmoid step of its logits on its first batch, then G into the
    # layers whose logit is ≥ 0 and its own model elsewhere (transcribed with an nn.Module and autograd)
    cfg = small_cfg(device=device, **COMMON, rounds=2, algo="partialfed-adaptive", partialfed_lr=5.0,
                    partialfed_tau=0.5, backend="loop", snapshot_clients="all")
    sim, run = run_sim(cfg, ragged)
    fed, g0 = sim.data, state(sim.model)
    groups = layers(sim.model)
    assert groups == [["fc1.1.weight", "fc1.1.bias"], ["fc2.0.weight", "fc2.0.bias"], ["fc.weight", "fc.bias"]]
    own = {c: state(sgd(module(sim.model, g0), batches(fed, c, cfg.batch_size), cfg.lr)) for c in CLIENTS}
    g = mean(own, fed.train_sizes)
    starts, logits = {}, {}
    for c in CLIENTS:
        u = generator(cfg.seed, 2, c, PARTIALFED_NOISE).uniform(1e-12, 1.0, len(groups))
        noise = torch.as_tensor(np.log(u) - np.log1p(-u), dtype=torch.float32, device=device)
        s = torch.zeros(len(groups), device=device, requires_grad=True)
        soft = torch.sigmoid((s + noise) / cfg.partialfed_tau)
        a = (soft > 0.5).float() + soft - soft.detach()
        theta = {n: own[c][n] + a[i] * (g[n] - own[c][n]) for i, names in enumerate(groups) for n in names}
        m = module(sim.model, {k: v.detach() for k, v in theta.items()})
        xb, yb = batches(fed, c, cfg.batch_size)[0]
        out = torch.func.functional_call(m, theta, (xb,))
        (grad,) = torch.autograd.grad(F.cross_entropy(out, yb), [s])
        logits[c] = (s - cfg.partialfed_lr * grad).detach()
        starts[c] = {n: g[n] if logits[c][i] >= 0 else own[c][n] for i, names in enumerate(groups) for n in names}
    # the logits: the same gradient through other kernels (STEP_TOL; measured on the CPU 1.5e-8); the starts
    # copy whole layers, so once the decisions agree they agree to the round-1 models' rounding
    torch.testing.assert_close(sim.state.s, torch.stack([logits[c] for c in CLIENTS]), atol=tol(device, STEP_TOL),
                               rtol=0)
    mixed = set()
    for c in CLIENTS:  # round 2's starts: whole layers of G or of the client's own model
        flat = torch.from_numpy(run.arrays[f"snap_start/{c}"][1]).to(device)
        want = torch.cat([starts[c][k].reshape(-1) for k in g0])
        torch.testing.assert_close(flat, want, atol=tol(device, STEP_TOL), rtol=0)
        mixed |= {bool(v >= 0) for v in logits[c]}
    assert mixed == {True, False}  # some layers loaded G, some stayed local
    round1 = run.arrays["snap_start/0"][0]
    assert np.array_equal(round1, torch.cat([v.reshape(-1) for v in g0.values()]).cpu().numpy())  # loads all


def test_partialfed_adaptive_without_a_strategy_step_is_fedavg(ragged):
    # η_s = 0: the logits stay 0, every layer loads G every round, and the server averages whole models
    cfg = small_cfg(**COMMON, rounds=3, shuffle=True, join_ratio=0.6)
    sim_p, run_p = run_sim(cfg.replace(algo="partialfed-adaptive", partialfed_lr=0.0), ragged)
    sim_o, run_o = run_sim(cfg.replace(algo="fedavg"), ragged)
    for part in ("global_params", "local_params"):
        for k, v in getattr(sim_o, part).items():
            assert torch.equal(getattr(sim_p, part)[k], v), (part, k)
    assert run_p.clients["test_loss"].equals(run_o.clients["test_loss"])
    assert run_p.rounds["bytes_up"].equals(run_o.rounds["bytes_up"])


# -- all of them ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("algo", ["perfedavg", "pfedme", "partialfed", "partialfed-adaptive"])
def test_vectorised_matches_loop_to_float_rounding(algo, ragged, device):
    cfg = small_cfg(device=device, algo=algo, **COMMON, rounds=2, shuffle=True, join_ratio=0.6, drop_last=False)
    sim_v, v = run_sim(cfg, ragged)
    sim_l, lo = run_sim(cfg.replace(backend="loop"), ragged)
    np.testing.assert_allclose(v.clients["test_loss"], lo.clients["test_loss"], atol=tol(device, RUN_TOL))
    for k in sim_l.param_names:
        torch.testing.assert_close(sim_v.local_params[k], sim_l.local_params[k], atol=tol(device, RUN_TOL), rtol=0)


@pytest.mark.parametrize("algo", ["perfedavg", "pfedme", "partialfed"])
def test_ala_on_each(algo, ragged):
    _, run = run_sim(small_cfg(**COMMON, rounds=3, s=60, algo=algo + "+ala"), ragged)
    assert len(run.ala) > 0 and run.config.algorithm.label.endswith("+ALA")
    # PartialFed keeps its top block local: ALA weighs the top block of what it loads
    assert run.meta["ala_params"] == (["fc2.0.weight", "fc2.0.bias"] if algo == "partialfed" else
                                      ["fc.weight", "fc.bias"])
    assert run.summary()["best_acc"] > 0
