"""Curves over rounds and over ALA weight-learning epochs, as tidy frames (compute only, no matplotlib).

- :func:`ala_loss_curve` — Fig. 3: a client's ALA loss per weight-learning epoch, start phase marked.
- :func:`start_phase_summary` — per client: start-phase epochs, whether it hit the cap, later-round loss.
- :func:`convergence_frame` — Fig. 5: global objective of the initialised and the trained local models.
- :func:`accuracy_curves` — accuracy (or any per-round metric) per run.
- :func:`plateau_round` — where a run's best accuracy stops rising (Fig. 4's K on a short horizon).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from ..config import algo_label
from ..errors import ConfigError

# per-round columns of Run.rounds that make sense as curves, with their axis label and scale to percent
ROUND_METRICS = {
    "acc": ("test accuracy (%)", 100.0),
    "best_acc": ("best test accuracy so far (%)", 100.0),
    "acc_std": ("std of client accuracies (%)", 100.0),
    "test_loss": ("test loss", 1.0),
    "train_loss": ("train loss (selected clients, during training)", 1.0),
    "init_loss": ("train loss of initialised local models", 1.0),
    "trained_loss": ("train loss of trained local models", 1.0),
    "seconds": ("seconds per round", 1.0),
}


def run_label(run, labels: dict | Sequence[str] | None = None, index: int = 0) -> str:
    """A legend label: ``labels[index]`` / ``labels[run]`` when given, else the algorithm's display name."""
    if isinstance(labels, dict):
        if run in labels:
            return str(labels[run])
    elif labels is not None:
        return str(list(labels)[index])
    return algo_label(run.config.algo)


def unique_labels(runs: Sequence, labels=None) -> list[str]:
    """One legend label per run; repeats get " (2)", " (3)"… so two runs are never drawn as one line."""
    out, seen = [], {}
    for i, run in enumerate(runs):
        lab = run_label(run, labels, i)
        seen[lab] = seen.get(lab, 0) + 1
        out.append(lab if seen[lab] == 1 else f"{lab} ({seen[lab]})")
    return out


def ala_loss_curve(run, client: int) -> pd.DataFrame:
    """ALA loss of ``client`` per weight-learning epoch (pass over its s % window), in order.

    Columns: round, epoch (pass within the round), cum_epoch (1, 2, … across rounds: the x-axis of the
    paper's Fig. 3), loss (the pass's last batch, the reference's convergence signal), loss_mean (mean
    over the pass's batches), start_phase, capped. Raises KeyError if the client's ALA was not tracked.
    """
    if run.ala is None or run.ala.empty:
        raise KeyError(f"run {run.config.algo!r} recorded no ALA passes (is it an ALA algorithm?)")
    df = run.ala[run.ala["client"] == client]
    if df.empty:
        tracked = sorted(run.ala["client"].unique().tolist())
        raise KeyError(f"no ALA passes recorded for client {client} (tracked: {tracked}); set track_clients")
    df = df.sort_values(["round", "epoch"], kind="stable").reset_index(drop=True)
    df = df[["round", "epoch", "loss", "loss_mean", "start_phase", "capped"]].copy()
    df.insert(2, "cum_epoch", np.arange(1, len(df) + 1))
    df["start_phase"] = df["start_phase"].astype(bool)
    df["capped"] = df["capped"].astype(bool)
    return df


def start_phase_summary(run) -> pd.DataFrame:
    """Per tracked client: start round, start-phase epochs, capped, first/last start-phase loss, and
    the mean ALA loss in the later rounds (one pass each)."""
    rows = []
    for c, df in run.ala.groupby("client"):
        sp = df[df["start_phase"].astype(bool)]
        later = df[~df["start_phase"].astype(bool)]
        rows.append({
            "client": int(c),
            "start_round": int(sp["round"].min()) if len(sp) else np.nan,
            "start_epochs": len(sp),
            "capped": bool(df["capped"].astype(bool).any()),
            "start_first_loss": float(sp["loss"].iloc[0]) if len(sp) else np.nan,
            "start_last_loss": float(sp["loss"].iloc[-1]) if len(sp) else np.nan,
            "later_mean_loss": float(later["loss"].mean()) if len(later) else np.nan,
            "later_rounds": int(later["round"].nunique()),
        })
    return pd.DataFrame(rows)


