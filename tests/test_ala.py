"""ALA ≡ a direct transcription of Eq. 4–5 and of the reference procedure (docs/design.md#ala).

The expected values are computed here, never by the library's own helpers (``blend``, ``window``, the batch
plan): Eq. 4 and the s % window are written out below. Comparisons against the reference transcription, which
runs nn.Modules one client at a time where the engine runs its vmapped steps, are to float rounding
(``RUN_TOL``, conftest: measured 2.4e-7 in a pass loss, 1.2e-7 in W); the rest is bit for bit.
"""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import RUN_TOL, STEP_TOL, assert_frames_exact, small_cfg, tol

from fedala_lab.algorithms.ala import blend, make_ala_step
from fedala_lab.engine.simulate import Simulation
from fedala_lab.models import BlockNet


def eq4(local, glob, weight):
    """Eq. 4 for one weighted tensor, written out in numpy float32: Θ̂ = L + (G − L) ⊙ W."""
    f32 = [np.asarray(torch.as_tensor(v).detach().cpu(), dtype=np.float32) for v in (local, glob, weight)]
    lo, g, w = f32
    return torch.from_numpy(lo + (g - lo) * w)


def window_by_hand(n: int, s: float, seed: int, t: int, client: int) -> np.ndarray:
    """The rows of client ``client``'s s % sample in round t, written out from the reference and the run's
    random streams (docs/design.md#ala, #determinism): m = int(s / 100 · n) rows, the reference's
    ``int(rand_percent / 100 * len(train_data))`` (float arithmetic: s = 29, n = 100 gives 28), contiguous,
    from an offset uniform on 0 … n − m (its ``random.randint(0, n − m)``), drawn by a PCG64 generator seeded
    with the SeedSequence of (seed, round, client + 1, 3): 3 is ALA's window stream, client + 1 so that the
    server's −1 is 0."""
    m = int(s / 100 * n)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, t, client + 1, 3])))
    offset = int(rng.integers(0, n - m + 1))
    return np.arange(offset, offset + m)


def batches_by_hand(m: int, batch_size: int) -> list[np.ndarray]:
    """A window of m rows walked in order in batches of ``batch_size``, the last partial batch kept."""
    return [np.arange(a, min(a + batch_size, m)) for a in range(0, m, batch_size)]


def tiny_model():
    torch.manual_seed(0)
    return BlockNet({"fc1": torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU()),
                     "fc": torch.nn.Linear(4, 2)})


def test_one_ala_step_is_eq_4_and_5_by_hand():
    model = tiny_model()
    g = {n: p.detach().clone() for n, p in model.named_parameters()}
    torch.manual_seed(1)
    loc = {n: p + 0.3 * torch.randn_like(p) for n, p in g.items()}
    w = {n: torch.rand_like(g[n]) for n in ("fc.weight", "fc.bias")}
    x, y, eta = torch.randn(5, 3), torch.tensor([0, 1, 1, 0, 1]), 0.7

    # by hand: Θ̂_high = L + (G − L) ⊙ W; the lower layer is G's; ∂ℓ/∂W = ∂ℓ/∂Θ̂ ⊙ (G − L)
    th_w = (loc["fc.weight"] + (g["fc.weight"] - loc["fc.weight"]) * w["fc.weight"]).requires_grad_()
    th_b = (loc["fc.bias"] + (g["fc.bias"] - loc["fc.bias"]) * w["fc.bias"]).requires_grad_()
    h = torch.relu(x @ g["fc1.0.weight"].T + g["fc1.0.bias"])
    loss = F.cross_entropy(h @ th_w.T + th_b, y)
    loss.backward()
    want_w = torch.clamp(w["fc.weight"] - eta * th_w.grad * (g["fc.weight"] - loc["fc.weight"]), 0, 1)
    want_b = torch.clamp(w["fc.bias"] - eta * th_b.grad * (g["fc.bias"] - loc["fc.bias"]), 0, 1)

    # ours, as the engine calls it with cached features (head only) and without (full model)
    step_head = make_ala_step(model, eta, head_start=1)
    feats = model(x, stop=1).detach()
    new, got_loss = step_head({"w": w, "l": {n: loc[n] for n in w}, "buffers": {}},
                              {"g": {n: g[n] for n in w}, "lower": {}}, feats, y, torch.ones(5))
    # by hand and the library's step build different autograd graphs (matmuls against F.linear, a weighted
    # mean): one step's float rounding, STEP_TOL (conftest)
    torch.testing.assert_close(new["w"]["fc.weight"], want_w, atol=STEP_TOL, rtol=0)
    torch.testing.assert_close(new["w"]["fc.bias"], want_b, atol=STEP_TOL, rtol=0)
    assert got_loss.item() == pytest.approx(loss.item(), abs=STEP_TOL)
    step_full = make_ala_step(model, eta, head_start=0)
    new2, _ = step_full({"w": w, "l": {n: loc[n] for n in w}, "buffers": {}},
                        {"g": {n: g[n] for n in w}, "lower": {k: g[k] for k in ("fc1.0.weight", "fc1.0.bias")}},
                        x, y, torch.ones(5))
    torch.testing.assert_close(new2["w"]["fc.weight"], want_w, atol=STEP_TOL, rtol=0)


