"""Per-client step functions: local SGD, evaluation and their loss (backends.py runs them over clients).

Written with ``torch.func`` so one definition serves both backends: called as is by the loop backend and
under ``vmap`` by the vectorised one. Parameters are plain tensors passed to ``functional_call``; the
module's own parameters are never used.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value


def weighted_ce(logits: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Cross-entropy averaged over the real rows of a (possibly padded) batch: Σ w·ℓ / Σ w."""
    return (F.cross_entropy(logits, y, reduction="none") * w).sum() / w.sum().clamp_min(1.0)


def make_sgd_step(model: torch.nn.Module, lr: float, grad_term: Callable | None = None):
    """One plain SGD step on cross-entropy: θ ← θ − lr·(∇ℓ(θ) + grad_term(θ, shared)).

    No momentum, no weight decay (the reference's ``torch.optim.SGD(lr)``). ``grad_term`` is the
    gradient of an extra local objective term, e.g. FedProx's μ(θ − G).
    """

    def loss_fn(params, buffers, x, y, w):
        return weighted_ce(functional_call(model, (params, buffers), (x,)), y, w)

    g_and_v = grad_and_value(loss_fn)

    def step(carry, shared, x, y, w):
        params, buffers = carry["params"], carry["buffers"]
        grads, loss = g_and_v(params, buffers, x, y, w)
        if grad_term is not None:
            extra = grad_term(params, shared)
            grads = {n: grads[n] + extra[n] for n in grads}
        new = {n: p - lr * grads[n] for n, p in params.items()}
        return {"params": new}, loss.reshape(1)  # buffers (BN statistics) were updated in place

    return step


def make_eval_step(model: torch.nn.Module):
    """Forward only: (sum of cross-entropy, number correct) for one chunk of rows."""

    def step(carry, shared, x, y, w):
        out = functional_call(model, (carry["params"], carry["buffers"]), (x,))
        loss = (F.cross_entropy(out, y, reduction="none") * w).sum()
        correct = ((out.argmax(1) == y).to(w.dtype) * w).sum()
        return {}, torch.stack([loss, correct])

    step.rebind = make_eval_step  # the same step on a copy of the model, for threads (compute/parallel.py)
    return step
