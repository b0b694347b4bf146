"""FedLAMA: layer-wise adaptive model aggregation (Lee, Zhang, He & Avestimehr, "Layer-wise Adaptive Model
Aggregation for Scalable Federated Learning", ICLR 2022 submission, arXiv 2110.10302; AAAI 2023).

FedAvg synchronises every parameter every τ0 local SGD steps. FedLAMA gives each layer l its own
interval τ_l ∈ {τ0, φ·τ0}: layers whose client copies agree are averaged less often
(docs/design.md#fedlama).

    one round = τ0 local SGD steps (``tau0``; ``local_steps`` may be left unset)
    at the end of round t the server averages the layers due (t mod τ_l/τ0 = 0) and measures
        d_l = Σ_i p_i ‖u_l − x_{i,l}‖² / (τ_l · dim(u_l))                   (unit model discrepancy)
    every φ rounds (φ·τ0 steps, when every layer is due) it re-assigns the intervals:
        sort layers by d_l ascending; for the first l of them
        δ_l = Σ d·dim / Σ_all d·dim   (their share of the discrepancy)
        λ_l = Σ dim / Σ_all dim       (their share of the parameters)
        the first layers get φ·τ0 while δ_l < 1 − λ_l; from the crossing on, layers keep τ0
    at the start of round t+1 every client overwrites the layers averaged at the end of round t

FedAvg is φ = 1 (every layer every round; tested to float tolerance on both backends). The pieces on the
shared loop (:func:`build`): ``init_state`` (:class:`LAMAState`: every layer's interval and count),
``select`` (the window-wise client selection below), ``initialise`` (receive only the layers synchronised
at the end of the previous round) and ``aggregate`` (average the layers due, measure d_l, count κ_l,
re-assign intervals). Communication: ``bytes_up`` = selected clients × bytes of
the layers averaged; ``bytes_down`` = clients initialised × bytes of the layers they receive; the
paper's cost C = Σ_l dim(u_l)·κ_l is derived from the recorded table (analysis/fedlama.py).

Recorded (``run.tables``, see Recorder.table_rows):

- ``lama_layers``: one row per (round, layer): ``round``, ``step`` (= round·τ0), ``layer``, ``dim``,
  ``interval`` (τ_l in steps during that round), ``synced`` (averaged at its end), ``d`` (unit discrepancy
  measured then, NaN if not synced), ``kappa`` (syncs so far);
- ``lama_adjust``: one row per (re-assignment, layer in ascending-d order): ``round``, ``rank`` (1…L),
  ``layer``, ``dim``, ``d``, ``delta`` (δ_rank), ``one_minus_lambda`` (1 − λ_rank), ``long`` (given φ·τ0),
  ``interval`` (the new τ_l in steps) — the curves of the paper's Fig. 1.

What a "layer" is here: one parameter tensor (a weight or a bias), as the authors' implementation does
(it walks ``model.trainable_variables``). Finer than blocks, so the rule can relax a large weight matrix
while keeping its block's small bias (or the output layer) frequent; δ and λ weigh every tensor by its
size, so tiny tensors barely move the crossing. The teach MLP has 6 such layers, the MNIST CNN 8.

Partial participation (``join_ratio`` < 1, the paper's "active ratio"): as in the authors' code, the active
clients are drawn once per φ·τ0-step window (when the whole model is synchronised) and keep training
until the window ends, so a layer averaged every φ rounds is averaged over the clients that trained it.
The ``select`` piece returns the draw of the window's first round (FedAvg's draw for that
round; with φ = 1 every round is a window, so selection equals FedAvg's). Inactive clients still receive
every synchronised layer (they are evaluated each round, as in the FedAvg reference), so an inactive
client always holds the server's current model.

Departures from the paper and the authors' code (github.com/swblaster/FedLAMA), each a choice:

- weights p_i: train-sample counts of the selected clients (our FedAvg), not the code's uniform 1/m;
- re-assignment rule: a layer is long while δ_l < 1 − λ_l, the crossing layer itself keeps τ0
  (docs/design.md#fedlama; the code also gives the crossing layer φ·τ0: ``lama_rule="authors"``); every
  tensor is eligible (the code only relaxes kernels and always averages biases every τ0); intervals are
  re-chosen from the first window on (the code waits six rounds before the first re-assignment); d_l
  carries the 1/dim(u_l) of the paper's text in both the sort and δ (the code's δ numerator is per-dim
  too, its denominator is not, which mixes scales);
- local SGD is the engine's plain SGD (the code uses momentum 0.9 and weight decay);
- evaluation: the engine evaluates every client's current model before local training. At the start of
  a window that is the fully synchronised global model (as FedAvg); mid-window an active client holds
  its own copies of the long-interval layers (the authors evaluate one worker's model in the same
  state). ``lama_layers`` tells which rounds start fully synchronised.

FedLAMA + ALA (``fedlama+ala``, not in any paper): ALA needs the whole received model, which exists at
the start of each window (after a full synchronisation): then ALA runs exactly as in FedALA. Mid-window
a client receives only the short-interval layers: the lower ones overwrite, those in ALA's top p blocks
are blended with the client's current weights W (Eq. 4 without learning W). With φ = 1 this is FedALA
with τ0-step rounds (tested). The clients' ALA state then lives inside FedLAMA's (``LAMAState.ala``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..config import RunConfig
from ..errors import ConfigError
from .ala import ALAPieces, ALAState
from .base import Algorithm
from .fedavg import client_weights, receive_global, weighted_mean

TABLE_LAYERS = "lama_layers"
TABLE_ADJUST = "lama_adjust"


@dataclass
class LAMAState:
    """What FedLAMA carries from round to round, one entry per layer (parameter tensor)."""

    interval: torch.Tensor  # (L,) int64: τ_l / τ0, 1 or φ
    kappa: torch.Tensor  # (L,) int64: how often the layer was averaged so far (κ_l)
    ala: ALAState | None = None  # fedlama+ala: the clients' ALA weights


def window_start(t: int, phi: int) -> int:
    """First round of the φ-round window that holds round t (rounds count from 1)."""
    return (t - 1) // phi * phi + 1


def assign_intervals(d: np.ndarray, dim: np.ndarray, *, include_crossing: bool = False) -> dict[str, np.ndarray]:
    """The interval rule (docs/design.md#fedlama) on discrepancies ``d`` and sizes ``dim``, one per layer.

    Returns ``order`` (layers by ascending d), ``delta`` and ``one_minus_lambda`` along that order and
    ``long`` (per layer, in the layers' own order): True for the layers given φ·τ0. The long layers are a
    prefix of ``order``: walking it, a layer is long while δ_l < 1 − λ_l (δ rises, 1 − λ falls, so they
    cross once; the layer with the largest d never is, since there δ = 1 and 1 − λ = 0). When every d is
    0 (one client, or identical models) δ is taken as 0: synchronising changes nothing, so every layer
    but the last is relaxed.

    ``include_crossing=True`` is the authors' code instead: the layer at which δ_l reaches 1 − λ_l is
    relaxed too (so the lowest-d layer always is). Not used by the algorithm (no config field); kept for
    measuring the difference (see the FedLAMA report).
    """
    d = np.asarray(d, dtype=np.float64)
    dim = np.asarray(dim, dtype=np.float64)
    order = np.argsort(d, kind="stable")
    dd = d[order] * dim[order]
    total = dd.sum()
    delta = np.cumsum(dd) / total if total > 0 else np.zeros_like(dd)
    one_minus_lambda = 1.0 - np.cumsum(dim[order]) / dim.sum()
    prefix = np.logical_and.accumulate(delta < one_minus_lambda)
    if include_crossing and not prefix.all():
        prefix[np.argmin(prefix)] = True  # the first layer past the crossing (the code appends, then tests)
    long = np.zeros(len(d), dtype=bool)
    long[order[prefix]] = True
    return {"order": order, "delta": delta, "one_minus_lambda": one_minus_lambda, "long": long}


def build(cfg: RunConfig, model: nn.Module, ala: ALAPieces | None = None) -> Algorithm:
    """FedLAMA (τ0 = ``cfg.tau0`` steps, factor φ = ``cfg.phi``) for ``model``; with ``ala``, ALA on the
    clients (fedlama+ala)."""
    if cfg.local_steps is not None and cfg.local_steps != cfg.tau0:
        raise ConfigError("local_steps", cfg.local_steps, f"unset or equal to tau0={cfg.tau0} for {cfg.algo}",
                          "one FedLAMA round is τ0 local SGD steps; set both (--local-steps and --tau0) so "
                          "that FedAvg(τ0) runs the same steps")
    names = [k for k, _ in model.named_parameters()]
    dims = np.array([v.numel() for _, v in model.named_parameters()], dtype=np.int64)

    def init_state(sim) -> LAMAState:
        _warn_replayed_batches(sim)
        n, dev = len(names), sim.device
        return LAMAState(interval=torch.ones(n, dtype=torch.int64, device=dev),
                         kappa=torch.zeros(n, dtype=torch.int64, device=dev),
                         ala=ala.init_state(sim) if ala else None)

    def initialise(sim, t: int, clients: torch.Tensor) -> int:
        # the layers averaged at the end of round t-1; intervals change only when every layer was due,
        # so the current ones tell (round 0: all, every client starts from G)
        synced = (t - 1) % sim.state.interval.cpu().numpy() == 0
        received = [n for n, s in zip(names, synced) if s]
        if ala is None:
            return receive_global(sim, t, clients, names=received)
        if len(received) == len(names):  # after a full synchronisation: ALA as in FedALA
            return ala.ala_initialise(sim, t, clients, sim.state.ala)
        return ala.blend_received(sim, t, clients, received, sim.state.ala)

    def aggregate(sim, t: int, selected: torch.Tensor) -> int:
        return _aggregate(sim, sim.state, t, selected, names, dims)

    def select(sim, t: int) -> torch.Tensor:
        # Partial participation: one draw of active clients per φ-round window (module docstring).
        return sim.select(window_start(t, cfg.phi))

    return Algorithm(cfg.algo, initialise=initialise, aggregate=aggregate, init_state=init_state,
                     select=select, local_steps=cfg.tau0, initialise_all=cfg.ala_all_clients if ala else True,
                     meta=(lambda state: ala.meta(state.ala)) if ala else None)


def _warn_replayed_batches(sim) -> None:
    cfg = sim.cfg
    if not cfg.shuffle:
        per_epoch = sim.batches_per_epoch(sim.train_sizes)
        if (per_epoch > cfg.tau0).any():
            import warnings

            warnings.warn(f"{cfg.algo} with shuffle=False: a round of tau0={cfg.tau0} local steps replays the "
                          f"same first batches of the {int((per_epoch > cfg.tau0).sum())} client(s) that hold "
                          "more; set shuffle=True (the teach-fedlama preset does)", stacklevel=3)


def _aggregate(sim, st: LAMAState, t: int, selected: torch.Tensor, names: list[str], dims: np.ndarray) -> int:
    """Average the layers due at the end of round t, record d_l and κ_l, re-assign intervals every φ rounds."""
    cfg = sim.cfg
    interval = st.interval.cpu().numpy()
    due = t % interval == 0
    idx = np.flatnonzero(due)
    bytes_up = weighted_mean(sim, t, selected, names=[names[i] for i in idx])

    # d_l = Σ_i p_i ‖u_l − x_{i,l}‖² / (τ_l · dim(u_l)), p_i the same weights as the mean (float64);
    # NaN for layers not due. One device→host copy for all layers.
    p = client_weights(sim, selected)
    d = np.full(len(names), np.nan)
    if len(idx):  # none is due mid-window when every layer is long (possible with lama_rule="authors")
        sums = []
        for i in idx:
            k = names[i]
            diff = sim.local_params[k][selected].to(torch.float64) - sim.global_params[k].to(torch.float64)
            sums.append(p @ diff.reshape(len(selected), -1).pow(2).sum(1))
        d[idx] = torch.stack(sums).cpu().numpy() / (interval[idx] * cfg.tau0 * dims[idx])
    kappa = st.kappa.cpu().numpy() + due
    st.kappa = torch.as_tensor(kappa, device=sim.device)

    sim.recorder.table_rows(TABLE_LAYERS, {
        "round": np.full(len(names), t), "step": np.full(len(names), t * cfg.tau0), "layer": names,
        "dim": dims, "interval": interval * cfg.tau0, "synced": due, "d": d, "kappa": kappa,
    })

    # every φ·τ0 steps: with τ_l/τ0 ∈ {1, φ} every layer was just averaged, so d holds all of them
    if t % cfg.phi == 0:
        rule = assign_intervals(d, dims, include_crossing=cfg.lama_rule == "authors")
        new = np.where(rule["long"], cfg.phi, 1).astype(np.int64)
        st.interval = torch.as_tensor(new, device=sim.device)
        o = rule["order"]
        sim.recorder.table_rows(TABLE_ADJUST, {
            "round": np.full(len(names), t), "rank": np.arange(1, len(names) + 1),
            "layer": [names[i] for i in o], "dim": dims[o], "d": d[o], "delta": rule["delta"],
            "one_minus_lambda": rule["one_minus_lambda"], "long": rule["long"][o],
            "interval": new[o] * cfg.tau0,
        })
    return bytes_up