def test_blend_is_eq_4_written_out():
    torch.manual_seed(0)
    loc, glob = torch.randn(1000), torch.randn(1000)
    for w in (torch.rand(1000), torch.zeros(1000), torch.ones(1000)):
        assert torch.equal(blend(loc, glob, w), eq4(loc, glob, w))  # elementwise: the same floats
    assert torch.equal(blend(loc, glob, torch.zeros(1000)), loc)  # W = 0: L exactly
    # W = 1 gives G only up to the rounding of L + (G − L): at most half an ulp of |G − L| and of the sum,
    # so ≤ 2^-23 · max(|L|, |G|) here (2.4e-7 measured for these |·| ≤ 4)
    bound = 2.0 ** -23 * torch.maximum(loc.abs(), glob.abs())
    assert ((blend(loc, glob, torch.ones(1000)) - glob).abs() <= bound).all()


def test_the_window_and_its_batches_are_the_references(ragged):
    """The rows the engine's ALA learns W on, each round and client, against :func:`window_by_hand` and
    :func:`batches_by_hand` (s = 70: partial last batches; rounds 2–4: a start phase, then one pass)."""
    cfg = small_cfg(algo="fedala", rounds=4, s=70, batch_size=4)
    sim = Simulation(cfg, ragged)
    learner = sim.algo.learner
    seen, plans = [], []
    learn, plan = learner.learn, learner.plan
    learner.learn = lambda w, loc, g, x, y, lengths, *a, **k: (seen.append((x.clone(), y.clone(), list(lengths))),
                                                               learn(w, loc, g, x, y, lengths, *a, **k))[1]
    learner.plan = lambda lengths, device: (plans.append(plan(lengths, device)), plans[-1])[1]
    for t in range(1, cfg.rounds + 1):
        sim.run_round(t)
        sim.round = t
        if t == 1:
            assert not seen  # round 1 is skipped
            continue
        x, y, lengths = seen.pop()
        bp = plans.pop()
        first = 0
        for c in range(5):
            xc, yc = sim.data.client_train(c)
            rows = window_by_hand(len(xc), cfg.s, cfg.seed, t, c)
            assert lengths[c] == len(rows)
            assert torch.equal(x[first:first + len(rows)], xc[rows]) and torch.equal(y[first:first + len(rows)],
                                                                                       yc[rows])
            want = batches_by_hand(len(rows), cfg.batch_size)
            got = [bp.rows[c, k, :bp.sizes[c, k]].cpu().numpy() - first for k in range(int(bp.num_steps[c]))]
            assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want)), (t, c)
            first += len(rows)
        assert first == len(x)
    assert [len(r) for r in (window_by_hand(n, 70, 0, 2, 0) for n in (23, 7, 41, 12, 30))] == [16, 4, 28, 8, 21]
    assert len(window_by_hand(100, 29, 0, 2, 0)) == 28  # the reference's float arithmetic, kept


