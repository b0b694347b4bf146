"""Per-FedAvg (Fallah, Mokhtari & Ozdaglar, NeurIPS 2020), its first-order variant: FedAvg that learns a global
model which is good after one local step of SGD. Per pair of batches D, D':

    θ' = θ − α ∇f_i(θ; D);   θ ← θ − β ∇f_i(θ'; D')

Evaluated: each client's model after one SGD step (lr α) on one batch of its train split. α, β, the batch
pairing and the departures from PFLlib: docs/methods.md#perfedavg.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from ..compute.backends import BatchPlan
from ..compute.rng import PERFEDAVG_ADAPT
from ..compute.steps import grad_and_loss, recipe_step
from ..params import Float, Optional, Param
from . import notes
from .base import Algorithm, Round, Setup, Trained, Work
from .registry import make_spec


def make_perfedavg_step(model: torch.nn.Module, alpha: float, beta: float, split: int):
    """One Per-FedAvg (FO) step for one client on a batch holding D (its first ``split`` rows) then D'."""

    g_and_v = grad_and_loss(model)

    def step(carry, shared, x, y, w):
        theta, buffers = carry["params"], carry["buffers"]
        grads, loss = g_and_v(theta, buffers, x[:split], y[:split], w[:split])
        adapted = {n: p - alpha * grads[n] for n, p in theta.items()}
        grads, _ = g_and_v(adapted, buffers, x[split:], y[split:], w[split:])
        return {"params": {n: p - beta * grads[n] for n, p in theta.items()}}, loss.reshape(1)

    return step


def pairs(plan: BatchPlan, per_epoch: np.ndarray) -> BatchPlan:
    """Each client's batches two by two within each pass over its split (``per_epoch[i]`` batches a pass), each
    pair as one batch: D's rows then D''s. D is never a partial batch (only a pass's last batch can be one,
    and that is D' or left out), so D is always the first ``batch_size`` rows."""
    rows = plan.rows.cpu().numpy()
    out = []
    for i in range(plan.num_clients):
        k, p, sizes = int(plan.num_steps[i]), int(per_epoch[i]), plan.sizes[i]
        out.append([np.concatenate([rows[i, j, :sizes[j]], rows[i, j + 1, :sizes[j + 1]]])
                    for j in range(k - 1) if j % p % 2 == 0 and (j + 1) % p])
    return BatchPlan.from_batches(out, plan.rows.device, clients=plan.clients)


class PerFedAvg(Algorithm):
    """FedAvg whose local steps are Per-FedAvg (FO) steps; evaluated after one adaptation step."""

    def __init__(self, setup: Setup):
        super().__init__(setup)
        cfg = self.cfg
        beta = cfg.lr if cfg.perfedavg_beta is None else cfg.perfedavg_beta
        self.step = recipe_step(setup.model, make_perfedavg_step, alpha=cfg.lr, beta=beta, split=cfg.batch_size)

    def personalise(self, rnd: Round) -> dict:
        everyone = rnd.everyone
        adapted = rnd.train(everyone, rnd.plan(everyone, steps=1, stream=PERFEDAVG_ADAPT))
        return {"params": adapted.params, "buffers": adapted.buffers}

    def local_train(self, rnd: Round, work: Work) -> Trained:
        per_epoch = self.setup.batches_per_epoch(self.setup.train_sizes[work.clients.cpu().numpy()])
        plan = pairs(work.plan, per_epoch)
        out, aux = rnd.run_steps(self.step, rnd.models(work.clients), plan)
        return Trained(out["params"], out["buffers"], aux[..., 0], done=plan.sizes > 0)


def _hint(cfg) -> str:
    """The setting most likely behind a diverged Per-FedAvg run: its outer step β where it is set above the
    inner step α = lr (otherwise lr is both, and the engine names it)."""
    beta = cfg.perfedavg_beta
    if beta is None or beta <= cfg.lr:
        return ""
    return (f"Per-FedAvg's perfedavg_beta={beta:g}, the step size of each local step, is most likely too large (it "
            f"is above the inner step lr={cfg.lr:g}): try a smaller perfedavg_beta, or none (= lr)")


PARAMS = (Param("perfedavg_beta", None, Optional(Float(0, 10, lo_open=True)), "Per-FedAvg: step size β of each "
                "local step (none: the run's lr, as PFLlib); α, of the inner step and of the adaptation before "
                "evaluation, is the run's lr", short="β {}"),)

SPEC = make_spec("perfedavg", PerFedAvg, label="Per-FedAvg", params=PARAMS, colour="maroon",
                 line_style="-.", category="fine-tune a global model", divergence_hint=_hint, builtin=True,
                 curve_note=partial(notes.adapted, how="after one adaptation step on the client's own data"),
                 fedala_paper=True, doc="Fallah, Mokhtari & Ozdaglar, NeurIPS 2020 (first-order variant)")
