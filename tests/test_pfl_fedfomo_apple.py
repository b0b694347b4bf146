"""FedFomo and APPLE (the FedALA paper's pFL baselines that download many clients' models): rounds ≡ plain-torch
transcriptions of their papers, their oracles (FedFomo's weights and its combination with FedAvg's weights ≡
FedAvg; APPLE with uniform p and no p-learning personalises to the mean of the core models, with p on itself ≡
Local), the vectorised backend against the loop, and no +ALA on either (the FedALA paper adds none).

A transcription (nn.Modules, one client at a time) and the engine compute the same arithmetic in other orders:
they agree to float rounding, STEP_TOL for one or two rounds' models, RUN_TOL for losses and for runs of
several rounds (conftest says how large the measured differences are and why these sizes); so do the
vectorised and loop backends. FedFomo with FedAvg's weights and APPLE on itself are FedAvg and Local in other
arithmetic (a combination of downloaded models; a mixed model's kernels): float rounding too. A resumed run is
bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import RUN_TOL, STEP_TOL, assert_same_run, run_sim, small_cfg, tol
from pfl_oracles import batches, first_rows_batches, module, sgd, state

import fedala_lab as fl
from fedala_lab.algorithms import apple, fedfomo
from fedala_lab.engine.simulate import Simulation
from fedala_lab.errors import ConfigError, RunCancelled

COMMON = {"rounds": 2, "model": "mlp", "lr": 0.1, "batch_size": 4}


def _ce(params, template, x, y):
    with torch.no_grad():
        return F.cross_entropy(module(template, params)(x), y).item()


def _flat(params):
    return torch.cat([v.flatten() for v in params.values()])


# -- FedFomo -------------------------------------------------------------------------------------------


def test_fomo_weights_and_combination():
    # two clients: client 0 has three downloads (one harmful), client 1 two harmful ones
    gain = torch.tensor([0.3, 0.1, -0.2, -0.1, -0.4], dtype=torch.float64)
    dist = torch.tensor([1.0, 2.0, 1.0, 1.0, 3.0], dtype=torch.float64)
    owner = torch.tensor([0, 0, 0, 1, 1])
    w, mix = fedfomo.fomo_weights(gain, dist, owner, 2)
    raw = gain / (dist + fedfomo.EPS)
    torch.testing.assert_close(w, raw, atol=0, rtol=0)  # the same float64 division
    torch.testing.assert_close(mix, torch.stack([raw[0], raw[1], 0 * raw[0], 0 * raw[0], 0 * raw[0]])
                               / torch.tensor([raw[0] + raw[1]] * 3 + [1, 1], dtype=torch.float64), atol=0, rtol=0)
    # uniform weights 1/N over the N − 1 other models: the combination is the uniform mean of all N
    g = torch.Generator().manual_seed(0)
    models = {"a": torch.randn(4, 3, 2, generator=g), "b": torch.randn(4, 5, generator=g)}
    owner = torch.tensor([i for i in range(4) for _ in range(3)])
    picked = torch.tensor([j for i in range(4) for j in range(4) if j != i])
    out = fedfomo.fomo_combine(models, {k: v[picked] for k, v in models.items()}, torch.full((12,), 0.25), owner)
    for k, v in models.items():  # 0.25 · (a + b + c) + d against mean(): other sums, STEP_TOL
        torch.testing.assert_close(out[k], v.mean(0, keepdim=True).expand_as(v), atol=STEP_TOL, rtol=0)


def test_two_fedfomo_rounds_are_its_paper(ragged, device):
    cfg = small_cfg(device=device, **COMMON, algo="fedfomo", fomo_m=4, backend="loop")
    sim, run = run_sim(cfg, ragged)
    fed = sim.data  # the clients' data on the run's device
    g0, lr, n = state(sim.model), cfg.lr, fed.train_sizes
    val = [int(0.2 * k) for k in n]  # the last ⌊0.2·n⌋ rows validate, the first ones train

    def val_loss(params, c):
        x, y = fed.client_train(c)
        return _ce(params, sim.model, x[len(y) - val[c]:], y[len(y) - val[c]:])

    def train(params, c):
        return state(sgd(module(sim.model, params), first_rows_batches(fed, c, cfg.batch_size, n[c] - val[c]), lr))

    first = {c: train(g0, c) for c in range(5)}  # round 1: nothing uploaded yet, nothing downloaded
    affinity, final = torch.zeros(5, 5, dtype=torch.float64, device=device), {}
    for c in range(5):  # round 2: every client downloads the 4 others' round-1 models
        own, others = first[c], [j for j in range(5) if j != c]
        w = {j: (val_loss(own, c) - val_loss(first[j], c)) / ((_flat(first[j]) - _flat(own)).norm().item() + 1e-5)
             for j in others}
        total = sum(max(v, 0) for v in w.values())
        combined = {k: v + sum(max(w[j], 0) / total * (first[j][k] - v) for j in others) if total > 0 else v
                    for k, v in own.items()}
        final[c] = train(combined, c)
        for j in others:
            affinity[c, j] = w[j]
    for c, p in final.items():
        for k, v in p.items():
            torch.testing.assert_close(sim.local_params[k][c], v, atol=tol(device, STEP_TOL), rtol=0)
    # evaluated (PFLlib's order: evaluate, then train, which combines first): each client's model as its last
    # training left it, the initial model in round 1 and the round-1 model in round 2, never the combination
    for t, shown in ((1, {c: g0 for c in range(5)}), (2, first)):
        for c in range(5):
            x, y = fed.client_test(c)
            np.testing.assert_allclose(run.clients.query(f"round == {t}")["test_loss"].iloc[c],
                                       _ce(shown[c], sim.model, x, y), rtol=0, atol=tol(device, STEP_TOL))
    # an affinity is a difference of two float32 validation losses (≈ 1.3, from the engine's batched sums and
    # from one module call here) over a model distance: measured 4.3e-7 apart, 2.5e-6 relative, the losses'
    # rounding magnified by their cancellation; rtol 1e-5 is 4x that (was 1e-4)
    torch.testing.assert_close(sim.state.affinity, affinity, rtol=tol(device, 1e-5), atol=tol(device, STEP_TOL))
    model = sim.setup.param_bytes()
    assert run.rounds["bytes_down"].tolist() == [0, 5 * 4 * model]  # M models per client, from round 2
    assert run.rounds["bytes_up"].tolist() == [5 * model, 5 * model]


def test_fedfomo_picks_by_affinity(ragged):
    cfg = small_cfg(**COMMON, algo="fedfomo", fomo_m=2)
    sim, _ = run_sim(cfg, ragged)
    rnd = sim.round_view(3)
    sim.state.affinity[0] = torch.tensor([9.0, 0.5, -1.0, 2.0, 0.7], dtype=torch.float64)
    assert sim.algo.pick(rnd, 0) == [3, 4]  # its two highest, never itself
    sim.state.uploaded[3] = False  # only models the server holds
    assert sim.algo.pick(rnd, 0) == [4, 1]
    explore = small_cfg(**COMMON, algo="fedfomo", fomo_m=2, fomo_epsilon=1.0)
    sim_e, _ = run_sim(explore, ragged)
    picks = {tuple(sim_e.algo.pick(sim_e.round_view(t), 0)) for t in range(3, 40)}
    assert len(picks) > 3 and all(0 not in p for p in picks)  # random picks, never its own model


class FomoFedAvgWeights(fedfomo.FedFomo):
    """FedFomo whose mixing weights are FedAvg's: w̄_ij = n_j / Σ n for every downloaded model j."""

    def weights(self, rnd, clients, owner, picked, own, theirs):
        n = torch.as_tensor(rnd.data.train_sizes, dtype=torch.float64, device=rnd.device)
        return n[picked] / n.sum(), n[picked] / n.sum()


