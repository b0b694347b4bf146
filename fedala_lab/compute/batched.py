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
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_LEAVES = (nn.Linear, nn.ReLU, nn.Flatten, nn.Conv2d, nn.MaxPool2d, nn.Identity)


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


__all__ = ["batchable", "client_losses", "forward"]
