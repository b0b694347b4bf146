"""FedPHP (Li, Zhan, Shao, Li & Song, ECML-PKDD 2021): FedAvg whose clients inherit their past models and are
supervised by a teacher's representation, by one of PFLlib's two rules (``fedphp_rule``; μ_t = μ·min(t − 1, R)/R,
R = ``fedphp_ramp``):

    "2022" (PFLlib from April 2022 to December 2024, the FedALA paper's):
        w_i ← (1 − μ_t)·G + μ_t·w_i   (each client starts from G blended with its previous local model; evaluated)
        w_i ← E epochs of SGD on (1 − λ)·CE(w; x, y) + λ·MMD²(φ_w(x), φ_G(x)), sent for FedAvg's mean
    "2024" (PFLlib since December 2024): a private model h_i per client supervises, and is evaluated
        w_i ← G;  E epochs of SGD on (1 − λ)·CE + λ·MMD²(φ_w(x), φ_{h_i}(x));  h_i ← μ_t·h_i + (1 − μ_t)·w_i

The kernel, the defaults, the reference commits and the departures from PFLlib: docs/methods.md#fedphp.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad_and_value

from ..compute.steps import recipe_step, weighted_ce
from ..compute.workers import InPlaceModel
from ..errors import ConfigError
from ..models import BlockNet, top_block_start
from ..params import Choice, Float, Int, Param
from .base import Algorithm, Round, Sent, Setup, Trained, Work
from .ditto import personal_models
from .registry import make_spec

BANDWIDTHS = (10.0, 15.0, 20.0, 50.0)  # PFLlib's "rbf" kernels


def mmd(a: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Squared MMD of two batches of features (B, d) with PFLlib's Gaussian kernels, each pair of rows
    weighted by w_r·w_s (w: 0/1 per row), i.e. the mean over the real rows' pairs.

    Computed over the 2B rows of both batches at once, k(aa) + k(bb) − 2·k(ab) as the kernels of all pairs
    weighted by s_r·s_s with s = (w, −w), and the kernels' bandwidths as one stacked ``exp``: a handful of
    operations instead of some sixty small ones a step (forward and backward), the same sum to float rounding."""
    z = torch.cat([a, b])
    sq = (z * z).sum(1)
    d = sq[:, None] + sq[None, :] - 2 * z @ z.T  # squared distances of all pairs of rows
    coef = torch.tensor([-0.5 / bw for bw in BANDWIDTHS], dtype=d.dtype, device=d.device)
    k = torch.exp(d * coef[:, None, None]).sum(0)
    s = torch.cat([w, -w])
    return (k * s[:, None] * s[None, :]).sum() / (w.sum() ** 2).clamp_min(1.0)


def make_php_step(model: nn.Module, lr: float, lam: float, top: int):
    """One SGD step of FedPHP's local objective for one client (carry: ``params``, ``buffers``, ``h``)."""

    def loss_fn(params, buffers, h, x, y, w):
        if not lam:  # the term is off: FedAvg's step
            return weighted_ce(functional_call(model, (params, buffers), (x,)), y, w)
        feats = functional_call(model, (params, buffers), (x,), {"stop": top})
        out = functional_call(model, (params, buffers), (feats,), {"start": top})
        # h only supervises: a scratch copy of the buffers, so that batch norm's statistics update once
        private = functional_call(model, (h, {k: b.clone() for k, b in buffers.items()}), (x,), {"stop": top})
        return (1 - lam) * weighted_ce(out, y, w) + lam * mmd(feats, private, w)

    g_and_v = grad_and_value(loss_fn)

    def step(carry, shared, x, y, w):
        params = carry["params"]
        grads, loss = g_and_v(params, carry["buffers"], carry["h"], x, y, w)
        return {"params": {n: p - lr * grads[n] for n, p in params.items()}}, loss.reshape(1)

    return step


class PHPTrainer:
    """:func:`make_php_step` on a worker's modules (the recipe's ``trainer``, compute/steps.py): the local model
    trained in place with the workers' kernels (``kernels``: channels-last convolutions, fused linear
    updates), and a second copy holding h, loaded once per client (h does not change during its training),
    whose representation is a forward pass without gradient. The same loss and step, equal to the step to
    float rounding."""

    def __init__(self, model: nn.Module, kernels: tuple[bool, bool], *, lr: float, lam: float, top: int):
        self.net = InPlaceModel(model, lr=lr, channels_last=kernels[0], fused_linear=kernels[1])
        # h only supervises: its own buffers are scratch (batch norm normalises by the batch's statistics)
        self.private = InPlaceModel(model, lr=0.0, channels_last=kernels[0], trainable=())
        self.lr, self.lam, self.top = lr, lam, top

    def train_client(self, carry, shared, x, y, rows, sizes) -> np.ndarray:
        net, lam, top = self.net, self.lam, self.top
        net.load(carry["params"], carry["buffers"])
        if lam:
            self.private.load(carry["h"], carry["buffers"])
        losses = np.empty((len(sizes), 1), dtype=np.float64)
        for b, s in enumerate(sizes):
            idx = torch.from_numpy(rows[b, :s])
            xb, yb, w = net.batch(x, idx), y[idx], x.new_ones(int(s))
            if lam:
                with torch.no_grad():
                    private = self.private.model(xb, stop=top)
                loss = net.loss(self._loss, xb, yb, w, private)
            else:  # the term is off: FedAvg's step
                loss = net.loss(net.cross_entropy, xb, yb, w)
            loss.backward()
            net.step()
            losses[b, 0] = loss.item()
        net.store(carry["params"], carry["buffers"])
        return losses

    def _loss(self, xb, yb, w, private):
        """(1 − λ)·CE + λ·MMD²(φ_w(x), φ_h(x)), as the step's ``loss_fn``."""
        model, lam, top = self.net.model, self.lam, self.top
        feats = model(xb, stop=top)
        return (1 - lam) * weighted_ce(model(feats, start=top), yb, w) + lam * mmd(feats, private, w)


