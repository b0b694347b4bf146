"""The built-in specs' words in a run's own numbers: beside curves that look wrong at first sight
(``curve_note``: methods scored on a model other than the one they federate; APPLE's dips) and with stragglers
(``straggler_note``). Prose only: left out of the package fingerprint, so rewording keeps every stored run."""

from __future__ import annotations

import math


def _acc(run, t: int) -> float:
    """Pooled test accuracy (%) of ``run`` at round ``t``; NaN where that round was not evaluated."""
    return float(run.acc.get(t, math.nan))


def personal(run, label: str) -> str:
    """pFedMe: scored on each client's personal model."""
    cfg = run.config
    return (f"*{label}* is scored on each client's personal model θ_i, which a client holds only after its first "
            f"local training: in round 1 every client still has the untrained initial model ({_acc(run, 1):.1f} %), "
            f"in round 2 the personal models fitted to the clients' own images ({_acc(run, 2):.1f} %). Those are "
            f"pulled towards the federated model by λ = {cfg.pfedme_lambda:g} over K = {cfg.pfedme_k} personal steps "
            "a batch, so its curve moves with each client's own data more than with the global model.")


def adapted(run, label: str, how: str = "after fine-tuning a copy on the client's own data") -> str:
    """Per-FedAvg and the ``-c`` methods: scored on the global model adapted to each client first (``how``)."""
    return (f"*{label}* is scored on the global model {how}, so it starts above chance in round 1 "
            f"({_acc(run, 1):.1f} %), where the methods scored on the model they received start at chance.")


DIP_POINTS = 10.0  # a fall of this many points after a best is worth a word


def dips(run, label: str) -> str:
    """APPLE: a pooled accuracy that falls sharply and recovers: where, by how much, and how many clients."""
    r = run.acc
    peak = r.cummax()
    depth = (peak - r)[r.index > 5]  # not the first rounds' climb
    if depth.empty or depth.max() < DIP_POINTS:
        return ""
    t = int(depth.idxmax())
    recovered = (r[r.index > t] >= peak[t] - DIP_POINTS / 2).any()
    c = run.clients.dropna(subset=["test_acc"]).pivot(index="round", columns="client", values="test_acc")
    fell = int(((c.loc[t - 1] - c.loc[t]) > DIP_POINTS).sum()) if t - 1 in c.index else 0
    return (f"*{label}*'s curve dips: {r[t]:.1f} % in round {t}, {depth.max():.1f} points below its best so far"
            + (", and recovers" if recovered else "") + f" ({fell} of {c.shape[1]} clients fell by more than "
            f"{DIP_POINTS:g} points that round). Each of its clients' models is a learned mixture of every client's "
            "model, re-mixed every round, and a round's mix can set many clients back at once: the method's own "
            "training, not a drawing error.")


def proximal(cfg) -> str:
    """FedProx with stragglers: why keeping their partial work does not pull it off course."""
    return f"its proximal term (μ = {cfg.mu:g}) holds it near the global model"
