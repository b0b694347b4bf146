"""Which rows each client uses at each step: local SGD batches and evaluation chunks (as BatchPlans).

Pure functions of the clients' split sizes and the batch settings, shared by the round loop and every
algorithm's own training (a personal model's epochs, a fine-tuned copy, ALA's windows).
"""

from __future__ import annotations

import numpy as np
import torch

from . import rng
from .backends import BatchPlan
from .metrics import micro_auc

EVAL_CHUNK = 256  # rows per client per evaluation step (memory, not results, depends on it)
# rows per forward-only step of channels-last convolutions on a CPU (evaluation, ALA's feature pass): the MNIST
# CNN's first activation is 74 kB a row, so 64 rows stay within a core's 2 MB L2 cache far better than 256
# (docs/design.md#performance)
CL_CHUNK = 64


def forward_chunk(channels_last: bool) -> int:
    """Rows per client per forward-only step (evaluation, ALA's feature pass)."""
    return CL_CHUNK if channels_last else EVAL_CHUNK


def batches_per_epoch(n, batch_size: int, drop_last: bool):
    """Local SGD batches in one pass over ``n`` train samples (an int or an array of them)."""
    return n // batch_size if drop_last else -(-n // batch_size)


def train_batches(n: int, offset: int, *, batch_size: int, drop_last: bool, shuffle: bool, seed: int, t: int,
                  client: int, epochs: int | None = None, steps: int | None = None,
                  stream: int = rng.TRAIN_ORDER) -> list[np.ndarray]:
    """One client's local SGD batches (row indices): ``epochs`` passes over its ``n`` train rows starting at
    ``offset``, or exactly ``steps`` batches (passes repeat as needed).

    Reference order unless ``shuffle``: the split in its stored order every pass, last partial batch dropped
    with ``drop_last``. With ``shuffle`` each pass is a permutation from the stream (seed, t, client, stream,
    pass)."""
    per_epoch = batches_per_epoch(n, batch_size, drop_last)
    seq: list[np.ndarray] = []
    if per_epoch == 0:
        return seq
    epoch = 0
    while (steps is None and epoch < epochs) or (steps is not None and len(seq) < steps):
        order = rng.generator(seed, t, client, stream, epoch).permutation(n) if shuffle else np.arange(n)
        for j in range(per_epoch):
            seq.append(offset + order[j * batch_size:(j + 1) * batch_size])
            if steps is not None and len(seq) == steps:
                break
        epoch += 1
    return seq


def stream_batches(n: int, offset: int, *, batch_size: int, drop_last: bool, shuffle: bool, seed: int, client: int,
                   start: int, steps: int, stream: int = rng.TRAIN_ORDER) -> list[np.ndarray]:
    """Batches ``start`` … ``start + steps − 1`` of one client's continuing pass over its ``n`` train rows (an
    iterator kept across rounds, as FedLAMA's authors stream their data): pass after pass, in the stored order,
    or with ``shuffle`` each pass a permutation of its own from the stream (seed, client, stream, pass), drawn
    whatever the round (round 0 in the stream's words)."""
    per_epoch = batches_per_epoch(n, batch_size, drop_last)
    if per_epoch == 0:
        return []
    seq, orders = [], {}
    for i in range(start, start + steps):
        epoch, j = divmod(i, per_epoch)
        if epoch not in orders:
            orders[epoch] = rng.generator(seed, 0, client, stream, epoch).permutation(n) if shuffle else np.arange(n)
        seq.append(offset + orders[epoch][j * batch_size:(j + 1) * batch_size])
    return seq


def eval_batches(sizes: np.ndarray, offsets: np.ndarray, *, drop_to: int | None = None,
                 chunk: int = EVAL_CHUNK) -> list[list[np.ndarray]]:
    """Every client's rows in chunks of ``chunk`` rows; ``drop_to`` keeps only whole batches of that size
    (the reference's DataLoader(drop_last=True) on the test split)."""
    out = []
    for c in range(len(sizes)):
        n = int(sizes[c])
        if drop_to:
            n = n // drop_to * drop_to
        out.append([offsets[c] + np.arange(j, min(j + chunk, n)) for j in range(0, n, chunk)])
    return out


def evaluate(backend, step, model: torch.nn.Module, params: dict, buffers: dict, x: torch.Tensor, y: torch.Tensor,
             plan: BatchPlan, num_classes: int = 0) -> dict[str, np.ndarray]:
    """Sum of losses, number correct and number of rows per client of ``plan`` (one client per row of
    ``params``/``buffers``), forward only; with a scoring step (``make_eval_step(model, scores=True)``) and the
    ``num_classes`` of its outputs also ``auc``, each client's micro-averaged test AUC (a fraction; NaN for a
    client without rows): compute/metrics.py."""
    a, k, b = plan.rows.shape
    _, aux = backend.run(step, {"params": params, "buffers": buffers}, {}, plan, x, y, train=False, model=model,
                         aux_size=2 + b * num_classes)
    out = {"loss_sum": np.nansum(aux[..., 0], 1), "correct": np.nansum(aux[..., 1], 1), "num": plan.sizes.sum(1)}
    if num_classes:
        # a chunk's scores are its rows' in order, a padded call's padding last: a client's real rows come first
        valid = np.arange(b)[None, None, :] < plan.sizes[:, :, None]  # (A, K, B)
        probs = aux[..., 2:].reshape(a, k, b, num_classes)[valid]
        labels = y[plan.rows[torch.as_tensor(valid, device=plan.rows.device)]].cpu().numpy()
        groups = np.broadcast_to(np.arange(a)[:, None, None], valid.shape)[valid]
        out["auc"] = micro_auc(probs, labels, groups, a)
    return out


__all__ = ["CL_CHUNK", "EVAL_CHUNK", "batches_per_epoch", "eval_batches", "evaluate", "forward_chunk",
           "stream_batches", "train_batches"]
