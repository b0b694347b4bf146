"""PartialFed (Sun, Huo, Yang & Bai, NeurIPS 2021): FedAvg in which each client initialises only part of its
model from the global one and the rest from its own model of the round before.

PartialFed-Fix (``partialfed``), one strategy for every client:

    θ_i ← G for the layers loaded, L_i for the top ``partialfed_local_blocks`` blocks (and batch norm with
          ``partialfed_local_bn``);  E epochs of SGD;  G ← Σ_i (n_i / Σn) θ_i over the loaded layers

PartialFed-Adaptive (``partialfed-adaptive``), a strategy learned per client and layer (a module holding
parameters), a logit s_il whose sign says whether layer l loads G:

    a_l = σ((s_l + ε_l)/τ), ε_l logistic noise;  â_l = 1[a_l > 1/2] (a straight-through Gumbel-sigmoid sample)
    s_l ← s_l − η_s · ∂ℓ(L_i + â ⊙ (G − L_i); b)/∂s_l      on one batch b of the client's, â's gradient a's
    θ_i ← G for the layers with s_l ≥ 0, L_i for the others;  E epochs of SGD;  G ← FedAvg's mean of θ_i

The defaults, the Adaptive rule's sources and what travels: docs/methods.md#partialfed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad_and_value

from ..compute.rng import PARTIALFED_BATCH, PARTIALFED_NOISE
from ..compute.steps import weighted_ce
from ..models import ala_param_names, num_blocks
from ..params import Bool, Float, Int, Param
from .base import Aggregated, Algorithm, Round, Sent, Setup
from .registry import make_spec


def kept_local(model: nn.Module, top_blocks: int, batch_norm: bool) -> set[str]:
    """Parameters a client initialises from its own model: those of the top ``top_blocks`` blocks (all of them
    when it is at least the model's number of blocks) and, with ``batch_norm``, of every batch-norm layer."""
    top = min(top_blocks, num_blocks(model))
    names = set(ala_param_names(model, top)) if top else set()
    if batch_norm:
        names |= {f"{m}.{p}" for m, mod in model.named_modules()
                  if isinstance(mod, nn.modules.batchnorm._BatchNorm) for p, _ in mod.named_parameters()}
    return names


class PartialFed(Algorithm):
    """FedAvg whose clients load G into some layers only (a fixed strategy) and keep their own in the others."""

    def __init__(self, setup: Setup):
        super().__init__(setup)
        local = kept_local(setup.model, self.cfg.partialfed_local_blocks, self.cfg.partialfed_local_bn)
        self.loaded = [n for n in setup.param_names if n not in local]

    def downloads(self) -> list[str]:
        return list(self.loaded)

    def initialise(self, rnd: Round, clients: torch.Tensor) -> Sent:
        return rnd.send_global(clients, self.loaded)

    def aggregate(self, rnd: Round, senders: torch.Tensor) -> Aggregated:
        return rnd.weighted_mean(senders, self.loaded)


PARAMS = (
    Param("partialfed_local_blocks", 1, Int(0, 1_000), "PartialFed: top blocks each client initialises from its "
          "own model, the others load G (0: FedAvg; the model's number of blocks or more: Local)", short="local top"),
    Param("partialfed_local_bn", True, Bool(), "PartialFed: batch-norm layers stay local too (their weight and "
          "bias; running statistics are never sent)"),
)

SPEC = make_spec("partialfed", PartialFed, label="PartialFed", params=PARAMS, colour="midnightblue", line_style=":",
                 category="personalised aggregation", builtin=True, fedala_paper=True,
                 doc="Sun, Huo, Yang & Bai, NeurIPS 2021 (PartialFed-Fix)")


# ------------------------------------------------------------------------------------- PartialFed-Adaptive


def layers(model: nn.Module) -> list[list[str]]:
    """The model's layers, each the names of the parameters one module holds itself (a weight and its bias)."""
    out = []
    for m, mod in model.named_modules():
        own = [f"{m}.{p}" if m else p for p, _ in mod.named_parameters(recurse=False)]
        if own:
            out.append(own)
    return out


def loaded(s: torch.Tensor) -> torch.Tensor:
    """The strategy's decisions (…, L): 1 where a layer loads G (s ≥ 0), 0 where it stays local."""
    return (s >= 0).to(s.dtype)


def make_strategy_step(model: nn.Module, groups: list[list[str]], lr_s: float, tau: float):
    """One step of PartialFed-Adaptive's strategy for one client on one batch. carry: ``params`` (L_i),
    ``buffers``, ``s`` (L,), ``noise`` (L,) (logistic); shared: ``global`` (G). Returns the new ``s``."""
    index = {n: i for i, names in enumerate(groups) for n in names}

    def loss_fn(s, local, glob, noise, buffers, x, y, w):
        soft = torch.sigmoid((s + noise) / tau)
        a = (soft > 0.5).to(soft.dtype) + soft - soft.detach()  # the hard sample forward, the soft one backward
        theta = {n: v + a[index[n]] * (glob[n] - v) for n, v in local.items()}
        scratch = {k: b.clone() for k, b in buffers.items()}  # batch norm's statistics are not this step's
        return weighted_ce(functional_call(model, (theta, scratch), (x,)), y, w)

    g_and_v = grad_and_value(loss_fn)

    def step(carry, shared, x, y, w):
        g, loss = g_and_v(carry["s"], carry["params"], shared["global"], carry["noise"], carry["buffers"], x, y, w)
        return {"s": carry["s"] - lr_s * g}, loss.reshape(1)

    return step


@dataclass
class AdaptiveState:
    """Each client's strategy logits, (N, L): layer l loads G while s_il ≥ 0."""

    s: torch.Tensor


class PartialFedAdaptive(Algorithm):
    """FedAvg whose clients learn, per layer, whether to load G or keep their own (module docstring)."""

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.groups = layers(setup.model)
        self.step = make_strategy_step(setup.model, self.groups, self.cfg.partialfed_lr, self.cfg.partialfed_tau)

    def init_state(self, setup: Setup) -> AdaptiveState:
        """Every logit 0: every layer loads G until a client's own loss says otherwise."""
        return AdaptiveState(torch.zeros(setup.num_clients, len(self.groups), device=setup.device))

    def initialise(self, rnd: Round, clients: torch.Tensor) -> Sent:
        """One strategy step per client on a batch of its own, then G into the layers whose logit is ≥ 0."""
        st = rnd.state
        ids = clients.cpu().tolist()
        noise = np.stack([np.log(u) - np.log1p(-u) for u in
                          (rnd.rng(c, PARTIALFED_NOISE).uniform(1e-12, 1.0, len(self.groups)) for c in ids)])
        carry = {**rnd.models(clients), "s": st.s[clients],
                 "noise": torch.as_tensor(noise, dtype=st.s.dtype, device=rnd.device)}
        out, _ = rnd.run_steps(self.step, carry, rnd.plan(clients, steps=1, stream=PARTIALFED_BATCH),
                               {"global": rnd.global_params})
        st.s[clients] = out["s"]
        a = loaded(out["s"])
        rows = {}
        for i, names in enumerate(self.groups):
            for n in names:
                v = rnd.local_params[n][clients]
                keep = a[:, i].reshape(-1, *[1] * (v.dim() - 1)) > 0
                rows[n] = torch.where(keep, rnd.global_params[n], v)
        return Sent({}, len(clients) * rnd.param_bytes(), rows=rows)


ADAPTIVE_PARAMS = (
    Param("partialfed_lr", 1.0, Float(0, 1_000), "PartialFed-Adaptive: η_s, the step of each client's layer-wise "
          "strategy logits (one step a round, on one batch of its own)", short="η_s"),
    Param("partialfed_tau", 1.0, Float(0, 1_000, lo_open=True), "PartialFed-Adaptive: τ, the temperature of the "
          "Gumbel-sigmoid relaxation of its load/keep decisions", short="τ"),
)

ADAPTIVE_SPEC = make_spec("partialfed-adaptive", PartialFedAdaptive, label="PartialFed-Adaptive",
                          params=ADAPTIVE_PARAMS, colour="slateblue", line_style=":", modifiers=(),
                          category="personalised aggregation", builtin=True, fedala_paper=True,
                          doc="Sun, Huo, Yang & Bai, NeurIPS 2021 (PartialFed-Adaptive)")
