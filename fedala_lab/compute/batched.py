"""Many clients' models through one forward pass, without ``vmap``: the vectorised backend's fast path.

``torch.func.vmap`` over a per-client step costs about a millisecond of Python per call whatever the model, and
on the lecture's small models that overhead is most of a step (docs/design.md#performance). For models built
only of layers whose batched form is one tensor operation — ``Linear`` (a batched matrix product), ``Conv2d`` (a
grouped convolution, as vmap makes it), ``ReLU``, ``MaxPool2d``, ``Flatten``, in ``nn.Sequential`` /
``BlockNet`` containers — :func:`forward` runs A clients' parameters (A, *shape) on their own inputs (A, B, …)
at once, and a step differentiates the sum of the clients' losses with plain autograd: client a's gradient is
that of its own loss (the clients do not share a parameter), so each update is the per-client one, to float
rounding. A step function carries such a form as ``step.batched`` (steps.py, algorithms/ala.py); the
vectorised backend calls it in place of ``vmap(step)`` — the same inputs, the same outputs.

Anything else (batch norm, embeddings, a module of your own) has no batched form: those models take ``vmap``.

Models of ``Linear``, ``ReLU``, ``Flatten`` and ``Identity`` only (an MLP, a logistic regression, a conv net's
head) go further: their backward pass is written out (the cross-entropy's gradient, then one batched product per
weight and per layer input) instead of recorded for autograd and replayed. :func:`gradients` runs the products
autograd would run, in its orientation, so its gradients are autograd's bit for bit (ALA's weight learning uses
it). :func:`sgd_update` (local training) folds each weight's SGD step into the product that makes its gradient
(``W.baddbmm_(δᵀ, h, alpha=−lr)``): autograd's gradient of a weight comes out transposed, and stepping a weight
by a transposed tensor is far slower than by a contiguous one, most of the old step's time. Float rounding only: the
step sums in another order (tests/test_batched.py). docs/design.md#performance has the measurements.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_LEAVES = (nn.Linear, nn.ReLU, nn.Flatten, nn.Conv2d, nn.MaxPool2d, nn.Identity)
_CHAIN = (nn.Linear, nn.ReLU, nn.Flatten, nn.Identity)  # the layers whose backward pass is written out here


def batchable(model: nn.Module) -> bool:
    """Whether :func:`forward` can run ``model``: containers are ``nn.Sequential`` (a BlockNet is one), leaves
    the layers in ``_LEAVES`` with default settings where those matter (zero padding, no ceil mode…)."""
    for m in model.modules():
        if isinstance(m, nn.Sequential):
            continue
        if not isinstance(m, _LEAVES):
            return False
        if isinstance(m, nn.Conv2d) and m.padding_mode != "zeros":
            return False
        if isinstance(m, nn.MaxPool2d) and (m.ceil_mode or m.return_indices):
            return False
        if isinstance(m, nn.Flatten) and m.end_dim != -1:
            return False
    return True


def forward(model: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, start: int = 0,
            stop: int | None = None) -> torch.Tensor:
    """The outputs (A, B, *out) of A clients' models on their inputs x (A, B, *in); ``params`` are (A, *shape)
    by name (the model's own parameters are not used). ``start``/``stop``: run the top-level children
    ``start…stop - 1`` only (a BlockNet's blocks; ALA's head-only steps)."""
    # a bare layer as the whole model (logistic regression: nn.Linear) is its one block; its parameters'
    # names carry no prefix
    blocks = list(model.named_children()) if isinstance(model, nn.Sequential) else [("", model)]
    for name, child in blocks[start:stop]:
        x = _run(child, f"{name}." if name else "", params, x)
    return x


def _run(m: nn.Module, prefix: str, params: dict, x: torch.Tensor) -> torch.Tensor:
    if isinstance(m, nn.Sequential):
        for name, child in m.named_children():
            x = _run(child, f"{prefix}{name}.", params, x)
        return x
    a, b = x.shape[:2]
    if isinstance(m, nn.Linear):  # (A, B, …, in) @ (A, in, out): one batched product for every client
        w, bias = params[prefix + "weight"], params.get(prefix + "bias")
        flat = x.reshape(a, -1, x.shape[-1])
        out = torch.bmm(flat, w.transpose(1, 2)) if bias is None else torch.baddbmm(bias.unsqueeze(1), flat,
                                                                                     w.transpose(1, 2))
        return out.reshape(*x.shape[:-1], w.shape[1])
    if isinstance(m, nn.ReLU):
        return torch.relu(x)
    if isinstance(m, nn.Identity):
        return x
    if isinstance(m, nn.Flatten):  # per sample: dims from start_dim on, counted within a sample
        return x.flatten(m.start_dim + 1 if m.start_dim >= 0 else m.start_dim)
    if isinstance(m, nn.Conv2d):  # the clients as groups of one convolution over the batch (vmap's way)
        w, bias = params[prefix + "weight"], params.get(prefix + "bias")
        c, h, wd = x.shape[2:]
        xg = x.transpose(0, 1).reshape(b, a * c, h, wd)
        out = F.conv2d(xg, w.reshape(-1, *w.shape[2:]), None if bias is None else bias.reshape(-1), m.stride,
                       m.padding, m.dilation, m.groups * a)
        return out.reshape(b, a, -1, *out.shape[2:]).transpose(0, 1)
    if isinstance(m, nn.MaxPool2d):
        out = F.max_pool2d(x.reshape(a * b, *x.shape[2:]), m.kernel_size, m.stride, m.padding, m.dilation)
        return out.reshape(a, b, *out.shape[1:])
    raise TypeError(f"no batched form for {type(m).__name__}")  # batchable() said otherwise: a bug


def client_losses(out: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Each client's weighted cross-entropy (steps.weighted_ce), (A,): Σ w·ℓ / max(Σ w, 1) over its rows."""
    ce = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), reduction="none").reshape(y.shape)
    return (ce * w).sum(1) / w.sum(1).clamp_min(1.0)