def reference_ala(model, glob_state, local_state, weights, x_window, y_window, batch_size, layer_idx, eta,
                  start_phase, threshold, num_pre_loss, max_epochs):
    """A transcription of the public reference ``ALA.adaptive_local_aggregation`` (module-based)."""
    global_model = copy.deepcopy(model)
    global_model.load_state_dict(glob_state)
    local_model = copy.deepcopy(model)
    local_model.load_state_dict(local_state)
    for m in (global_model, local_model):  # as freshly built nn.Modules are
        m.requires_grad_(True)
    params_g = list(global_model.parameters())
    params = list(local_model.parameters())
    for param, param_g in zip(params[:-layer_idx], params_g[:-layer_idx]):
        param.data = param_g.data.clone()
    model_t = copy.deepcopy(local_model)
    params_t = list(model_t.parameters())
    params_p, params_gp, params_tp = params[-layer_idx:], params_g[-layer_idx:], params_t[-layer_idx:]
    for param in params_t[:-layer_idx]:
        param.requires_grad = False
    optimizer = torch.optim.SGD(params_tp, lr=0)
    for param_t, param, param_g, weight in zip(params_tp, params_p, params_gp, weights):
        param_t.data = param + (param_g - param) * weight
    losses, cnt = [], 0
    while True:
        for i in range(0, len(x_window), batch_size):
            xb, yb = x_window[i:i + batch_size], y_window[i:i + batch_size]
            optimizer.zero_grad()
            loss_value = F.cross_entropy(model_t(xb), yb)
            loss_value.backward()
            for param_t, param, param_g, weight in zip(params_tp, params_p, params_gp, weights):
                weight.data = torch.clamp(weight - eta * (param_t.grad * (param_g - param)), 0, 1)
            for param_t, param, param_g, weight in zip(params_tp, params_p, params_gp, weights):
                param_t.data = param + (param_g - param) * weight
        losses.append(loss_value.item())
        cnt += 1
        if not start_phase:
            break
        if len(losses) > num_pre_loss and np.std(losses[-num_pre_loss:]) < threshold:
            break
        if cnt >= max_epochs:  # the project's cap (the reference has none)
            break
    for param, param_t in zip(params_p, params_tp):
        param.data = param_t.data.clone()
    return local_model.state_dict(), weights, losses


@pytest.mark.parametrize("p,layer_idx", [(1, 2), (2, 4)])
def test_engine_ala_matches_the_reference_transcription(ragged, p, layer_idx, device):
    # module by module against the engine's vmapped steps: float rounding, RUN_TOL (conftest; measured 1.2e-7
    # in W and in the pass losses over a 30-pass start phase and a later round)
    cfg = small_cfg(algo="fedala", p=p, rounds=3, threshold=0.05, s=70, batch_size=4, max_start_epochs=30,
                    device=device)
    at = tol(device, RUN_TOL)
    sim = Simulation(cfg, ragged)
    model = sim.model
    names = sim.param_names
    weights = {c: [torch.ones_like(sim.global_params[n]) for n in names[-layer_idx:]] for c in range(5)}
    for t in (1, 2, 3):
        glob = {n: v.clone() for n, v in sim.global_params.items()}
        local = {n: v.clone() for n, v in sim.local_params.items()}
        if t > 1:  # compute what the reference would produce for each client
            expected = {}
            for c in range(5):
                rows = window_by_hand(int(sim.train_sizes[c]), cfg.s, cfg.seed, t, c)
                x, y = sim.data.client_train(c)
                expected[c] = reference_ala(
                    model, glob, {k: local[k][c] for k in names}, weights[c], x[rows], y[rows],
                    cfg.batch_size, layer_idx, cfg.eta, start_phase=(t == 2), threshold=cfg.threshold,
                    num_pre_loss=cfg.num_pre_loss, max_epochs=cfg.max_start_epochs)
        sim.run_round(t)
        sim.round = t
        if t > 1:
            # after run_round, local models were trained; compare the ALA outcome via the start snapshot
            for c in range(5):
                _, w, losses = expected[c]
                for j, name in enumerate(names[-layer_idx:]):
                    torch.testing.assert_close(sim.state.weights[name][c], w[j], atol=at, rtol=0)
                rows = sim.recorder.tables["ala"]
                got = [l for r, cl, l in zip(rows["round"], rows["client"], rows["loss"]) if r == t and cl == c]
                np.testing.assert_allclose(got, losses, atol=at)
            if t == 2:
                assert max(len(expected[c][2]) for c in range(5)) > 1  # a real start phase happened
            if t == 3:
                assert all(len(expected[c][2]) == 1 for c in range(5))


