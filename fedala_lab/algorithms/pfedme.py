"""pFedMe (T Dinh, Tran & Nguyen, NeurIPS 2020): each client keeps a personal model θ_i, the proximal point of
its local model w_i under its loss (a Moreau envelope), and federates w_i. Per batch D:

    θ ← θ − plr·(∇f_i(θ; D) + λ(θ − w)),  K times;   w ← w − lr·λ(w − θ)
    server: G ← (1 − β)·G + β·Σ_i (n_i / Σn) w_i

Evaluated: each client's personal model θ_i. The defaults (λ, K, plr, β) and the departures from PFLlib:
docs/methods.md#pfedme.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..compute.steps import grad_and_loss, recipe_step
from ..compute.workers import InPlaceModel
from ..params import Float, Int, Param
from . import notes
from .base import Aggregated, Algorithm, Round, Setup, Trained, Work
from .ditto import personal_models
from .registry import make_spec


@dataclass
class PFedMeState:
    """Each client's personal model θ_i, (N, *shape) per parameter and buffer."""

    params: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor]


def make_pfedme_step(model: torch.nn.Module, *, lr: float, plr: float, lam: float, k: int):
    """One batch of pFedMe for one client: K personal steps on θ (carry ``theta``), then the step of w
    (carry ``params``)."""

    g_and_v = grad_and_loss(model)

    def step(carry, shared, x, y, mask):
        w, theta, buffers = carry["params"], carry["theta"], carry["buffers"]
        grads, loss = g_and_v(theta, buffers, x, y, mask)
        for i in range(k):
            if i:
                grads, _ = g_and_v(theta, buffers, x, y, mask)
            # θ − plr·(∇f + λ(θ − w)): θ pulled a fraction plr·λ of the way to w, then the loss's step
            theta = {n: torch.lerp(p, w[n], plr * lam) - plr * grads[n] for n, p in theta.items()}
        w = {n: torch.lerp(p, theta[n], lr * lam) for n, p in w.items()}  # w − lr·λ(w − θ)
        return {"params": w, "theta": theta}, loss.reshape(1)

    return step


class PFedMeTrainer:
    """:func:`make_pfedme_step` on a worker's module (the recipe's ``trainer``, compute/steps.py): θ is the
    module's parameters, trained in place with the workers' kernels (``kernels``: channels-last convolutions,
    fused linear updates, where θ's pull towards w is taken inside the backward pass); w is the client's slot,
    updated in place. The same arithmetic per batch (K gradient steps of θ, then w's step), equal to the
    step to float rounding. The batch is gathered (and formatted) once for its K steps."""

    def __init__(self, model: torch.nn.Module, kernels: tuple[bool, bool], *, lr: float, plr: float, lam: float,
                 k: int):
        self.net = InPlaceModel(model, lr=plr, channels_last=kernels[0], fused_linear=kernels[1])
        self.lr, self.plr, self.lam, self.k = lr, plr, lam, k

    def train_client(self, carry, shared, x, y, rows, sizes) -> np.ndarray:
        net, pull = self.net, self.plr * self.lam
        w = carry["params"]
        net.load(carry["theta"], carry["buffers"])
        net.pull = (pull, w)  # the fused layers: θ + plr·λ·(w − θ) − plr·δᵀx
        losses = np.empty((len(sizes), 1), dtype=np.float64)
        try:
            for b, s in enumerate(sizes):
                idx = torch.from_numpy(rows[b, :s])
                xb, yb, ones = net.batch(x, idx), y[idx], x.new_ones(int(s))
                for i in range(self.k):
                    loss = net.loss(net.cross_entropy, xb, yb, ones)
                    loss.backward()
                    net.step(w, pull)  # θ − plr·(∇f + λ(θ − w)), the pull as a lerp
                    if i == 0:
                        losses[b, 0] = loss.item()
                with torch.no_grad():
                    for n, v in w.items():  # w − lr·λ(w − θ)
                        v.lerp_(net.all[n], self.lr * self.lam)
        finally:
            net.pull = None
        net.store(carry["theta"], carry["buffers"])
        return losses


