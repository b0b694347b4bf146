"""Which runs' specs speak (``curve_note``, ``straggler_note``, ``role``), for the app and notebook 8.

    >>> curve_notes(runs, labels)     # ["*pFedMe* is scored on each client's personal model …", …]
"""

from __future__ import annotations

from statistics import fmean

from ..algorithms import registry
from ..config import algo_label


def curve_notes(runs, labels=None) -> list[str]:
    """One note per method among ``runs`` whose curve needs one (the first run of each, ALA or not), in the run's
    numbers."""
    out, seen = [], set()
    runs = list(runs)
    labels = list(labels) if labels is not None else [algo_label(r.config.algo) for r in runs]
    for run, label in zip(runs, labels, strict=True):
        algo = run.config.algorithm
        method = algo.without("ala")
        if algo.curve_note is not None and method not in seen and len(run.rounds) > 1:
            seen.add(method)
            note = algo.curve_note(run, label)
            if note:
                out.append(note)
    return out


def stragglers_note(runs, labels=None) -> str:
    """Why a method that keeps stragglers' partial work (FedProx) beats the reference method (FedAvg) that drops
    them, in one sentence of the numbers of such runs with stragglers among ``runs`` (several seeds: their means,
    said so): how many clients straggle a round, how many models the reference averages once it has dropped them,
    and both final accuracies. Empty without such a pair."""
    runs = list(runs)
    labels = list(labels) if labels is not None else [algo_label(r.config.algo) for r in runs]
    found: dict[str, dict[str, list]] = {}  # kind -> method -> its (run, label) pairs, the methods in order
    reference = registry.with_role("reference")
    for run, label in zip(runs, labels, strict=True):
        algo = run.config.algorithm
        keeps = algo.keeps_stragglers and algo.base.straggler_note is not None and not algo.modifiers
        kind = "avg" if run.config.algo in reference else "prox" if keeps else None
        if kind and run.config.stragglers and len(run.rounds) > 1:
            found.setdefault(kind, {}).setdefault(run.config.algo, []).append((run, label))
    if len(found) < 2:
        return ""
    pick = {kind: next(iter(by_algo.values())) for kind, by_algo in found.items()}  # the first method of each kind
    (prox, prox_label), avg_label = pick["prox"][0], pick["avg"][0][1]
    cfg = prox.config
    selected = max(1, round(cfg.join_ratio * cfg.data.num_clients))
    straggle = fmean(float(r.rounds["stragglers"].mean()) for r, _ in pick["avg"])
    kept = selected - fmean(float(r.rounds["dropped"].mean()) for r, _ in pick["avg"])
    a, p = (fmean(r.final_acc for r, _ in pick[k]) for k in ("avg", "prox"))
    n_prox, n_avg = len(pick["prox"]), len(pick["avg"])
    seeds = ("" if n_prox == n_avg == 1 else f", mean of {n_prox} seeds" if n_prox == n_avg else
             f", mean of {n_prox} ({prox_label}) and {n_avg} ({avg_label}) seeds")
    head = f"**Why {prox_label} wins here:**" if p > a else f"**Here {prox_label} does not beat {avg_label}:**"
    epochs = f"{cfg.local_epochs} local epoch{'s' if cfg.local_epochs != 1 else ''}"
    models = f"{kept:.0f} model" + ("" if round(kept) == 1 else "s")
    return (f"{head} each round {straggle:.0f} of the {selected} clients straggle (they finish only part of their "
            f"{epochs}); {avg_label} drops them and averages {models}, {prox_label} keeps every client's partial work "
            f"and {cfg.algorithm.base.straggler_note(cfg)}. Final accuracy"
            f"{seeds}: {prox_label} {p:.2f} %, {avg_label} {a:.2f} %.")