def test_initialised_model_is_eq_4(ragged, device):
    # Θ̂ = L + (G − L) ⊙ [1 lower ; W top], W the one learned this round: bit for bit, for every client
    cfg = small_cfg(algo="fedala", rounds=3, snapshot_clients="all", device=device)
    sim = Simulation(cfg, ragged)
    for t in (1, 2, 3):
        glob = {n: v.clone() for n, v in sim.global_params.items()}
        local = {n: v.clone() for n, v in sim.local_params.items()}
        sim.run_round(t)
        sim.round = t
        if t == 1:
            continue
        assert list(sim.state.weights) == ["fc.weight", "fc.bias"]
        for c in range(5):
            w = {n: sim.state.weights[n][c] for n in ("fc.weight", "fc.bias")}
            assert not all(bool((v == 1).all()) for v in w.values())  # W has learned
            want = torch.cat([(eq4(local[n][c], glob[n], w[n]) if n in w else glob[n].cpu()).reshape(-1)
                              for n in sim.param_names])
            assert torch.equal(sim.recorder.snaps[f"start/{c}"][-1], want), (t, c)  # snapshots: on the CPU


# ALA on another method blends what that method gives a client (its "local initialisation") with the client's
# own model. The oracle needs none of the library's code: X+ALA runs as X through round 1 (ALA skips it), so in
# round 2 both start from the same local models L; X's round-2 initialisation Θ_X (what X gives each client:
# G, its own u_i, the body only) is read from X's own run, and X+ALA's must be L + (Θ_X − L) ⊙ W on the
# weighted parameters and Θ_X on all others.
ALA_ON = {"fedprox": "fc", "ditto": "fc", "fedamp": "fc", "fedphp": "fc", "perfedavg": "fc", "pfedme": "fc",
          "fedrep": "fc1.1", "partialfed": "fc1.1", "fedlama": "fc"}  # the weighted block: top of what X sends


@pytest.mark.parametrize("algo", list(ALA_ON))
def test_x_plus_ala_initialises_with_eq_4_on_what_x_gives(algo, ragged):
    kw = {"tau0": 2, "phi": 2, "shuffle": True} if algo == "fedlama" else {}  # round 2 mid-window: Eq. 4, W unlearned
    cfg = small_cfg(algo=algo, rounds=2, s=60, snapshot_clients="all", **kw)
    x_sim = Simulation(cfg, ragged)
    x_sim.run(progress=False)
    sim = Simulation(cfg.replace(algo=algo + "+ala"), ragged)
    sim.run_round(1)
    sim.round = 1
    local = {n: v.clone() for n, v in sim.local_params.items()}  # L: the clients' models after round 1
    sim.run_round(2)
    w = sim.state.weights  # W learned in round 2 (FedLAMA mid-window: still 1, Eq. 4 without learning)
    top = ALA_ON[algo]
    assert list(w) == [f"{top}.weight", f"{top}.bias"]
    if algo != "fedlama":
        assert not all(bool((v == 1).all()) for v in w.values())  # W has learned
    sizes = [v[0].numel() for v in sim.local_params.values()]
    for c in range(5):
        for k in ("start", "end"):  # round 1: X's run, bit for bit
            assert torch.equal(x_sim.recorder.snaps[f"{k}/{c}"][0], sim.recorder.snaps[f"{k}/{c}"][0]), (k, c)
        theta_x = dict(zip(sim.param_names, torch.split(x_sim.recorder.snaps[f"start/{c}"][1], sizes)))
        want = torch.cat([eq4(local[n][c].reshape(-1), theta_x[n], w[n][c].reshape(-1)) if n in w else theta_x[n]
                          for n in sim.param_names])
        assert torch.equal(sim.recorder.snaps[f"start/{c}"][1], want), c