def convergence_frame(runs: Iterable, labels=None) -> pd.DataFrame:
    """Fig. 5 data, tidy: label, round, init_loss, trained_loss (sample-weighted train-split loss of
    every client's model after initialisation and after local training), only evaluated rounds.

    Needs ``record_train_loss=True`` (recording only; the MNIST presets leave it off). Raises ConfigError for
    runs that lack it.
    """
    parts = []
    runs = list(runs)
    for run, label in zip(runs, unique_labels(runs, labels)):
        r = run.rounds.dropna(subset=["init_loss", "trained_loss"], how="all")
        if r.empty:
            raise ConfigError("record_train_loss", run.config.record_train_loss,
                              "true: Fig. 5 needs the train loss of initialised and trained models")
        parts.append(pd.DataFrame({"label": label, "round": r["round"].to_numpy(),
                                   "init_loss": r["init_loss"].to_numpy(),
                                   "trained_loss": r["trained_loss"].to_numpy()}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["label", "round", "init_loss", "trained_loss"])


def convergence_gap(frame: pd.DataFrame, rel: float = 0.1) -> pd.DataFrame:
    """Per label: the last gap init − trained, and the first round from which the gap stays within
    ``rel`` of the trained loss (NaN if it never does): "they meet after about … iterations"."""
    rows = []
    for label, df in frame.groupby("label", sort=False):
        gap = (df["init_loss"] - df["trained_loss"]).to_numpy()
        close = np.abs(gap) <= rel * np.abs(df["trained_loss"].to_numpy())
        # first index after which every later round is close
        bad = np.flatnonzero(~close)
        first = 0 if len(bad) == 0 else bad[-1] + 1
        meet = float(df["round"].iloc[first]) if first < len(df) else np.nan
        rows.append({"label": label, "final_init_loss": float(df["init_loss"].iloc[-1]),
                     "final_trained_loss": float(df["trained_loss"].iloc[-1]), "final_gap": float(gap[-1]),
                     "meet_round": meet})
    return pd.DataFrame(rows)


def accuracy_curves(runs: Iterable, metric: str = "acc", labels=None) -> pd.DataFrame:
    """Tidy label, round, value for one per-round metric of each run (accuracies in %)."""
    if metric not in ROUND_METRICS:
        raise ConfigError("metric", metric, "one of " + ", ".join(ROUND_METRICS))
    scale = ROUND_METRICS[metric][1]
    parts = []
    runs = list(runs)
    for run, label in zip(runs, unique_labels(runs, labels)):
        r = run.rounds.dropna(subset=[metric])
        parts.append(pd.DataFrame({"label": label, "round": r["round"].to_numpy(),
                                   "value": scale * r[metric].to_numpy()}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["label", "round", "value"])


def plateau_round(run, *, points: float = 0.5, rounds: int = 3, search: tuple[int, int] | None = None) -> dict:
    """Where ``run``'s best accuracy has plateaued: the first round K in ``search`` (default: all rounds that
    have ``rounds`` recorded rounds after them) after which the best accuracy so far rises by less than
    ``points`` percentage points over the next ``rounds`` rounds, best(K + rounds) − best(K) < points.

    Returns {"K", "found" (False: no round qualified, K is the last round tried), "best_at_K",
    "best_after" (best(K + rounds), %), "points", "rounds", "search" (the rounds tried)}."""
    best = 100 * run.rounds.set_index("round")["best_acc"].astype(float).ffill()
    last = int(best.index.max())
    lo, hi = search if search is not None else (int(best.index.min()), last - rounds)
    hi = max(min(hi, last - rounds), 1)
    lo = max(min(lo, hi), 1)
    out = {"points": points, "rounds": rounds, "search": (lo, hi)}
    for t in range(lo, hi + 1):
        if t in best.index and t + rounds in best.index and best[t + rounds] - best[t] < points:
            return {**out, "K": t, "found": True, "best_at_K": float(best[t]), "best_after": float(best[t + rounds])}
    after = float(best[hi + rounds]) if hi + rounds in best.index else float("nan")
    return {**out, "K": hi, "found": False, "best_at_K": float(best.get(hi, float("nan"))), "best_after": after}
