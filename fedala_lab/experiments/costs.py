"""Seconds per round measured so that a machine's load cannot reorder the methods (it runs simulations).

    >>> interleaved_costs([preset("teach", algo=a) for a in ("fedavg", "fedala")], rounds=4, repeats=3)

A stored run's seconds were measured whenever it ran, under whatever else the machine was doing then: two
runs computed an hour apart can differ severalfold for load alone, and a table of them can put a cheaper method
above a dearer one (or give ALA's start phase a negative cost). Here every method's first rounds run afresh,
side by side, ``repeats`` times, the order reversed every other pass, and each figure is the median over the
passes, with the passes' range beside it: a load that comes and goes falls on every method alike.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..config import algo_label


def interleaved_costs(cfgs, *, rounds: int = 4, repeats: int = 3, labels=None) -> pd.DataFrame:
    """Per config (in order): the method's own seconds in a normal round (local initialisation + training +
    aggregation, the mean over rounds 3 on), median over ``repeats`` interleaved passes (``method_s``) with the
    passes' range (``method_s_lo``, ``method_s_hi``); ``start_phase_s``, round 2's method time beyond a normal
    round's (ALA's start phase; NaN for a method without ALA); ``eval_s``, the evaluation's seconds a round.
    Each pass simulates the configs' first ``rounds`` rounds (at least 3) without a run store."""
    from ..engine.simulate import Simulation

    cfgs = list(cfgs)
    labels = list(labels) if labels is not None else [algo_label(c.algo) for c in cfgs]
    rounds = max(3, int(rounds))
    passes: list[list[pd.DataFrame]] = [[] for _ in cfgs]
    for rep in range(max(1, int(repeats))):
        order = range(len(cfgs)) if rep % 2 == 0 else reversed(range(len(cfgs)))
        for i in order:
            sim = Simulation(cfgs[i].replace(rounds=rounds))
            passes[i].append(pd.DataFrame([sim.run_round(t) for t in range(1, rounds + 1)]))
    rows = []
    for cfg, label, frames in zip(cfgs, labels, passes, strict=True):
        method = [f["init_seconds"] + f["train_seconds"] + f["aggregate_seconds"] for f in frames]
        normal = np.array([m[3 - 1:].mean() for m in method])  # rounds 3 on (rows are rounds 1, 2, …)
        extra = np.array([m.iloc[1] for m in method]) - normal
        rows.append({"label": label, "algo": cfg.algo, "method_s": float(np.median(normal)),
                     "method_s_lo": float(normal.min()), "method_s_hi": float(normal.max()),
                     "start_phase_s": float(np.median(extra)) if cfg.uses_ala else float("nan"),
                     "eval_s": float(np.median([f["eval_seconds"].mean() for f in frames])),
                     "repeats": len(frames)})
    return pd.DataFrame(rows)
