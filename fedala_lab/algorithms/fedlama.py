"""FedLAMA: layer-wise adaptive model aggregation (Lee, Zhang, He & Avestimehr, arXiv 2110.10302): each layer
l is averaged every τ_l ∈ {τ0, φ·τ0} local steps, the layers whose client copies agree the least often.

    one round = τ0 local SGD steps; at its end the server averages the layers due and measures
        d_l = Σ_i p_i ‖u_l − x_{i,l}‖² / (τ_l · dim(u_l))           (unit model discrepancy)
    every φ rounds, layers sorted by d_l ascending: the first get φ·τ0 while δ_l < 1 − λ_l
        (δ_l: their share of the discrepancy, λ_l: of the parameters); the others keep τ0

Each client's τ0 steps continue its pass over its data from where its last round stopped (the authors stream
their data through an iterator kept across rounds), in the stored order or, with ``shuffle``, each pass in an
order of its own. φ = 1 is FedAvg on those batches. What a layer is, partial participation (a draw per window),
evaluation (``lama_eval``), the tables it records (``lama_layers``, ``lama_adjust``), FedLAMA+ALA and every
departure from the paper and the authors' code: docs/methods.md#fedlama; the rule's evidence:
docs/design.md#fedlama.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..errors import ConfigError
from ..params import Choice, Int, Param
from .base import Aggregated, Algorithm, Round, Sent, Setup, Trained, Work, draw_clients
from .registry import Look, make_spec

TABLE_LAYERS = "lama_layers"
TABLE_ADJUST = "lama_adjust"


@dataclass
class LAMAState:
    """What FedLAMA carries from round to round, one entry per layer (parameter tensor)."""

    interval: torch.Tensor  # (L,) int64: τ_l / τ0, 1 or φ
    kappa: torch.Tensor  # (L,) int64: how often the layer was averaged so far (κ_l)
    cursor: torch.Tensor  # (N,) int64: the local batches each client has taken so far, its place in its data


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
    relaxed too (so the lowest-d layer always is): ``lama_rule="authors"``.
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


class FedLAMA(Algorithm):
    """FedLAMA (τ0 = ``cfg.tau0`` steps a round, interval factor φ = ``cfg.phi``)."""

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.names = list(setup.param_names)
        self.dims = np.array([int(np.prod(setup.shapes[k])) for k in self.names], dtype=np.int64)
        self.local_steps = self.cfg.tau0

    def init_state(self, setup: Setup) -> LAMAState:
        n, dev = len(self.names), setup.device
        return LAMAState(interval=torch.ones(n, dtype=torch.int64, device=dev),
                         kappa=torch.zeros(n, dtype=torch.int64, device=dev),
                         cursor=torch.zeros(setup.num_clients, dtype=torch.int64, device=dev))

    def select(self, rnd: Round) -> torch.Tensor:
        # Partial participation: one draw of active clients per φ-round window (module docstring).
        return draw_clients(self.cfg, window_start(rnd.t, self.cfg.phi), rnd.num_clients, rnd.device)

    def initialise(self, rnd: Round, clients: torch.Tensor) -> Sent:
        # the layers averaged at the end of round t-1; intervals change only when every layer was due,
        # so the current ones tell (round 0: all, every client starts from G)
        synced = (rnd.t - 1) % rnd.state.interval.cpu().numpy() == 0
        return rnd.send_global(clients, [n for n, s in zip(self.names, synced) if s])

    def personalise(self, rnd: Round) -> dict | None:
        """With ``lama_eval="server"`` (and no ALA): the server's model G for every client, each layer as last
        averaged, so that every round is read on the same kind of model as FedAvg's (module docstring)."""
        if not evaluates_server(self.cfg):
            return None
        n = rnd.num_clients
        return {"params": {k: v.unsqueeze(0).expand(n, *v.shape) for k, v in rnd.global_params.items()},
                "buffers": rnd.local_buffers}

    def local_train(self, rnd: Round, work: Work) -> Trained:
        """τ0 SGD steps per client, continuing its pass over its data where its last round left it."""
        st, c = rnd.state, work.clients
        plan = rnd.plan(c, steps=self.local_steps, start=st.cursor[c].cpu().tolist())
        trained = rnd.train(c, plan)
        st.cursor[c] += torch.as_tensor(plan.num_steps, device=st.cursor.device)
        return trained

    def aggregate(self, rnd: Round, senders: torch.Tensor) -> Aggregated:
        """Average the layers due at the end of round t, record d_l and κ_l, re-assign intervals every φ rounds."""
        cfg, st, t, names, dims = self.cfg, rnd.state, rnd.t, self.names, self.dims
        interval = st.interval.cpu().numpy()
        due = t % interval == 0
        idx = np.flatnonzero(due)
        out = rnd.weighted_mean(senders, [names[i] for i in idx])

        # d_l = Σ_i p_i ‖u_l − x_{i,l}‖² / (τ_l · dim(u_l)), p_i the same weights as the mean (float64), u_l the
        # new average; NaN for layers not due. One device→host copy for all layers.
        p = rnd.weights(senders)
        d = np.full(len(names), np.nan)
        if len(idx):  # none is due mid-window when every layer is long (possible with lama_rule="authors")
            sums = []
            for i in idx:
                k = names[i]
                diff = rnd.local_params[k][senders].to(torch.float64) - out.params[k].to(torch.float64)
                sums.append(p @ diff.reshape(len(senders), -1).pow(2).sum(1))
            d[idx] = torch.stack(sums).cpu().numpy() / (interval[idx] * cfg.tau0 * dims[idx])
        kappa = st.kappa.cpu().numpy() + due
        st.kappa = torch.as_tensor(kappa, device=rnd.device)

        rnd.record(TABLE_LAYERS, {
            "round": np.full(len(names), t), "step": np.full(len(names), t * cfg.tau0), "layer": names,
            "dim": dims, "interval": interval * cfg.tau0, "synced": due, "d": d, "kappa": kappa,
        })

        # every φ·τ0 steps: with τ_l/τ0 ∈ {1, φ} every layer was just averaged, so d holds all of them
        if t % cfg.phi == 0:
            rule = assign_intervals(d, dims, include_crossing=cfg.lama_rule == "authors")
            new = np.where(rule["long"], cfg.phi, 1).astype(np.int64)
            st.interval = torch.as_tensor(new, device=rnd.device)
            o = rule["order"]
            rnd.record(TABLE_ADJUST, {
                "round": np.full(len(names), t), "rank": np.arange(1, len(names) + 1),
                "layer": [names[i] for i in o], "dim": dims[o], "d": d[o], "delta": rule["delta"],
                "one_minus_lambda": rule["one_minus_lambda"], "long": rule["long"][o],
                "interval": new[o] * cfg.tau0,
            })
        return out


