"""APPLE (Luo & Wu, "Adapt to Adaptation: Learning Personalization for Cross-Silo Federated Learning", IJCAI
2022; arXiv 2110.08394): each client keeps a core model θ_i, shared with every other client, and learns how
much of each client's core model its personalised model takes.

Each client i holds a directed relationship vector p_i (one weight per client). In each round it downloads every
other client's core model θ_j; its personalised model is

    θ̃_i = Σ_j p_ij θ_j                                           (the client's own core model in its slot)

and, on each batch of its local epochs, with g = ∇ℓ(θ̃_i) the gradient of the loss at the personalised model,

    θ_i  ← θ_i − η · p_ii · g                                     (∂ℓ/∂θ_i = p_ii·g)
    p_ij ← p_ij − η_p · (⟨g, θ_j⟩ + λ(t)·μ·(p_ij − p⁰_j))          for every j (∂ℓ/∂p_ij = ⟨g, θ_j⟩)

then uploads θ_i. λ(t) = (1 + cos(π(t − 1)/(L·T)))/2 for t − 1 < L·T, else 0 (T rounds): the pull of p_i
towards p⁰ (p⁰_j = n_j / Σ n, the train-sample shares) fades over the first L·T rounds, moving the training from
the federation's objective towards the client's own (the paper's loss scheduler; its equation numbers are not
restated here). Evaluated: each client's personalised model θ̃_i (built from the core models it downloaded
this round, before its training). Communication: N − 1 core models down per client per round (every client
downloads, as every client's personalised model is evaluated; its own core model is already there), one up
per sender; there is no global model.

Hyper-parameters: p_i starts uniform, 1/N (PFLlib ``clientapple.py``; the official code, github.com/ljaiverson/
pFL-APPLE, starts it at p⁰); p⁰ = train-sample shares (both); η = the run's ``lr``; ``apple_dr_lr`` = η_p = 0.001
(the official code's ``lr_coef``; PFLlib's ``dr_learning_rate`` defaults to 0, which freezes p at uniform: each
client's personalised model is then the mean of the cores and APPLE learns poorly, 19 % on the teach problem
against 90 % at 0.001); ``apple_mu`` = μ = 0.1 (the official code's ``mu``, whose penalty μ‖p_i − p⁰‖² pulls
twice as hard as the gradient λμ(p_ij − p⁰_j) here, which is PFLlib's; PFLlib reads FedProx's ``mu``, default 0); ``apple_L`` = L = 1 (PFLlib's ``L``: the pull fades over the whole run; the official code fades it
over the first 10 % of the rounds, exponentially by default). Plain SGD for both (the official code uses
momentum 0.9).

Departures from PFLlib: the core model's step is η·p_ii·g, its exact gradient, as in the official code (PFLlib
multiplies η by N, a plain step of η while p_ii = 1/N, but one that grows with p_ii: on the teach problem it is
less stable, best 86 % and diverging at η_p = 0.01); ∂ℓ/∂p_ij is the exact inner product ⟨g, θ_j⟩ (PFLlib
averages g ⊙ θ_j within each tensor, then over tensors); θ_i and p_i step together from
the same gradient (PFLlib updates θ_i first and uses it in p_ii's step); a client uploads its core model θ_i
(PFLlib uploads a copy of its personalised model, and its clients, trained one after another, see the core
models their predecessors trained this round; here every client sees the cores downloaded at the round's
start); only the round's selected clients train (PFLlib trains every client every round: ``join_ratio = 1``,
the teach default, is the same); λ(t) follows the official code's cosine in t − 1 (PFLlib's lags a round).

The step needs every client's core model: the N cores go to the step as one shared tensor (not per client), so
under ``vmap`` the memory is N models plus one personalised model per client, and the vectorised backend runs
it (tested equal to the loop).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.func import functional_call, grad_and_value

from ..compute.steps import recipe_step, weighted_ce
from ..params import Float, Param
from .base import Aggregated, Algorithm, Round, Sent, Setup, Trained, Work
from .registry import make_spec


@dataclass
class AppleState:
    """Every client's directed relationship vector: row i is p_i, (N, N)."""

    p: torch.Tensor


def schedule(t: int, rounds: int, L: float) -> float:
    """λ(t): (1 + cos(π(t − 1)/⌊L·T⌋))/2 while t − 1 < ⌊L·T⌋, then 0."""
    span = int(L * rounds)
    return 0.5 * (1 + math.cos(math.pi * (t - 1) / span)) if t - 1 < span else 0.0


def personalised(p: torch.Tensor, cores: dict) -> dict:
    """θ̃ = p @ θ: each row of ``p`` (A, N) mixes the N core models (N, …) into one model (A, …)."""
    return {n: torch.tensordot(p.to(v.dtype), v, dims=1) for n, v in cores.items()}


