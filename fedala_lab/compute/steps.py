"""Per-client step functions: local SGD, evaluation and their loss (backends.py runs them over clients).

Written with ``torch.func`` so one definition serves both backends: called as is by the loop backend and
under ``vmap`` by the vectorised one. Parameters are plain tensors passed to ``functional_call``; the
module's own parameters are never used.

Local SGD is described by a :class:`SGD` value (learning rate, an extra objective term, which parameters
train), so that worker processes (workers.py) can rebuild the same step from it: it pickles. Any other
step an algorithm trains with (pFedMe's, Per-FedAvg's…) goes to the workers when made through a
:class:`Recipe`: its factory and arguments, which pickle too. Where the model
has a batched form (batched.py), a step also carries ``step.batched``: the same step for A clients at once,
which the vectorised backend runs instead of ``vmap(step)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad_and_value

from . import batched as batched_forms


class Objective(Protocol):
    """An extra term of the local objective, given by its gradient (FedProx's μ(θ − G), Ditto's λ(v − G)…).

    ``grad(params, carry, shared)`` returns the term's gradient for (some of) ``params``: ``carry`` is the
    client's own state in this call (its params, buffers and whatever else the caller put there, e.g. a
    per-client anchor), ``shared`` what every client sees (e.g. ``shared["global"]``, the global model).
    Written with plain tensor arithmetic so that it runs per client and under ``vmap`` alike; an instance of
    a class importable by name pickles, so worker processes can use it. An objective whose ``grad`` is
    elementwise (it broadcasts: ``params`` and ``carry`` (A, *shape), ``shared`` unbatched) says so with a
    class attribute ``batched = True``; the vectorised backend then runs it on all clients at once.

    An objective whose gradient is a proximal pull μ(θ − a) may also say so with a method
    ``pull(carry, shared) -> (μ, anchors)`` (name → a; the gradient is 0 for parameters not named): the
    workers' fused update (``fused_linear``) then moves θ the fraction lr·μ towards a in place instead of
    writing the gradient (FedProx's and Ditto's :class:`~fedala_lab.algorithms.fedprox.Proximal`)."""

    def grad(self, params: dict, carry: dict, shared: dict) -> dict: ...


@dataclass(frozen=True)
class SGD:
    """Plain local SGD: θ ← θ − lr·(∇ℓ(θ) + objective's gradient), on the ``trainable`` parameters only
    (None: all), no momentum, no weight decay (the reference's ``torch.optim.SGD(lr)``)."""

    lr: float
    objective: Objective | None = None
    trainable: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Recipe:
    """How a per-client step is made: ``factory(model, **kwargs)``. A module-level factory and plain values
    pickle, so a worker process (workers.py) rebuilds the same step on its copy of the model and trains a
    client with it, as the loop backend would here. Make steps with :func:`recipe_step`.

    ``trainer`` (optional): the step's module form, ``trainer(model, kernels, **kwargs)``, an object whose
    ``train_client(carry, shared, x, y, rows, sizes)`` trains one client in place (its carry slot, written
    back) and returns each step's aux values (K, m), as a worker runs the step. A worker uses it where the
    run asked for faster kernels (``kernels`` = (channels_last, fused_linear), ``backend="auto"``): the same
    math on an ``nn.Module`` trained in place (workers.py ``InPlaceModel``: channels-last convolutions, fused
    linear updates), equal to the step to float rounding. Without those kernels the step itself runs."""

    factory: Callable[..., Callable]
    kwargs: tuple[tuple[str, Any], ...] = ()
    trainer: Callable[..., Any] | None = None

    def build(self, model: torch.nn.Module) -> Callable:
        step = self.factory(model, **dict(self.kwargs))
        step.recipe = self
        return step


def recipe_step(model: torch.nn.Module, factory: Callable[..., Callable], *, trainer: Callable[..., Any] | None = None,
                **kwargs) -> Callable:
    """``factory(model, **kwargs)``, remembering how it was made (``step.recipe``): a step that worker
    processes can run (the loop's arithmetic, a client per process); ``trainer``: its module form for the
    workers' faster kernels (:class:`Recipe`)."""
    return Recipe(factory, tuple(sorted(kwargs.items())), trainer).build(model)


def weighted_ce(logits: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Cross-entropy averaged over the real rows of a (possibly padded) batch: Σ w·ℓ / Σ w."""
    return (F.cross_entropy(logits, y, reduction="none") * w).sum() / w.sum().clamp_min(1.0)


def grad_and_loss(model: torch.nn.Module):
    """``f(params, buffers, x, y, w) -> (grads, loss)``: the gradient of :func:`weighted_ce` of ``model`` with
    respect to every parameter, and its value — the building block of steps other than plain SGD (Per-FedAvg's
    two gradients, pFedMe's personal steps)."""

    def loss_fn(params, buffers, x, y, w):
        return weighted_ce(functional_call(model, (params, buffers), (x,)), y, w)

    return grad_and_value(loss_fn)


def make_sgd_step(model: torch.nn.Module, sgd: SGD):
    """One SGD step of ``sgd`` on cross-entropy for one client and one batch (``step.sgd`` keeps the recipe)."""
    trainable = None if sgd.trainable is None else set(sgd.trainable)

    def loss_fn(train, frozen, buffers, x, y, w):
        return weighted_ce(functional_call(model, ({**frozen, **train}, buffers), (x,)), y, w)

    g_and_v = grad_and_value(loss_fn)

    def step(carry, shared, x, y, w):
        params, buffers = carry["params"], carry["buffers"]
        train = params if trainable is None else {n: p for n, p in params.items() if n in trainable}
        frozen = {} if trainable is None else {n: p for n, p in params.items() if n not in trainable}
        grads, loss = g_and_v(train, frozen, buffers, x, y, w)
        if sgd.objective is not None:
            extra = sgd.objective.grad(train, carry, shared)
            grads = {n: grads[n] + extra[n] if n in extra else grads[n] for n in grads}
        new = {**params, **{n: p - sgd.lr * grads[n] for n, p in train.items()}}
        return {"params": new}, loss.reshape(1)  # buffers (BN statistics) were updated in place

    step.sgd = sgd
    step.graphable = True  # no host sync, no data-dependent control flow: capturable (backends.py)
    if batched_forms.batchable(model) and (sgd.objective is None or getattr(sgd.objective, "batched", False)):
        step.batched = _batched_sgd_step(model, sgd)
    return step


def _batched_sgd_step(model: torch.nn.Module, sgd: SGD):
    """:func:`make_sgd_step` for A clients at once (batched.py): autograd of the sum of their losses, or for a
    Linear/ReLU chain :func:`~fedala_lab.compute.batched.sgd_update` (the same step to float rounding)."""
    trainable = None if sgd.trainable is None else set(sgd.trainable)
    layers = batched_forms.chain(model)

    def step(carry, shared, x, y, w):
        params = carry["params"]
        names = [n for n in params if trainable is None or n in trainable]
        if layers is not None:  # written out, each weight's step fused into its gradient's product
            extra = {} if sgd.objective is None else sgd.objective.grad({n: params[n] for n in names}, carry, shared)
            losses = batched_forms.sgd_update(layers, params, names, x, y, w, sgd.lr)
            for n, g in extra.items():  # the objective's gradient at θ before the step
                params[n].add_(g, alpha=-sgd.lr)
            return {"params": params}, losses.unsqueeze(1)
        with torch.enable_grad():
            train = {n: params[n].detach().requires_grad_(True) for n in names}
            out = batched_forms.forward(model, {**params, **train}, x)
            losses = batched_forms.client_losses(out, y, w)
            grads = dict(zip(names, torch.autograd.grad(losses.sum(), [train[n] for n in names])))
        if sgd.objective is not None:
            extra = sgd.objective.grad({n: params[n] for n in names}, carry, shared)
            grads = {n: grads[n] + extra[n] if n in extra else grads[n] for n in grads}
        for n in names:  # in place, on the backend's working copy: one pass over each tensor
            params[n].add_(grads[n], alpha=-sgd.lr)
        return {"params": params}, losses.detach().unsqueeze(1)

    return step


def make_eval_step(model: torch.nn.Module, scores: bool = False):
    """Forward only: (sum of cross-entropy, number correct) for one chunk of rows; with ``scores`` followed by the
    chunk's softmax probabilities, (rows, C) flattened, padded rows last (the test AUC's scores,
    compute/metrics.py)."""

    def scored(out, values):
        return torch.cat([values, F.softmax(out, dim=-1).flatten(-2).to(values.dtype)], dim=-1) if scores else values

    def step(carry, shared, x, y, w):
        out = functional_call(model, (carry["params"], carry["buffers"]), (x,))
        loss = (F.cross_entropy(out, y, reduction="none") * w).sum()
        correct = ((out.argmax(1) == y).to(w.dtype) * w).sum()
        return {}, scored(out, torch.stack([loss, correct]))

    # the same step on a copy of the model, for threads (compute/parallel.py)
    step.rebind = lambda m: make_eval_step(m, scores)
    step.graphable = True
    if batched_forms.batchable(model):
        def batched(carry, shared, x, y, w):
            out = batched_forms.forward(model, carry["params"], x)
            ce = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), reduction="none").reshape(y.shape)
            correct = ((out.argmax(-1) == y).to(w.dtype) * w).sum(1)
            return {}, scored(out, torch.stack([(ce * w).sum(1), correct], dim=1))

        step.batched = batched
    return step