# -- the written-out backward pass of Linear/ReLU chains ------------------------------------------------------


def chain(model: nn.Module, start: int = 0, stop: int | None = None, *,
          logits: bool = True) -> list[tuple[str, nn.Module]] | None:
    """The layers (name prefix, module) that :func:`forward` runs from top-level child ``start`` to ``stop``, in
    order, when they are all ``Linear``, ``ReLU``, ``Flatten`` or ``Identity`` (in ``nn.Sequential``
    containers) and, with ``logits``, the last is a ``Linear``; None otherwise."""
    blocks = list(model.named_children()) if isinstance(model, nn.Sequential) else [("", model)]
    out: list[tuple[str, nn.Module]] = []

    def walk(m: nn.Module, prefix: str) -> bool:
        if isinstance(m, nn.Sequential):
            return all(walk(c, f"{prefix}{n}.") for n, c in m.named_children())
        if not isinstance(m, _CHAIN) or (isinstance(m, nn.Flatten) and m.end_dim != -1):
            return False
        out.append((prefix, m))
        return True

    if not all(walk(c, f"{n}." if n else "") for n, c in blocks[start:stop]):
        return None
    return out if out and (not logits or isinstance(out[-1][1], nn.Linear)) else None


def plain_forward(layers, params: dict, x: torch.Tensor) -> torch.Tensor:
    """One model's ``layers`` (:func:`chain`) on ``x`` with ``params`` (unbatched), by the calls the modules'
    own forward makes (``F.linear``…), so equal to ``functional_call`` bit for bit, without its cost of
    swapping the module's parameters (a large share of ALA's feature pass on the lecture's MLP)."""
    for prefix, m in layers:
        if isinstance(m, nn.Linear):
            x = F.linear(x, params[prefix + "weight"], params.get(prefix + "bias"))
        elif isinstance(m, nn.ReLU):
            x = torch.relu(x)
        elif isinstance(m, nn.Flatten):
            x = x.flatten(m.start_dim, m.end_dim)
    return x


def _forward_saved(layers, params: dict, x: torch.Tensor) -> tuple[torch.Tensor, list]:
    """:func:`forward` through ``layers`` (:func:`chain`), keeping what the backward pass reads: each Linear's
    input (A, rows, in), each ReLU's output, each Flatten's input shape."""
    saved = []
    for prefix, m in layers:
        saved.append(x.reshape(x.shape[0], -1, x.shape[-1]) if isinstance(m, nn.Linear)
                     else x.shape if isinstance(m, nn.Flatten) else None)
        x = _run(m, prefix, params, x)
        if isinstance(m, nn.ReLU):
            saved[-1] = x
    return x, saved