def test_weights_held_at_one_give_fedavg_to_float_rounding(ragged, device):
    # η so small that W never leaves 1: ALA's initialisation is then FedAvg's overwrite, up to the rounding of
    # L + (G − L) · 1 (test_blend_is_eq_4_written_out), which SGD carries on: RUN_TOL (conftest), measured
    # 1.4e-7 over these 4 rounds
    base = small_cfg(rounds=4, shuffle=True, join_ratio=0.6, device=device)
    a = Simulation(base.replace(algo="fedavg"), ragged).run(progress=False)
    sim = Simulation(base.replace(algo="fedala", eta=1e-30), ragged)
    b = sim.run(progress=False)
    assert all(bool((w == 1).all()) for w in sim.state.weights.values())
    for c in ["test_loss", "init_loss", "trained_loss"]:
        np.testing.assert_allclose(a.clients[c], b.clients[c], atol=tol(device, RUN_TOL), err_msg=c)


def test_start_phase_is_capped_and_reported(ragged):
    cfg = small_cfg(algo="fedala", rounds=3, threshold=1e-12, max_start_epochs=4)
    with pytest.warns(UserWarning, match=r"hit max_start_epochs=4"):
        run = Simulation(cfg, ragged).run(progress=False)
    assert run.capped_clients == [0, 1, 2, 3, 4]
    start = run.ala[run.ala["round"] == 2]
    assert start.groupby("client")["epoch"].max().tolist() == [4] * 5
    assert start[start["capped"]]["epoch"].tolist() == [4] * 5
    later = run.ala[run.ala["round"] == 3]
    assert later.groupby("client")["epoch"].max().tolist() == [1] * 5 and not later["start_phase"].any()


def test_ala_after_keeps_fedavg_initialisation_until_round_k(ragged):
    cfg = small_cfg(algo="fedala", rounds=4, ala_after=2)
    run = Simulation(cfg, ragged).run(progress=False)
    assert sorted(set(run.ala["round"])) == [3, 4]
    assert run.ala[run.ala["round"] == 3]["start_phase"].all()
    fedavg = Simulation(cfg.replace(algo="fedavg"), ragged).run(progress=False)
    first = run.clients["round"] <= 3  # evaluation in round 3 happens after ALA: differs from there on
    before = run.clients["round"] <= 2  # ALA off: FedAvg, bit for bit
    assert_frames_exact(run.clients[before].drop(columns="seconds"), fedavg.clients[before].drop(columns="seconds"))
    assert not np.allclose(run.clients.loc[first, "test_loss"], fedavg.clients.loc[first, "test_loss"])


# -- the drop-in: ALA on any PyTorch model, in anyone's training loop -------------------------------


class _Chain(torch.nn.Module):
    """Not an nn.Sequential: a module that runs its children in its own forward."""

    def __init__(self, blocks):
        super().__init__()
        for name, block in blocks:
            self.add_module(name, block)

    def forward(self, x):
        for block in self.children():
            x = block(x)
        return x


def _as(kind, model):
    from collections import OrderedDict

    blocks = [(n, copy.deepcopy(b)) for n, b in model.named_children()]
    return {"blocknet": copy.deepcopy(model), "sequential": torch.nn.Sequential(OrderedDict(blocks)),
            "module": _Chain(blocks)}[kind]