def test_fedfomo_with_fedavg_weights_is_fedavg_to_float_rounding(ragged, device):
    # every client downloads all others and keeps the rest of the weight, n_i / Σ n, on its own model: its
    # combination is FedAvg's mean of the round's uploads, which is FedAvg's next global model. Summed as
    # θ_i + Σ w_j (θ_j − θ_i) rather than Σ w_j θ_j: float rounding (STEP_TOL; RUN_TOL for 3 rounds' losses)
    fl.register_algorithm("fomo-fedavg", FomoFedAvgWeights, params=fedfomo.PARAMS, modifiers=())
    cfg = small_cfg(device=device, **{**COMMON, "rounds": 3}, shuffle=True, fomo_m=4, fomo_val=0.0)
    sim_f, f = run_sim(cfg.replace(algo="fomo-fedavg"), ragged)
    sim_a, _ = run_sim(cfg.replace(algo="fedavg"), ragged)
    for k in sim_a.param_names:
        torch.testing.assert_close(sim_f.local_params[k], sim_a.local_params[k], atol=tol(device, STEP_TOL), rtol=0)
    # FedFomo evaluates each client's last trained model (PFLlib's order), FedAvg G: round 3 shows FedAvg's
    # local models after round 2
    two, _ = run_sim(cfg.replace(algo="fedavg", rounds=2), ragged)
    want = two.evaluate(two.local_params, two.local_buffers, "test")
    np.testing.assert_allclose(f.clients.query("round == 3")["test_loss"],
                               want["loss_sum"] / want["num"], rtol=0, atol=tol(device, RUN_TOL))


