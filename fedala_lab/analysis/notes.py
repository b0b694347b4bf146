"""A word beside curves that look wrong at first sight, in the run's own numbers (compute only).

    >>> curve_notes(runs, labels)     # ["*pFedMe* is scored on each client's personal model …", …]

Some methods are scored on a model other than the one they federate, which shows in their first rounds:
pFedMe on each client's personal model θ_i (the untrained initial model until the client's first local
training), Per-FedAvg on the global model after one adaptation step on the client's data, FedAvg-C and
FedProx-C on a fine-tuned copy. The app writes these notes under its curves and notebook 8 beside its own.
"""

from __future__ import annotations

import math

from ..config import algo_label


def _acc(run, t: int) -> float:
    r = run.rounds.dropna(subset=["acc"])
    row = r[r["round"] == t]
    return 100 * float(row["acc"].iloc[0]) if len(row) else math.nan


def _pfedme(run, label: str) -> str:
    cfg = run.config
    return (f"*{label}* is scored on each client's personal model θ_i, which a client holds only after its first "
            f"local training: in round 1 every client still has the untrained initial model ({_acc(run, 1):.1f} %), "
            f"in round 2 the personal models fitted to the clients' own images ({_acc(run, 2):.1f} %). Those are "
            f"pulled towards the federated model by λ = {cfg.pfedme_lambda:g} over K = {cfg.pfedme_k} personal steps "
            "a batch, so its curve moves with each client's own data more than with the global model.")


def _adapted(run, label: str) -> str:
    how = ("after one adaptation step on the client's own data" if _method(run) == "perfedavg"
           else "after fine-tuning a copy on the client's own data")
    return (f"*{label}* is scored on the global model {how}, so it starts above chance in round 1 "
            f"({_acc(run, 1):.1f} %), where the methods scored on the model they received start at chance.")


def _method(run) -> str:
    """The method a run's algorithm name starts with ("pfedme+ala" → "pfedme", "fedavg-c" stays)."""
    return run.config.algo.split("+")[0]


NOTES = {"pfedme": _pfedme, "perfedavg": _adapted, "fedavg-c": _adapted, "fedprox-c": _adapted}


def curve_notes(runs, labels=None) -> list[str]:
    """One note per method among ``runs`` whose curve needs one (the first run of each), in the run's numbers."""
    out, seen = [], set()
    runs = list(runs)
    labels = list(labels) if labels is not None else [algo_label(r.config.algo) for r in runs]
    for run, label in zip(runs, labels, strict=True):
        base = _method(run)
        if base in NOTES and base not in seen and len(run.rounds) > 1:
            seen.add(base)
            out.append(NOTES[base](run, label))
    return out
