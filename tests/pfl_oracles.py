"""Plain-torch helpers for the pFL methods' oracle tests: a client's batches in the reference order, SGD on an
nn.Module, FedAvg's mean — written independently of the engine, so a round of a method can be transcribed
from its paper and compared with the simulation."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F


def batches(data, client: int, batch_size: int, epochs: int = 1):
    """Client ``client``'s train split in its stored order, in full batches (the reference's DataLoader with
    shuffle=False, drop_last=True), ``epochs`` times."""
    x, y = data.client_train(client)
    n = len(y) // batch_size * batch_size
    return [(x[i:i + batch_size], y[i:i + batch_size]) for _ in range(epochs) for i in range(0, n, batch_size)]


def module(template: torch.nn.Module, params: dict) -> torch.nn.Module:
    """A copy of ``template`` holding ``params`` (trainable)."""
    m = copy.deepcopy(template)
    with torch.no_grad():
        for k, p in m.named_parameters():
            p.copy_(params[k])
            p.requires_grad_(True)
    return m


def state(m: torch.nn.Module) -> dict:
    return {k: p.detach().clone() for k, p in m.named_parameters()}


def sgd(m: torch.nn.Module, data, lr: float, *, extra=None, trainable=None):
    """Plain SGD on cross-entropy over ``data`` batches: p ← p − lr·(∇ + extra(name, p))."""
    for xb, yb in data:
        loss = F.cross_entropy(m(xb), yb)
        grads = torch.autograd.grad(loss, [p for k, p in m.named_parameters() if trainable is None or k in trainable])
        with torch.no_grad():
            it = iter(grads)
            for k, p in m.named_parameters():
                if trainable is not None and k not in trainable:
                    continue
                g = next(it)
                if extra is not None:
                    g = g + extra(k, p)
                p.sub_(lr * g)
    return m


def mean(models: dict[int, dict], sizes) -> dict:
    """FedAvg's mean of the clients' parameters weighted by their train sizes."""
    total = sum(sizes[c] for c in models)
    names = next(iter(models.values())).keys()
    return {k: sum(models[c][k] * (sizes[c] / total) for c in models) for k in names}


def grads(m: torch.nn.Module, xb, yb) -> dict:
    """The gradient of the batch's mean cross-entropy at ``m``'s parameters, by name."""
    names, params = zip(*m.named_parameters())
    return dict(zip(names, torch.autograd.grad(F.cross_entropy(m(xb), yb), params)))


def client_test_loss(m: torch.nn.Module, data, client: int) -> float:
    """Mean cross-entropy of ``m`` on the client's test split (what the run records as its test_loss)."""
    x, y = data.client_test(client)
    with torch.no_grad():
        return float(F.cross_entropy(m(x), y))


def first_rows_batches(data, client: int, batch_size: int, rows: int, epochs: int = 1):
    """Like :func:`batches`, over the first ``rows`` rows of the client's train split only (FedFomo trains there
    and validates on the rest)."""
    x, y = data.client_train(client)
    n = rows // batch_size * batch_size
    return [(x[i:i + batch_size], y[i:i + batch_size]) for _ in range(epochs) for i in range(0, n, batch_size)]


def descend(m: torch.nn.Module, data, lr: float, loss):
    """Plain SGD on any objective over ``data`` batches: p ← p − lr·∇ loss(m, x, y)."""
    for xb, yb in data:
        grads = torch.autograd.grad(loss(m, xb, yb), list(m.parameters()))
        with torch.no_grad():
            for p, g in zip(m.parameters(), grads):
                p.sub_(lr * g)
    return m


def accuracy(template: torch.nn.Module, params: dict, x: torch.Tensor, y: torch.Tensor) -> int:
    """How many of ``x`` the model ``params`` classifies right."""
    with torch.no_grad():
        return int((module(template, params)(x).argmax(1) == y).sum())