def as_blocks(model: nn.Module) -> BlockNet:
    """The model as a BlockNet (an ``nn.Sequential`` gets that view, its parameters' names unchanged), or a
    ConfigError: FedPHP needs the representation below the top block."""
    if isinstance(model, BlockNet):
        return model
    if isinstance(model, nn.Sequential):
        return BlockNet(OrderedDict(model.named_children()))
    raise ConfigError("model", type(model).__name__, "a BlockNet or an nn.Sequential for FedPHP, whose local "
                      "objective compares the representations below the top block")


@dataclass
class FedPHPState:
    """Each client's inherited private model h_i, (N, *shape) per parameter."""

    params: dict[str, torch.Tensor]


class FedPHP(Algorithm):
    """FedAvg whose clients inherit their past models and match a teacher's representation (the module
    docstring's two rules)."""

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.model = as_blocks(setup.model)
        self.step = recipe_step(self.model, make_php_step, trainer=PHPTrainer, lr=self.cfg.lr,
                                lam=self.cfg.fedphp_lambda, top=top_block_start(self.model, 1))
        self.private = self.cfg.fedphp_rule == "2024"
        # 2022: PFLlib sends (and blends) to the round's clients only; the others keep, and show, their model
        self.initialise_all = self.private

    def mu(self, t: int) -> float:
        """μ_t = μ·min(t − 1, R)/R (PFLlib counts rounds from 0 and ramps over its T rounds)."""
        ramp = self.cfg.fedphp_ramp
        return self.cfg.fedphp_mu * min(t - 1, ramp) / ramp

    def init_state(self, setup: Setup) -> FedPHPState | None:
        """2024: every private model the initial one; 2022 keeps nothing beyond the local models."""
        return FedPHPState(personal_models(setup)[0]) if self.private else None

    def initialise(self, rnd: Round, clients: torch.Tensor) -> Sent:
        """2022: (1 − μ_t)·G + μ_t·(the client's previous local model), PFLlib's ``set_parameters``; 2024: G."""
        if self.private:
            return rnd.send_global(clients)
        mu = self.mu(rnd.t)
        rows = {n: g * (1 - mu) + rnd.local_params[n][clients] * mu for n, g in rnd.global_params.items()}
        return Sent({}, len(clients) * rnd.param_bytes(), rows=rows)

    def personalise(self, rnd: Round) -> dict | None:
        """Evaluated: 2024, the private models h_i; 2022, the local models as initialised (the blend)."""
        return {"params": rnd.state.params, "buffers": rnd.local_buffers} if self.private else None

    def local_train(self, rnd: Round, work: Work) -> Trained:
        """SGD on FedPHP's objective, supervised by h_i (2024: then h_i inherits the trained model) or by G (2022)."""
        c = work.clients
        if self.private:
            teacher = {n: v[c] for n, v in rnd.state.params.items()}
        else:
            teacher = {n: g.unsqueeze(0).expand(len(c), *g.shape).clone() for n, g in rnd.global_params.items()}
        out, aux = rnd.run_steps(self.step, {**rnd.models(c), "h": teacher}, work.plan)
        if self.private:
            mu = self.mu(rnd.t)
            for n, v in rnd.state.params.items():
                v[c] = mu * v[c] + (1 - mu) * out["params"][n]
        return Trained(out["params"], out["buffers"], aux[..., 0], work.plan.sizes > 0)


PARAMS = (
    Param("fedphp_rule", "2022", Choice(("2022", "2024")), "FedPHP: PFLlib's rule, 2022 (April 2022 to December "
          "2024, the FedALA paper's: G supervises, each client starts from (1 − μ_t)·G + μ_t·its previous model, "
          "evaluated) or 2024 (since December 2024: a private model h_i, the moving average of the trained models, "
          "supervises and is evaluated; clients start from G)", short="rule {}"),
    Param("fedphp_mu", 0.9, Float(0, 1), "FedPHP: μ, how much of the past is kept once the ramp is done, μ_t = "
          "μ·min(t − 1, R)/R: 2022, of the client's previous model in its start (1 − μ_t)·G + μ_t·w; 2024, of the "
          "private model h ← μ_t·h + (1 − μ_t)·w (PFLlib's mu; 0: G, or h the trained model)", short="μ"),
    Param("fedphp_ramp", 50, Int(1, 100_000), "FedPHP: R, the rounds over which μ_t grows from 0 to μ (PFLlib: "
          "the run's rounds; set it to them for PFLlib's schedule)"),
    Param("fedphp_lambda", 0.01, Float(0, 1), "FedPHP: λ, the weight of the MMD between the local and the private "
          "model's representations; the cross-entropy weighs 1 − λ (PFLlib's lamda; 0: FedAvg's local training)",
          short="λ"),
)

SPEC = make_spec("fedphp", FedPHP, label="FedPHP", params=PARAMS, colour="teal", line_style="-.",
                 category="personalised aggregation", builtin=True, fedala_paper=True,
                 doc="Li, Zhan, Shao, Li & Song, ECML-PKDD 2021")
