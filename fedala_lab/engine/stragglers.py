"""Systems heterogeneity (docs/design.md#fedprox): which selected clients straggle in a round, and how
much local work each does.

The FedProx paper's setting: each round a fraction ``cfg.stragglers`` of the selected clients are
stragglers that finish only part of their local work. A straggler whose full work is S local steps
(E epochs of its batches, or ``local_steps``) does a uniformly random number of them in 1 … S − 1 (none
when S ≤ 1). The server then either drops the stragglers (FedAvg in the paper: they train nothing and
send nothing) or keeps their partial updates (FedProx); ``cfg.drops_stragglers`` says which.

Both draws come from the STRAGGLERS stream (compute/rng.py): the set from the server's generator of the
round, each straggler's steps from its own, so they depend only on (seed, round, client): runs of different
algorithms with one seed meet the same stragglers, and any backend or resume point gives the same draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..compute import rng
from ..config import RunConfig


@dataclass(frozen=True)
class LocalWork:
    """One round's local work. Masks are over all N clients."""

    straggler: np.ndarray  # (N,) bool: selected clients drawn as stragglers
    dropped: np.ndarray  # (N,) bool: stragglers the server drops (no training, nothing sent)
    limits: dict[int, int]  # client -> the steps it does, for stragglers only (dropped: 0)

    def senders(self, selected: torch.Tensor) -> torch.Tensor:
        """The selected clients whose models reach the server (``selected`` itself when none is dropped)."""
        if not self.dropped.any():
            return selected
        keep = torch.as_tensor(~self.dropped[selected.cpu().numpy()], device=selected.device)
        return selected[keep]


def draw_work(cfg: RunConfig, t: int, selected: np.ndarray, full_steps: np.ndarray, num_clients: int) -> LocalWork:
    """The stragglers of round ``t`` among ``selected`` (client ids), whose full work is ``full_steps``
    local steps each: K − round(K·(1 − f)) of the K selected, f = ``cfg.stragglers``."""
    straggler = np.zeros(num_clients, dtype=bool)
    dropped = np.zeros(num_clients, dtype=bool)
    k = len(selected)
    count = k - round(k * (1 - cfg.stragglers)) if cfg.stragglers else 0
    if count == 0:
        return LocalWork(straggler, dropped, {})
    chosen = rng.generator(cfg.seed, t, rng.SERVER, rng.STRAGGLERS).choice(selected, size=count, replace=False)
    straggler[chosen] = True
    full = dict(zip(np.asarray(selected).tolist(), np.asarray(full_steps).tolist()))
    if cfg.drops_stragglers:
        dropped[chosen] = True
        return LocalWork(straggler, dropped, {int(c): 0 for c in chosen})
    return LocalWork(straggler, dropped, {int(c): partial_steps(cfg.seed, t, int(c), full[int(c)]) for c in chosen})


def partial_steps(seed: int, t: int, client: int, full: int) -> int:
    """A straggler's steps: uniform in 1 … full − 1 (0 when its full work is at most one step)."""
    if full <= 1:
        return 0
    return int(rng.generator(seed, t, client, rng.STRAGGLERS).integers(1, full))