def _losses_and_delta(out: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`client_losses` and its gradient with respect to the logits ``out`` (A, B, C), (softmax − one-hot)
    · w / max(Σ w, 1) row by row, computed as autograd computes it (the same kernels, bit for bit)."""
    logp = torch.log_softmax(out, -1)
    ce = -logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    denom = w.sum(1).clamp_min(1.0)
    losses = (ce * w).sum(1) / denom
    scale = torch.ones_like(denom).div_(denom).unsqueeze(1) * w  # ∂loss/∂ce: autograd's (1 / denom) · w
    grad_logp = torch.zeros_like(logp).scatter_(-1, y.unsqueeze(-1), -scale.unsqueeze(-1))
    return losses, torch.ops.aten._log_softmax_backward_data(grad_logp, logp, -1, logp.dtype)


def _backward(layers, params: dict, saved: list, delta: torch.Tensor, names, lr: float | None = None) -> dict:
    """From the logits' gradient ``delta`` down through ``layers``, for the parameters ``names``: their gradients,
    each by the kernel autograd uses for it in its orientation, so equal to autograd's bit for bit (``lr``
    None); or, given ``lr``, the SGD step θ ← θ − lr·∇θ done in place, each weight's step fused into the product
    that makes its gradient (W.baddbmm_(δᵀ, h, alpha=−lr): the gradient is never stored, and W is written in
    its own layout; float rounding apart, the same step). Stops below the lowest layer holding one of
    ``names``."""
    names = set(names)
    lowest = min((i for i, (prefix, m) in enumerate(layers) if isinstance(m, nn.Linear)
                  and ({prefix + "weight", prefix + "bias"} & names)), default=len(layers))
    grads = {}
    for i in range(len(layers) - 1, lowest - 1, -1):
        prefix, m = layers[i]
        if isinstance(m, nn.Linear):
            h, wn, bn = saved[i], prefix + "weight", prefix + "bias"
            d = delta.reshape(delta.shape[0], -1, delta.shape[-1])
            # the input's gradient first: it is the weight's before the step
            below = torch.bmm(d, params[wn]).reshape(*delta.shape[:-1], h.shape[-1]) if i > lowest else None
            if wn in names:
                if lr is None:  # (hᵀδ)ᵀ: autograd's orientation, so its sums in its order
                    grads[wn] = torch.bmm(h.transpose(1, 2), d).transpose(1, 2)
                else:
                    params[wn].baddbmm_(d.transpose(1, 2), h, alpha=-lr)
            if bn in names and bn in params:
                if lr is None:
                    grads[bn] = d.sum(1)
                else:
                    params[bn].sub_(d.sum(1), alpha=lr)
            delta = below
        elif isinstance(m, nn.ReLU):
            delta = torch.ops.aten.threshold_backward(delta, saved[i], 0)  # autograd's own op for ReLU
        elif isinstance(m, nn.Flatten):
            delta = delta.reshape(saved[i])
    return grads


def sgd_update(layers, params: dict, names, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor,
               lr: float) -> torch.Tensor:
    """One SGD step of A clients on their batches through ``layers`` (:func:`chain`): ``params[n]`` (A, *shape)
    ← params[n] − lr·∂(client loss)/∂n in place for the ``names``, the weights' steps fused into their gradients'
    products (float rounding apart, autograd's step); returns the clients' losses before the step (A,)."""
    out, saved = _forward_saved(layers, params, x)
    losses, delta = _losses_and_delta(out, y, w)
    _backward(layers, params, saved, delta, names, lr)
    return losses


def gradients(layers, params: dict, names, x: torch.Tensor, y: torch.Tensor,
              w: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """The clients' losses (A,) through ``layers`` (:func:`chain`) and their gradients with respect to
    ``names``, without autograd."""
    out, saved = _forward_saved(layers, params, x)
    losses, delta = _losses_and_delta(out, y, w)
    return losses, _backward(layers, params, saved, delta, names)


__all__ = ["batchable", "chain", "client_losses", "forward", "gradients", "plain_forward", "sgd_update"]