class PFedMe(Algorithm):
    """Local models w_i federated with a β-step server; personal models θ_i, their proximal points, evaluated."""

    # its server hook (aggregate) never reads its state, the clients' personal models: it runs on Flower
    flower_split = True

    def __init__(self, setup: Setup):
        super().__init__(setup)
        cfg = self.cfg
        self.step = recipe_step(setup.model, make_pfedme_step, trainer=PFedMeTrainer, lr=cfg.lr,
                                plr=cfg.pfedme_plr, lam=cfg.pfedme_lambda, k=cfg.pfedme_k)

    def init_state(self, setup: Setup) -> PFedMeState:
        return PFedMeState(*personal_models(setup))

    def personalise(self, rnd: Round) -> dict:
        return {"params": rnd.state.params, "buffers": rnd.state.buffers}

    def local_train(self, rnd: Round, work: Work) -> Trained:
        carry = rnd.models(work.clients)
        carry["theta"] = dict(carry["params"])  # θ starts from the model as received
        out, aux = rnd.run_steps(self.step, carry, work.plan)
        rows = torch.as_tensor(np.flatnonzero(work.plan.num_steps > 0), device=rnd.device)
        ids = work.clients[rows]  # θ_i changes only where the client trained
        st = rnd.state
        for n, v in out["theta"].items():
            st.params[n][ids] = v[rows]
        for n, v in out["buffers"].items():
            st.buffers[n][ids] = v[rows]
        return Trained(out["params"], out["buffers"], aux[..., 0], done=work.plan.sizes > 0)

    def aggregate(self, rnd: Round, senders: torch.Tensor) -> Aggregated:
        mean, beta = rnd.weighted_mean(senders), self.cfg.pfedme_beta
        return Aggregated({n: (1 - beta) * g + beta * mean.params[n] for n, g in rnd.global_params.items()},
                          mean.bytes)


def _hint(cfg) -> str:
    """The setting most likely behind a diverged pFedMe run: λ, where a step it scales (the personal and the
    local step each scale a difference by 1 − step·λ) grows from 2 on; else personal steps larger than the
    local one; else a server step past the clients' mean."""
    step, name = max((cfg.lr, "lr"), (cfg.pfedme_plr, "pfedme_plr"))
    if step * cfg.pfedme_lambda >= 2:
        return (f"pFedMe's pfedme_lambda={cfg.pfedme_lambda:g} is most likely too large for {name}={step:g}: each "
                f"step scales the gap between the personal and the local model by 1 − {name}·λ = "
                f"{1 - step * cfg.pfedme_lambda:.3g}, which must stay within (−1, 1): try λ < {2 / step:g}")
    if cfg.pfedme_plr > cfg.lr:
        return (f"pFedMe's pfedme_plr={cfg.pfedme_plr:g}, the learning rate of its K={cfg.pfedme_k} personal steps "
                f"per batch, is most likely too large (it is above lr={cfg.lr:g}): try a smaller pfedme_plr")
    if cfg.pfedme_beta > 1:
        return (f"pFedMe's pfedme_beta={cfg.pfedme_beta:g} steps the server's model past the clients' mean every "
                "round (β = 1 is the mean): try pfedme_beta <= 1")
    return ""


PARAMS = (
    Param("pfedme_lambda", 15.0, Float(0, 1_000), "pFedMe: λ, the pull between each personal model θ_i and the "
          "local model w_i (PFLlib's default in 2021); lr·λ and pfedme_plr·λ below 2 keep its steps stable",
          short="λ"),
    Param("pfedme_k", 5, Int(1, 1_000), "pFedMe: K, personal steps on θ per batch (PFLlib)", short="K"),
    Param("pfedme_plr", 0.01, Float(0, 10, lo_open=True), "pFedMe: learning rate of the personal steps (PFLlib's "
          "p_learning_rate)"),
    Param("pfedme_beta", 1.0, Float(0, 2, lo_open=True, hi_open=True), "pFedMe: β, the server's step towards the "
          "clients' mean (1: the mean; from 2 on each round would land at least as far past the mean as the "
          "model was before it)", short="β {}"),
)

SPEC = make_spec("pfedme", PFedMe, label="pFedMe", params=PARAMS, colour="mediumvioletred",
                 category="extra personal models", divergence_hint=_hint, builtin=True, fedala_paper=True,
                 curve_note=notes.personal,
                 doc="T Dinh, Tran & Nguyen, NeurIPS 2020")
