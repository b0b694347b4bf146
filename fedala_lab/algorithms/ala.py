"""ALA: Adaptive Local Aggregation (FedALA, Zhang et al., AAAI 2023), as SPEC §1 describes it.

For client i in round t, with its old local model L = Θ_i^{t-1} and the received global model G:

    Θ̂ = L + (G − L) ⊙ [1 for the lower layers ; W for the p top blocks]           (Eq. 4)
    W ← clip_[0,1]( W − η · ∂ℓ/∂Θ̂_high ⊙ (G − L)_high )                           (Eq. 5, App. A)

W holds one weight per parameter of the top p blocks, starts at all ones and is carried from round to
round. Only W learns; ℓ is cross-entropy on a window of s % of the client's train split. Local training
then starts from Θ̂.

Matching the public reference code (FedALA / PFLlib ``ALA.py``):

- round 1 is skipped (every local model equals the global one); the reference detects it by comparing the
  first parameter tensors, we by the round number;
- the s % sample is one contiguous window of the client's train split at a random offset
  (``randint(0, n − ⌊s·n⌋)``), walked in order in batches of the local batch size, last partial batch kept;
- W is updated after every batch and Θ̂ rebuilt from L, G, W;
- start phase (the client's first ALA, normally round 2): passes repeat until more than ``num_pre_loss``
  pass losses exist and the std of the last ``num_pre_loss`` is below ``threshold``, where a pass's loss
  is the loss of its LAST batch; later rounds make exactly one pass;
- ALA runs for every client every round (all clients are evaluated), not only the selected ones.

Departures, each an option with the reference available:

- ``max_start_epochs`` caps the start phase (the reference loops forever when the threshold is never met);
  clients that hit the cap are recorded in ``run.meta["capped_clients"]`` and reported;
- ``ala_all_clients=False`` runs ALA for the selected clients only; ``ala_after=K`` keeps plain FedAvg
  initialisation for rounds ≤ K (the paper's Fig. 4 protocol);
- a client whose window is empty (s % of a tiny split rounds to 0 samples; the reference crashes) skips
  weight learning and blends with its current W;
- when the blocks below the top p hold no batch norm or dropout, their output on the window is the same
  for every batch and pass (they are G's, frozen): we compute those features once per round and learn W on
  the head alone. This is exact, not an approximation (PERFORMANCE.md: weights agree to 3e-7).
"""

from __future__ import annotations

import itertools

import numpy as np
import torch
from torch.func import functional_call, grad_and_value

from ..compute.rng import ALA_WINDOW, generator
from ..compute.steps import weighted_ce
from ..models import top_block_start
from .fedavg import receive_global

_STATEFUL = (torch.nn.modules.batchnorm._BatchNorm, torch.nn.Dropout)


