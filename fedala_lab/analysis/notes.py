"""A word beside curves that look wrong at first sight, in the run's own numbers (compute only).

    >>> curve_notes(runs, labels)     # ["*pFedMe* is scored on each client's personal model …", …]

Some methods are scored on a model other than the one they federate, which shows in their first rounds:
pFedMe on each client's personal model θ_i (the untrained initial model until the client's first local
training), Per-FedAvg on the global model after one adaptation step on the client's data, FedAvg-C and
FedProx-C on a fine-tuned copy. APPLE's curve can dip by tens of points for a few rounds and recover (on the
teach preset, seed 0): said with the run's own numbers when it does. The app writes these notes under its
curves and notebook 8 beside its own.
"""

from __future__ import annotations

import math

from ..config import algo_label


def _acc(run, t: int) -> float:
    r = run.rounds.dropna(subset=["acc"])
    row = r[r["round"] == t]
    return float(row["acc"].iloc[0]) if len(row) else math.nan


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


def _dips(run, label: str) -> str:
    """A method whose pooled accuracy falls sharply and recovers: where, by how much, and how many clients."""
    r = run.rounds.dropna(subset=["acc"]).set_index("round")["acc"]
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


DIP_POINTS = 10.0  # a fall of this many points after a best is worth a word

NOTES = {"apple": _dips, "pfedme": _pfedme, "perfedavg": _adapted, "fedavg-c": _adapted, "fedprox-c": _adapted}


def curve_notes(runs, labels=None) -> list[str]:
    """One note per method among ``runs`` whose curve needs one (the first run of each), in the run's numbers."""
    out, seen = [], set()
    runs = list(runs)
    labels = list(labels) if labels is not None else [algo_label(r.config.algo) for r in runs]
    for run, label in zip(runs, labels, strict=True):
        base = _method(run)
        if base in NOTES and base not in seen and len(run.rounds) > 1:
            seen.add(base)
            note = NOTES[base](run, label)
            if note:
                out.append(note)
    return out


def stragglers_note(runs, labels=None) -> str:
    """Why FedProx beats FedAvg when clients straggle (FedProx's own setting), in one sentence of the numbers of the
    FedAvg runs and the FedProx runs with stragglers among ``runs`` (several seeds: their means, said so): how many
    clients straggle a round, how many models FedAvg averages once it has dropped them, and both final accuracies.
    Empty without such a pair."""
    runs = list(runs)
    labels = list(labels) if labels is not None else [algo_label(r.config.algo) for r in runs]
    pick: dict[str, list] = {}
    for run, label in zip(runs, labels, strict=True):
        if run.config.algo in ("fedavg", "fedprox") and run.config.stragglers and len(run.rounds) > 1:
            pick.setdefault(run.config.algo, []).append((run, label))
    if len(pick) < 2:
        return ""
    (prox, prox_label), avg_label = pick["fedprox"][0], pick["fedavg"][0][1]
    cfg = prox.config
    selected = max(1, round(cfg.join_ratio * cfg.data.num_clients))
    straggle = _mean(float(r.rounds["stragglers"].mean()) for r, _ in pick["fedavg"])
    kept = selected - _mean(float(r.rounds["dropped"].mean()) for r, _ in pick["fedavg"])
    a, p = (_mean(r.final_acc for r, _ in pick[k]) for k in ("fedavg", "fedprox"))
    n_prox, n_avg = len(pick["fedprox"]), len(pick["fedavg"])
    seeds = ("" if n_prox == n_avg == 1 else f", mean of {n_prox} seeds" if n_prox == n_avg else
             f", mean of {n_prox} ({prox_label}) and {n_avg} ({avg_label}) seeds")
    head = f"**Why {prox_label} wins here:**" if p > a else f"**Here {prox_label} does not beat {avg_label}:**"
    epochs = f"{cfg.local_epochs} local epoch{'s' if cfg.local_epochs != 1 else ''}"
    models = f"{kept:.0f} model" + ("" if round(kept) == 1 else "s")
    return (f"{head} each round {straggle:.0f} of the {selected} clients straggle (they finish only part of their "
            f"{epochs}); {avg_label} drops them and averages {models}, {prox_label} keeps every client's partial work "
            f"and its proximal term (μ = {cfg.mu:g}) holds it near the global model. Final accuracy"
            f"{seeds}: {prox_label} {p:.2f} %, {avg_label} {a:.2f} %.")


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)