def evaluates_server(cfg) -> bool:
    """Whether a FedLAMA run evaluates the server's model every round (``lama_eval="server"`` without ALA);
    otherwise each client's current model, comparable with FedAvg's only at window starts."""
    return cfg.lama_eval == "server" and not cfg.algorithm.uses("ala")


def _check(cfg) -> None:
    if cfg.local_steps is not None and cfg.local_steps != cfg.tau0:
        raise ConfigError("local_steps", cfg.local_steps, f"unset or equal to tau0={cfg.tau0} for {cfg.algo}",
                          "one FedLAMA round is τ0 local SGD steps; set both (--local-steps and --tau0) so "
                          "that FedAvg(τ0) runs the same steps")
    if cfg.stragglers:
        raise ConfigError("stragglers", cfg.stragglers, "0 with FedLAMA",
                          "its layer intervals assume that every active client synchronises")


PARAMS = (
    Param("tau0", 10, Int(1, 10_000_000), "FedLAMA: base interval τ0 in local SGD steps (one round)", short="τ0"),
    Param("phi", 2, Int(1), "FedLAMA: interval factor φ (layers synchronise every τ0 or φ·τ0 steps; 1 is FedAvg)",
          short="φ"),
    Param("lama_rule", "spec", Choice(("spec", "authors")), "FedLAMA interval rule: spec (layers are long while "
          "δ_l < 1 − λ_l; the crossing layer keeps τ0) or authors (their code also relaxes the crossing layer)",
          short="rule {}"),
    Param("lama_eval", "server", Choice(("server", "clients")), "FedLAMA: the model evaluated each round: server "
          "(the server's model, each layer as last averaged) or clients (each client's current model, partly its "
          "own mid-window; FedLAMA+ALA always evaluates its clients' models)", short="evaluating {}"),
)

SPEC = make_spec("fedlama", FedLAMA, label="FedLAMA", params=PARAMS, colour="tab:purple",
                   category="traditional", modifiers=("ala",), check=_check, builtin=True,
                   variants={"+ala": Look("FedLAMA+ALA", "tab:pink")},
                   doc="Lee, Zhang, He & Avestimehr, arXiv 2110.10302")
