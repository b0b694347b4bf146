"""APPLE (Luo & Wu, IJCAI 2022): each client keeps a core model θ_i shared with every other client, and learns
how much of each client's core model its personalised model takes (its relationship vector p_i).

    θ̃_i = Σ_j p_ij θ_j;  per batch, with g = ∇ℓ(θ̃_i):
    θ_i  ← θ_i − η · p_ii · g
    p_ij ← p_ij − η_p · (⟨g, θ_j⟩ + λ(t)·μ·(p_ij − p⁰_j)),   λ(t) fading to 0 over ``apple_fade_rounds``

Evaluated: each client's personalised model θ̃_i as its last training step computed it (the one its last
batch's gradient was taken at, PFLlib's ``self.model`` when it evaluates; the initial model before its first
training). Hyper-parameters, communication and the departures from the official code and PFLlib:
docs/methods.md#apple.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch.func import functional_call, grad_and_value

from ..compute.steps import recipe_step, weighted_ce
from ..compute.workers import InPlaceModel
from ..params import Float, Int, Param
from . import notes
from .base import Aggregated, Algorithm, Round, Sent, Setup, Trained, Work
from .ditto import personal_models
from .registry import make_spec


@dataclass
class AppleState:
    """Every client's directed relationship vector (row i is p_i, (N, N)) and personalised model as its last
    training step computed it (``shown``: (N, *shape) per parameter, what the round evaluates)."""

    p: torch.Tensor
    shown: dict[str, torch.Tensor]


def schedule(t: int, span: int) -> float:
    """λ(t): (1 + cos(π(t − 1)/span))/2 while t − 1 < span, then 0 (span = ``apple_fade_rounds``, PFLlib's L·T)."""
    return 0.5 * (1 + math.cos(math.pi * (t - 1) / span)) if t - 1 < span else 0.0


def make_apple_step(model: torch.nn.Module, lr: float, lr_p: float):
    """One APPLE step for one client and one batch, θ_i at ``lr`` and p_i at ``lr_p``. carry: ``params`` (its
    core model θ_i), ``buffers``, ``p`` (p_i, (N,)), ``me`` (one-hot of i, (N,)), ``start`` (θ_i as the others
    downloaded it), ``shown`` (replaced by this step's personalised model θ̃); shared: ``cores`` (the N
    downloaded core models, (N, …)), ``p0`` ((N,)), ``prox`` (λ(t)·μ, a 0-d tensor)."""

    def loss_fn(own, p, cores, me, start, buffers, x, y, w):
        # θ̃ = Σ_j p_j θ_j, the client's current core replacing the downloaded copy of its own
        p_own = (p * me).sum()
        theta = {n: torch.tensordot(p, cores[n], dims=1) + p_own * (own[n] - start[n]) for n in own}
        return weighted_ce(functional_call(model, (theta, buffers), (x,)), y, w), theta

    g_and_v = grad_and_value(loss_fn, argnums=(0, 1), has_aux=True)

    def step(carry, shared, x, y, w):
        p = carry["p"]
        (g_own, g_p), (loss, theta) = g_and_v(carry["params"], p, shared["cores"], carry["me"], carry["start"],
                                              carry["buffers"], x, y, w)
        params = {n: v - lr * g_own[n] for n, v in carry["params"].items()}
        return {"params": params, "p": p - lr_p * (g_p + shared["prox"] * (p - shared["p0"])),
                "shown": theta}, loss.reshape(1)

    return step


class AppleTrainer:
    """:func:`make_apple_step` on a worker's module (the recipe's ``trainer``, compute/steps.py), with the
    workers' channels-last convolutions. Per step the personalised model θ̃ is written into the module's
    parameters once, each as one ``addmv`` over the N core models (p_own·(θ_i − start) + Σ_j p_j θ_j); after
    the backward pass the p-gradient takes one more pass over them (⟨g, θ_j⟩, and ⟨g, θ_i − start⟩ for the own
    entry) and θ_i its step in place, θ_i − lr·p_own·g as one ``add_``. Those two passes over the N cores are
    the step's arithmetic beyond FedAvg's; no gradient is fused into the backward pass (g itself is needed).
    Equal to the step to float rounding."""

    def __init__(self, model: torch.nn.Module, kernels: tuple[bool, bool], *, lr: float, lr_p: float):
        self.net = InPlaceModel(model, lr=lr, channels_last=kernels[0])
        self.lr, self.lr_p = lr, lr_p

    def train_client(self, carry, shared, x, y, rows, sizes) -> np.ndarray:
        net, lr = self.net, self.lr
        own, start, me = carry["params"], carry["start"], carry["me"]
        p = carry["p"].clone()
        n = len(p)
        cores = {k: v.reshape(n, -1) for k, v in shared["cores"].items()}  # views: (N, numel)
        prox, p0 = shared["prox"], shared["p0"]
        net.load(None, carry["buffers"])
        losses = np.empty((len(sizes), 1), dtype=np.float64)
        for b, s in enumerate(sizes):
            idx = torch.from_numpy(rows[b, :s])
            xb, yb = net.batch(x, idx), y[idx]
            with torch.no_grad():
                p_own = float((p * me).sum())
                diff = {k: (own[k] - start[k]).reshape(-1) for k in own}
                for k, param in net.all.items():  # θ̃ = p_own·(θ_i − start) + Σ_j p_j θ_j
                    if param.is_contiguous():  # written in place (fc1's 2 MB weight)
                        torch.addmv(diff[k], cores[k].t(), p, beta=p_own, out=param.view(-1))
                    else:  # a channels-last conv weight: in the parameter's order, then copied
                        param.copy_(torch.addmv(diff[k], cores[k].t(), p, beta=p_own).view(param.shape))
                if b == len(sizes) - 1:  # the personalised model of the last step: what the next round shows
                    for k, param in net.all.items():
                        carry["shown"][k].copy_(param)
            loss = weighted_ce(net.model(xb), yb, x.new_ones(int(s)))
            loss.backward()
            with torch.no_grad():
                g_p, g_own = torch.zeros_like(p), p.new_zeros(())
                for k, param in net.all.items():
                    if param.grad is None:
                        continue
                    g = param.grad.reshape(-1)  # the parameter's order (a channels-last gradient is copied)
                    g_p += torch.mv(cores[k], g)
                    g_own += torch.dot(g, diff[k])
                    own[k].add_(param.grad, alpha=-lr * p_own)  # θ_i − lr·p_own·g
                    param.grad = None
                g_p += me * g_own
                p -= self.lr_p * (g_p + prox * (p - p0))
            losses[b, 0] = loss.item()
        with torch.no_grad():
            carry["p"].copy_(p)
        net.store(None, carry["buffers"])
        return losses


class APPLE(Algorithm):
    """Core models shared by all; each client's personalised model mixes them by its learned p_i."""

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.step = recipe_step(setup.model, make_apple_step, trainer=AppleTrainer, lr=setup.cfg.lr,
                                lr_p=setup.cfg.apple_dr_lr)

    def init_state(self, setup: Setup) -> AppleState:
        n = setup.num_clients
        return AppleState(torch.full((n, n), 1 / n, device=setup.device), personal_models(setup)[0])

    def initialise(self, rnd: Round, clients: torch.Tensor) -> Sent:
        """Each client downloads the others' core models (its own stays its local model)."""
        return Sent({}, len(clients) * (rnd.num_clients - 1) * rnd.param_bytes())

    def personalise(self, rnd: Round) -> dict:
        """Evaluated: each client's personalised model as its last training step computed it (PFLlib evaluates
        ``self.model``, which its last batch's mixing wrote; the initial model before any training)."""
        return {"params": rnd.state.shown, "buffers": rnd.local_buffers}

    def local_train(self, rnd: Round, work: Work) -> Trained:
        c = work.clients
        n = torch.as_tensor(rnd.data.train_sizes, dtype=torch.float32, device=rnd.device)
        prox = schedule(rnd.t, self.cfg.apple_fade_rounds) * self.cfg.apple_mu
        st = rnd.state
        carry = {**rnd.models(c), "p": st.p[c], "start": {k: v[c] for k, v in rnd.local_params.items()},
                 "me": torch.nn.functional.one_hot(c, rnd.num_clients).to(st.p.dtype),
                 "shown": {k: v[c] for k, v in st.shown.items()}}
        shared = {"cores": rnd.local_params, "p0": n / n.sum(), "prox": torch.tensor(prox, device=rnd.device)}
        out, aux = rnd.run_steps(self.step, carry, work.plan, shared)
        st.p[c] = out["p"]
        for k, v in st.shown.items():  # a client without a step (a dropped straggler) keeps what it showed
            v[c] = out["shown"][k]
        return Trained(out["params"], out["buffers"], aux[..., 0], work.plan.sizes > 0)

    def aggregate(self, rnd: Round, senders: torch.Tensor) -> Aggregated:
        """Nothing to average: the senders' core models are what the others download next round."""
        return Aggregated({}, len(senders) * rnd.param_bytes())


def _hint(cfg) -> str:
    """The setting most likely behind a diverged APPLE run: μ, where the pull alone scales p_i − p⁰ by
    1 − η_p·λ(t)·μ per step (λ(t) <= 1) and overshoots from η_p·μ >= 1; else a step η_p of the relationship
    vectors raised above its default (their gradient ⟨g, θ_j⟩ grows with the models)."""
    dr, mu = cfg.apple_dr_lr, cfg.apple_mu
    if dr * mu >= 1:
        return (f"APPLE's apple_mu={mu:g} is most likely too large for apple_dr_lr={dr:g}: each step scales "
                f"p_i − p⁰ by as little as 1 − apple_dr_lr·μ = {1 - dr * mu:.3g}, which must stay within (−1, 1), "
                f"so try apple_mu < {1 / dr:g}")
    default = next(p.default for p in PARAMS if p.name == "apple_dr_lr")
    if dr > default:
        return (f"APPLE's apple_dr_lr={dr:g}, the step of the relationship vectors p_i (whose gradient ⟨g, θ_j⟩ "
                f"grows with the models), is most likely too large: try a smaller one (default {default:g})")
    return ""


PARAMS = (
    Param("apple_dr_lr", 0.001, Float(0, 1), "APPLE: learning rate of the directed relationship vectors p_i (the "
          "official code's lr_coef; PFLlib's dr_learning_rate, default 0 there: p stays uniform)", short="η_p"),
    Param("apple_mu", 0.1, Float(0, 1_000), "APPLE: μ, the pull of p_i towards the train-sample shares, times "
          "λ(t) (the official code's 0.1); apple_dr_lr·μ below 1 keeps the pull from overshooting", short="μ"),
    Param("apple_fade_rounds", 50, Int(0, 100_000), "APPLE: the pull fades (cosine) to 0 over this many first "
          "rounds (PFLlib's L·T, as a count of rounds so that a run's start never depends on its length; 0: no "
          "pull)"),
)

SPEC = make_spec("apple", APPLE, label="APPLE", params=PARAMS, colour="sienna", line_style=":",
                 category="personalised aggregation", modifiers=(), divergence_hint=_hint, builtin=True,
                 curve_note=notes.dips,
                 fedala_paper=True, communication="(1+M)·Σ", doc="Luo & Wu, IJCAI 2022")