# -- APPLE ---------------------------------------------------------------------------------------------


def test_two_apple_rounds_are_its_paper(ragged, device):
    cfg = small_cfg(device=device, **COMMON, algo="apple", apple_dr_lr=0.01, apple_mu=0.5, apple_fade_rounds=2,
                    backend="loop")
    sim, run = run_sim(cfg, ragged)
    fed = sim.data  # the clients' data on the run's device
    names = sim.param_names
    lr, dr, mu = cfg.lr, cfg.apple_dr_lr, cfg.apple_mu
    n = torch.as_tensor(fed.train_sizes, dtype=torch.float32, device=device)
    p, p0 = torch.full((5, 5), 0.2, device=device), n / n.sum()
    cores = {c: state(sim.model) for c in range(5)}
    shown = dict(cores)  # PFLlib's self.model: the initial model, then the mix its last batch was taken at
    for t, lam in ((1, 1.0), (2, 0.5)):  # λ(t) = (1 + cos(π(t − 1)/2))/2, fading over 2 rounds
        for c in range(5):  # evaluated (PFLlib's order: evaluate, then train): the model shown, before training
            x, y = fed.client_test(c)
            np.testing.assert_allclose(run.clients.query(f"round == {t}")["test_loss"].iloc[c],
                                       _ce(shown[c], sim.model, x, y), rtol=0, atol=tol(device, STEP_TOL))
        start, new = dict(cores), {}
        for c in range(5):
            own, pc = dict(start[c]), p[c].clone()
            for xb, yb in batches(fed, c, cfg.batch_size):
                mine = [own if j == c else start[j] for j in range(5)]
                mixed = {k: sum(pc[j] * mine[j][k] for j in range(5)) for k in names}
                m = module(sim.model, mixed)
                g = dict(zip(names, torch.autograd.grad(F.cross_entropy(m(xb), yb), list(m.parameters()))))
                g_p = torch.stack([sum((g[k] * mine[j][k]).sum() for k in names) for j in range(5)])
                own = {k: v - lr * pc[c] * g[k] for k, v in own.items()}  # ∂ℓ/∂θ_i = p_ii·g
                pc = pc - dr * (g_p + lam * mu * (pc - p0))
                shown[c] = mixed
            new[c], p[c] = own, pc
        cores = new
    for c in range(5):
        for k in names:
            torch.testing.assert_close(sim.local_params[k][c], cores[c][k], atol=tol(device, STEP_TOL), rtol=0)
    torch.testing.assert_close(sim.state.p, p, atol=tol(device, STEP_TOL), rtol=0)
    for c in range(5):  # what round 3 would show
        for k in names:
            torch.testing.assert_close(sim.state.shown[k][c], shown[c][k], atol=tol(device, STEP_TOL), rtol=0)
    model = sim.setup.param_bytes()
    assert run.rounds["bytes_down"].tolist() == [5 * 4 * model] * 2  # every client, the other N − 1 cores
    assert run.rounds["bytes_up"].tolist() == [5 * model] * 2