def blend(local: torch.Tensor, glob: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Eq. 4 for one tensor: L + (G − L) ⊙ W."""
    return local + (glob - local) * weight


def make_ala_step(model: torch.nn.Module, eta: float, head_start: int):
    """One weight-learning step of Eq. 5 for one client, on one batch.

    carry: ``w`` (W), ``l`` (L's top-block params), ``buffers`` (scratch BN buffers);
    shared: ``g`` (G's top-block params), ``lower`` (G's lower params; empty when features are cached).
    """

    def loss_fn(theta_high, lower, buffers, x, y, mask):
        out = functional_call(model, ({**lower, **theta_high}, buffers), (x,), {"start": head_start})
        return weighted_ce(out, y, mask)

    g_and_v = grad_and_value(loss_fn)

    def step(carry, shared, x, y, mask):
        w, local, glob = carry["w"], carry["l"], shared["g"]
        theta = {n: blend(local[n], glob[n], w[n]) for n in w}
        grads, loss = g_and_v(theta, shared["lower"], carry["buffers"], x, y, mask)
        new_w = {n: torch.clamp(w[n] - eta * grads[n] * (glob[n] - local[n]), 0, 1) for n in w}
        return {"w": new_w}, loss.reshape(1)

    return step


def setup(sim) -> None:
    """W = 1 for the top-p parameters of every client; no client has had its start phase yet."""
    start = top_block_start(sim.model, sim.cfg.p)
    names = [n for n in sim.param_names if _block_index(sim.model, n) >= start]
    lower_blocks = list(sim.model.children())[:start]
    sim.ala = _ALAInfo(
        names=names,
        start=start,
        cached=not any(isinstance(m, _STATEFUL) for b in lower_blocks for m in b.modules()),
        step=None,
    )
    sim.ala.step = make_ala_step(sim.model, sim.cfg.eta, start if sim.ala.cached else 0)
    for n in names:
        sim.algo_state[f"ala.w.{n}"] = torch.ones_like(sim.local_params[n])
    sim.algo_state["ala.started"] = torch.zeros(sim.num_clients, dtype=torch.bool, device=sim.device)


class _ALAInfo:
    def __init__(self, names, start, cached, step):
        self.names, self.start, self.cached, self.step = names, start, cached, step


def _block_index(model, param_name: str) -> int:
    return [n for n, _ in model.named_children()].index(param_name.split(".", 1)[0])


def plain_round(sim, t: int) -> bool:
    """Rounds that receive G as it is: round 1 (every local model equals G) and rounds ≤ ala_after."""
    return t == 1 or t <= sim.cfg.ala_after


def lower_names(sim, names=None) -> list[str]:
    """Those of ``names`` (default: all) below ALA's top p blocks: Eq. 4's "1" part takes them from G."""
    top = set(sim.ala.names)
    return [n for n in (sim.param_names if names is None else names) if n not in top]


def blend_top(sim, clients: torch.Tensor, weights: dict, local: dict | None = None) -> None:
    """Eq. 4, top blocks: Θ̂ = L + (G − L) ⊙ W for the parameters in ``weights`` (L: ``local`` or current)."""
    for n, w in weights.items():
        loc = sim.local_params[n][clients] if local is None else local[n]
        sim.local_params[n][clients] = blend(loc, sim.global_params[n], w)


def ala_initialise(sim, t: int, clients: torch.Tensor) -> int:
    """Local initialisation by ALA for ``clients`` (Algorithm 1, lines 3–10 of the paper)."""
    cfg, info = sim.cfg, sim.ala
    if plain_round(sim, t):
        return receive_global(sim, t, clients)
    glob = sim.global_params
    lower = lower_names(sim)
    receive_global(sim, t, clients, names=lower)

    ids = clients.cpu().numpy()
    windows = []
    for c in ids:
        n = int(sim.train_sizes[c])
        m = int(cfg.s / 100 * n)
        offset = int(generator(cfg.seed, t, int(c), ALA_WINDOW).integers(0, n - m + 1))
        windows.append(sim.train_offsets[c] + offset + np.arange(m))

    # Inputs the weight-learning steps read: the window rows, or G's lower-block features of them.
    all_rows = torch.as_tensor(np.concatenate(windows) if windows else np.zeros(0, np.int64),
                               device=sim.device)
    x = sim.data.train_x[all_rows]
    y = sim.data.train_y[all_rows]
    if info.cached and info.start > 0:
        x = sim.features(glob, x, stop=info.start)
    starts = np.concatenate([[0], np.cumsum([len(w) for w in windows])])
    batches = [[np.arange(a + j, min(a + j + cfg.batch_size, b)) for j in range(0, b - a, cfg.batch_size)]
               for a, b in itertools.pairwise(starts)]

    carry = {
        "w": {n: sim.algo_state[f"ala.w.{n}"][clients] for n in info.names},
        "l": {n: sim.local_params[n][clients] for n in info.names},
        "buffers": {} if info.cached else {n: b[clients] for n, b in sim.local_buffers.items()},
    }
    shared = {"g": {n: glob[n] for n in info.names},
              "lower": {} if info.cached else {n: glob[n] for n in lower}}

    started = sim.algo_state["ala.started"][clients].cpu().numpy()
    losses: list[list[float]] = [[] for _ in ids]
    active = np.array([len(w) > 0 for w in windows])
    capped = []
    epoch = 0
    while active.any():
        act = np.flatnonzero(active)
        act_t = torch.as_tensor(act, device=sim.device)
        sub = _take(carry, act_t)
        plan = sim.plan_from([batches[i] for i in act])
        sub, aux = sim.run_steps(info.step, sub, shared, plan, x, y, train=True)
        _put(carry, act_t, sub)
        epoch += 1
        nb = plan.num_steps
        for j, i in enumerate(act):
            last, mean = float(aux[j, nb[j] - 1, 0]), float(np.nanmean(aux[j, : nb[j], 0]))
            losses[i].append(last)
            if started[i]:
                active[i] = False  # after the start phase: exactly one pass
            elif len(losses[i]) > cfg.num_pre_loss and np.std(losses[i][-cfg.num_pre_loss:]) < cfg.threshold:
                active[i] = False  # converged
            elif epoch >= cfg.max_start_epochs:
                active[i] = False
                capped.append(int(ids[i]))
            sim.recorder.ala_pass(t, int(ids[i]), epoch, last, mean, start_phase=not started[i],
                                  capped=int(ids[i]) in capped and not active[i])

    for n in info.names:
        sim.algo_state[f"ala.w.{n}"][clients] = carry["w"][n]
    blend_top(sim, clients, carry["w"], carry["l"])
    sim.algo_state["ala.started"][clients] = True
    sim.recorder.ala_weights(t, ids, carry["w"])
    if capped:
        sim.note_capped(t, capped)
    return len(clients) * sim.param_bytes(sim.param_names)


def _take(tree: dict, idx: torch.Tensor) -> dict:
    return {k: _take(v, idx) if isinstance(v, dict) else v.index_select(0, idx) for k, v in tree.items()}


def _put(tree: dict, idx: torch.Tensor, src: dict) -> None:
    for k, v in src.items():
        if isinstance(v, dict):
            _put(tree[k], idx, v)
        else:
            tree[k].index_copy_(0, idx, v)