def make_apple_step(model: torch.nn.Module, lr: float, lr_p: float):
    """One APPLE step for one client and one batch, θ_i at ``lr`` and p_i at ``lr_p``. carry: ``params`` (its
    core model θ_i), ``buffers``, ``p`` (p_i, (N,)), ``me`` (one-hot of i, (N,)), ``start`` (θ_i as the others
    downloaded it); shared: ``cores`` (the N downloaded core models, (N, …)), ``p0`` ((N,)), ``prox`` (λ(t)·μ, a
    0-d tensor)."""

    def loss_fn(own, p, cores, me, start, buffers, x, y, w):
        # θ̃ = Σ_j p_j θ_j, the client's current core replacing the downloaded copy of its own
        p_own = (p * me).sum()
        theta = {n: torch.tensordot(p, cores[n], dims=1) + p_own * (own[n] - start[n]) for n in own}
        return weighted_ce(functional_call(model, (theta, buffers), (x,)), y, w)

    g_and_v = grad_and_value(loss_fn, argnums=(0, 1))

    def step(carry, shared, x, y, w):
        p = carry["p"]
        (g_own, g_p), loss = g_and_v(carry["params"], p, shared["cores"], carry["me"], carry["start"],
                                     carry["buffers"], x, y, w)
        params = {n: v - lr * g_own[n] for n, v in carry["params"].items()}
        return {"params": params, "p": p - lr_p * (g_p + shared["prox"] * (p - shared["p0"]))}, loss.reshape(1)

    return step


class APPLE(Algorithm):
    """Core models shared by all; each client's personalised model mixes them by its learned p_i."""

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.step = recipe_step(setup.model, make_apple_step, lr=setup.cfg.lr, lr_p=setup.cfg.apple_dr_lr)

    def init_state(self, setup: Setup) -> AppleState:
        n = setup.num_clients
        return AppleState(torch.full((n, n), 1 / n, device=setup.device))

    def initialise(self, rnd: Round, clients: torch.Tensor) -> Sent:
        """Each client downloads the others' core models (its own stays its local model)."""
        return Sent({}, len(clients) * (rnd.num_clients - 1) * rnd.setup.param_bytes())

    def personalise(self, rnd: Round) -> dict:
        # The server's copy of a core model is always the client's: a client that trains uploads, a dropped
        # straggler trains nothing. So the local models are the cores every client downloaded this round.
        return {"params": personalised(rnd.state.p, rnd.local_params), "buffers": rnd.local_buffers}

    def local_train(self, rnd: Round, work: Work) -> Trained:
        c = work.clients
        n = torch.as_tensor(rnd.setup.train_sizes, dtype=torch.float32, device=rnd.device)
        prox = schedule(rnd.t, self.cfg.rounds, self.cfg.apple_L) * self.cfg.apple_mu
        carry = {**rnd.models(c), "p": rnd.state.p[c], "start": {k: v[c] for k, v in rnd.local_params.items()},
                 "me": torch.nn.functional.one_hot(c, rnd.num_clients).to(rnd.state.p.dtype)}
        shared = {"cores": rnd.local_params, "p0": n / n.sum(), "prox": torch.tensor(prox, device=rnd.device)}
        out, aux = rnd.run_steps(self.step, carry, work.plan, shared)
        rnd.state.p[c] = out["p"]
        return Trained(out["params"], out["buffers"], aux[..., 0], None, work.plan.sizes > 0)

    def aggregate(self, rnd: Round, senders: torch.Tensor) -> Aggregated:
        """Nothing to average: the senders' core models are what the others download next round."""
        return Aggregated({}, len(senders) * rnd.setup.param_bytes())


PARAMS = (
    Param("apple_dr_lr", 0.001, Float(0), "APPLE: learning rate of the directed relationship vectors p_i (the "
          "official code's lr_coef; PFLlib's dr_learning_rate, default 0 there: p stays uniform)", short="η_p"),
    Param("apple_mu", 0.1, Float(0), "APPLE: μ, the pull of p_i towards the train-sample shares, times λ(t) "
          "(the official code's 0.1)", short="μ"),
    Param("apple_L", 1.0, Float(0), "APPLE: L, the pull fades (cosine) over the first L·rounds rounds (PFLlib's L; "
          "0: no pull)"),
)

SPEC = make_spec("apple", APPLE, label="APPLE", params=PARAMS, colour="sienna", line_style=":",
                 category="personalised aggregation", modifiers=(), builtin=True, communication="(1+M)·Σ",
                 doc="Luo & Wu, IJCAI 2022")