def test_apple_without_p_learning_keeps_p_uniform_and_shows_its_last_mix(ragged):
    cfg = small_cfg(**COMMON, algo="apple", apple_dr_lr=0.0)
    sim, run = run_sim(cfg, ragged)
    assert torch.equal(sim.state.p, torch.full((5, 5), 0.2))  # never learned
    # round 2 shows the mix at each client's last batch of round 1: the initial cores' uniform mix (the initial
    # model, as round 1 shows) for a client with one batch, its own core moved by its earlier steps otherwise
    rows = run.clients.set_index(["round", "client"])
    for c in range(5):
        moved = rows.loc[(2, c), "test_loss"] != rows.loc[(1, c), "test_loss"]
        assert moved == (rows.loc[(1, c), "local_steps"] > 1), c
    shown = sim.algo.personalise(sim.round_view(3))["params"]
    for k, v in sim.local_params.items():  # the mix of the last step, not of the trained cores
        assert shown[k].shape == v.shape and not torch.equal(shown[k], v)


class AppleOnItself(apple.APPLE):
    """APPLE whose relationship vectors start all on the client's own core model."""

    def init_state(self, setup):
        return apple.AppleState(torch.eye(setup.num_clients, device=setup.device), super().init_state(setup).shown)


def test_apple_with_p_on_itself_is_local_to_float_rounding(ragged, device):
    # p = e_i: the mixed model is the client's own and its step lr · 1 · g, Local's; but the step runs through
    # the mixed model's kernels, which round otherwise (4.5e-8 in the parameters after 3 rounds): STEP_TOL
    fl.register_algorithm("apple-self", AppleOnItself, params=apple.PARAMS, modifiers=())
    cfg = small_cfg(device=device, **{**COMMON, "rounds": 3}, shuffle=True, join_ratio=0.6)
    sim_a, a = run_sim(cfg.replace(algo="apple-self", apple_dr_lr=0.0), ragged)
    sim_l, lo = run_sim(cfg.replace(algo="local"), ragged)
    for k in sim_l.param_names:
        torch.testing.assert_close(sim_a.local_params[k], sim_l.local_params[k], atol=tol(device, STEP_TOL), rtol=0)
    # both show the initial model in round 1; later APPLE shows the model its last step was taken at, one step
    # before Local's trained model
    first = lo.clients["round"] == 1
    np.testing.assert_allclose(a.clients["test_loss"][first], lo.clients["test_loss"][first], rtol=0,
                               atol=tol(device, RUN_TOL))


# -- both ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("algo", ["fedfomo", "apple"])
def test_vectorised_matches_loop_to_float_rounding(algo, ragged, device):
    cfg = small_cfg(device=device, algo=algo, **{**COMMON, "rounds": 3}, shuffle=True, join_ratio=0.6, drop_last=False)
    sim_v, v = run_sim(cfg, ragged)
    sim_l, lo = run_sim(cfg.replace(backend="loop"), ragged)
    assert sim_v.setup.backend.name == "vectorised"
    np.testing.assert_allclose(v.clients["test_loss"], lo.clients["test_loss"], atol=tol(device, RUN_TOL))
    for k in sim_l.param_names:
        torch.testing.assert_close(sim_v.local_params[k], sim_l.local_params[k], atol=tol(device, RUN_TOL), rtol=0)


@pytest.mark.parametrize("algo", ["fedfomo", "apple"])
def test_no_ala_on_methods_that_download_many_models(algo):
    spec = fl.algorithms.registry.resolve(algo).base
    assert spec.modifiers == () and spec.category == "personalised aggregation"
    with pytest.raises(ConfigError):
        small_cfg(algo=algo + "+ala")


@pytest.mark.parametrize("algo", ["fedfomo", "apple"])
def test_resume_equals_uninterrupted(algo, ragged, tmp_path, device):
    # the state (FedFomo's server copies and affinities, APPLE's p) survives a checkpoint
    cfg = small_cfg(device=device, algo=algo, **{**COMMON, "rounds": 4}, checkpoint_every=2, shuffle=True, join_ratio=0.6,
                    fomo_m=2)
    sim_full, full = run_sim(cfg, ragged)
    ckpt = tmp_path / "ckpt.pt"
    with pytest.raises(RunCancelled):
        Simulation(cfg, ragged).run(progress=False, callback=lambda sim, row: row["round"] < 2, checkpoint=ckpt)
    sim = Simulation(cfg, ragged)
    assert sim.load_checkpoint(ckpt) and sim.round == 2
    assert_same_run(sim_full, full, sim, sim.run(progress=False))
