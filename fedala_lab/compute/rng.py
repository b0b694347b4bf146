"""Random draws derived from (seed, round, client, purpose).

No global RNG is touched. Each draw gets its own generator from a ``numpy.random.SeedSequence`` over
those integers, so a run is reproducible whatever the backend, the order clients are processed in, or
where a resumed run starts (the reference code draws selections from the unseeded global numpy RNG).
"""

from __future__ import annotations

import numpy as np

# purposes (stream ids): never renumber, or old runs stop reproducing
SELECT, TRAIN_ORDER, ALA_WINDOW, FINETUNE, MODEL_INIT = 1, 2, 3, 4, 5
STRAGGLERS = 6  # which selected clients straggle (server draw) and how many steps each does (its own draw)
HEAD_ORDER = 7  # FedRep: the batch order of the head's epochs
PERFEDAVG_ADAPT = 10  # Per-FedAvg: the train batch of the one-step adaptation before evaluation
FOMO_PICK = 30  # FedFomo: which M models a client downloads (ties of affinity, ε-exploration)
PARTIALFED_BATCH, PARTIALFED_NOISE = 40, 41  # PartialFed-Adaptive: its strategy step's batch and logistic noise
# algorithms of your own: numbers from 100 on (Round.rng(client, purpose))
SERVER = -1  # the "client" id of server-side draws


def generator(seed: int, round_: int, client: int, purpose: int, *extra: int) -> np.random.Generator:
    """A fresh numpy Generator for one (seed, round, client, purpose, …) tuple."""
    words = [seed, round_, client + 1, purpose, *extra]  # client -1 (server) → 0: keep words >= 0
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(w) for w in words])))


def torch_seed(seed: int, round_: int, client: int, purpose: int) -> int:
    """A 63-bit integer seed for torch (model initialisation)."""
    return int(generator(seed, round_, client, purpose).integers(0, 2**63 - 1))