@pytest.mark.parametrize("kind", ["blocknet", "sequential", "module"])
@pytest.mark.parametrize("p", [1, 2])
def test_drop_in_matches_the_engine_and_the_reference_transcription(ragged, kind, p, device):
    # the drop-in runs one client's module, the engine its vmapped steps, the reference nn.Modules: float
    # rounding, RUN_TOL (conftest; measured 2.4e-7 in a pass loss, 1.2e-7 in W and Θ̂)
    from fedala_lab.algorithms.ala import ALA

    cfg = small_cfg(algo="fedala", model="mlp", p=p, rounds=3, threshold=0.05, s=70, batch_size=4,
                    max_start_epochs=30, snapshot_clients="all", device=device)
    at = tol(device, RUN_TOL)
    sim = Simulation(cfg, ragged)
    names = sim.param_names
    layer_idx = 2 * p  # the reference counts parameter tensors: a weight and a bias per Linear block
    drop_ins, ref_w, states = {}, {}, {}
    for c in range(5):
        x, y = sim.data.client_train(c)
        model = _as(kind, sim.model)
        drop_ins[c] = ALA(model, x, y, p=p, eta=cfg.eta, s=cfg.s, batch_size=cfg.batch_size,
                          threshold=cfg.threshold, num_pre_loss=cfg.num_pre_loss,
                          max_start_epochs=cfg.max_start_epochs, seed=cfg.seed, client=c)
        ref_w[c] = [torch.ones_like(sim.global_params[n]) for n in names[-layer_idx:]]
    for t in (1, 2, 3):
        glob = {n: v.clone() for n, v in sim.global_params.items()}
        for c in range(5):
            local = {n: v[c].clone() for n, v in sim.local_params.items()}
            states[c] = drop_ins[c].adaptive_local_aggregation(glob, local)  # Θ̂ as a state dict
            if t > 1:
                rows = window_by_hand(int(sim.train_sizes[c]), cfg.s, cfg.seed, t, c)
                x, y = sim.data.client_train(c)
                want, ref_w[c], losses = reference_ala(
                    _as(kind, sim.model), glob, local, ref_w[c], x[rows], y[rows], cfg.batch_size,
                    layer_idx, cfg.eta, start_phase=(t == 2), threshold=cfg.threshold,
                    num_pre_loss=cfg.num_pre_loss, max_epochs=cfg.max_start_epochs)
                for j, n in enumerate(names[-layer_idx:]):  # ≡ the reference transcription
                    torch.testing.assert_close(drop_ins[c].weights[n], ref_w[c][j], atol=at, rtol=0)
                for n in names:
                    torch.testing.assert_close(states[c][n], want[n], atol=at, rtol=0)
                np.testing.assert_allclose(drop_ins[c].losses, losses, atol=at)
            else:
                assert drop_ins[c].weights is None and drop_ins[c].start_phase  # round 1: skipped
        sim.run_round(t)
        sim.round = t
        for c in range(5):  # ≡ the engine: its initialised model, W and pass losses
            start = sim.recorder.snaps[f"start/{c}"][-1]
            torch.testing.assert_close(torch.cat([states[c][n].reshape(-1) for n in names]).cpu(), start,
                                       atol=at, rtol=0)
            if t > 1:
                for n in names[-layer_idx:]:
                    torch.testing.assert_close(drop_ins[c].weights[n], sim.state.weights[n][c], atol=at, rtol=0)
                rows = sim.recorder.tables["ala"]
                got = [v for r, cl, v in zip(rows["round"], rows["client"], rows["loss"]) if r == t and cl == c]
                np.testing.assert_allclose(drop_ins[c].losses, got, atol=at)
    assert sum(sim.recorder.tables["ala"]["start_phase"]) > 5  # a real start phase happened


def test_drop_in_updates_a_module_in_place_and_keeps_its_buffers():
    from fedala_lab.algorithms.ala import ALA

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                              torch.nn.Dropout(0.1), torch.nn.Linear(8, 3))
    glob = copy.deepcopy(net)
    x, y = torch.randn(40, 6), torch.randint(0, 3, (40,))
    ala = ALA(["4.weight", "4.bias"], x, y, eta=1.0, s=50, batch_size=5, max_start_epochs=3)
    assert ala(local=net, glob=glob)["4.bias"] is not None and ala.weights is None  # local == global: skipped
    with torch.no_grad():
        for prm in net.parameters():
            prm.add_(0.5 * torch.randn_like(prm))
        net[1].running_mean.fill_(0.25)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    new = ala(local=net, glob=glob)
    assert ala.learner.start == 0 and not ala.learner.cached  # batch norm below the head: no cached features
    assert set(ala.weights) == {"4.weight", "4.bias"} and 1 <= len(ala.losses) <= 3 and not ala.start_phase
    for k, v in net.state_dict().items():
        assert torch.equal(v, new[k]), k
    assert torch.equal(net[0].weight, glob[0].weight)  # lower layers: G's
    assert torch.equal(net[1].running_mean, before["1.running_mean"])  # the client's statistics
    for n in ("4.weight", "4.bias"):  # the top: Eq. 4
        assert torch.equal(net.state_dict()[n], eq4(before[n], glob.state_dict()[n], ala.weights[n])), n
    ala(local=net, glob=glob)
    assert len(ala.losses) == 1  # after the start phase: one pass per call
