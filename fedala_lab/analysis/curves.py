"""Curves over rounds and over ALA weight-learning epochs, as tidy frames (compute only, no matplotlib).

- :func:`ala_loss_curve` — Fig. 3: a client's ALA loss per weight-learning epoch, start phase marked.
- :func:`start_phase_summary` — per client: start-phase epochs, whether it hit the cap, later-round loss.
- :func:`convergence_frame` — Fig. 5: global objective of the initialised and the trained local models.
- :func:`client_spread`, :func:`variance_shares` — Fig. 5 per client: the median and interquartile band of
  the clients' losses, and how much of the round curve's variance each client accounts for.
- :func:`accuracy_curves` — accuracy (or any per-round metric) per run.
- :func:`client_accuracy` — every client's accuracy at a run's last evaluated round (who gains, who loses).
- :func:`switch_curves`, :func:`mean_after` — the Fig. 4 protocol's accuracy around the round K ALA switches on.
- :func:`plateau_round` — where a run's best accuracy stops rising (Fig. 4's K on a short horizon).
- :func:`training_outcomes` — what local training did to the clients' train loss (why Fig. 5 is jagged).

Every frame carries each run's ``algo`` next to its legend ``label``: the figures colour by method.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from ..config import algo_label
from ..errors import ConfigError, DataError

# per-round columns of Run.rounds that make sense as curves, with their axis label (accuracies are percent)
ROUND_METRICS = {
    "acc": "test accuracy (%)",
    "best_acc": "best test accuracy so far (%)",
    "acc_std": "std of client accuracies (percentage points)",
    "auc": "test AUC (%)",
    "test_loss": "test loss",
    "train_loss": "train loss (selected clients, during training)",
    "init_loss": "train loss of initialised local models",
    "trained_loss": "train loss of trained local models",
    "seconds": "seconds per round",
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
            raise _no_train_loss(run, "Fig. 5 needs the train-split loss of the initialised and trained models")
        parts.append(pd.DataFrame({"label": label, "algo": run.config.algo, "round": r["round"].to_numpy(),
                                   "init_loss": r["init_loss"].to_numpy(),
                                   "trained_loss": r["trained_loss"].to_numpy()}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["label", "algo", "round", "init_loss", "trained_loss"])


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
    parts = []
    runs = list(runs)
    for run, label in zip(runs, unique_labels(runs, labels)):
        r = run.rounds.dropna(subset=[metric])
        parts.append(pd.DataFrame({"label": label, "algo": run.config.algo, "round": r["round"].to_numpy(),
                                   "value": r[metric].to_numpy()}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["label", "algo", "round", "value"])


def client_accuracy(runs: Iterable, labels=None) -> pd.DataFrame:
    """Tidy label, algo, client, round, acc (%): each client's test accuracy at its run's last evaluated
    round (the model it holds then, evaluated before local training as every round is)."""
    parts = []
    runs = list(runs)
    for run, label in zip(runs, unique_labels(runs, labels)):
        c = run.clients.dropna(subset=["test_acc"])
        last = c[c["round"] == c["round"].max()] if len(c) else c
        parts.append(pd.DataFrame({"label": label, "algo": run.config.algo, "client": last["client"].to_numpy(),
                                   "round": last["round"].to_numpy(), "acc": last["test_acc"].to_numpy()}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["label", "algo", "client", "round", "acc"])


def seed_client_accuracy(runs: Iterable, labels=None) -> pd.DataFrame:
    """:func:`client_accuracy` of runs that share a label (one method over seeds, on the same data: the run seed
    leaves the partition as it is), each client's accuracy (%) averaged over them: tidy label, algo, client, acc
    and seeds (how many runs the mean is over)."""
    runs = list(runs)
    labels = list(labels) if labels is not None else [run_label(r, None, i) for i, r in enumerate(runs)]
    parts = [client_accuracy([r], [lab]) for r, lab in zip(runs, labels, strict=True)]
    if not parts:
        return pd.DataFrame(columns=["label", "algo", "client", "acc", "seeds"])
    return (pd.concat(parts, ignore_index=True).groupby(["label", "algo", "client"], sort=False, as_index=False)
            .agg(acc=("acc", "mean"), seeds=("acc", "size")))


def switch_curves(fedavg_run, fedala_run, client: int, K: int, labels=("FedAvg", "FedALA")) -> pd.DataFrame:
    """The Fig. 4 protocol's accuracy per round (tidy label, algo, round, value in %): the pooled accuracy and
    ``client``'s own, of FedAvg and of FedALA with ALA on after round ``K``. The two runs are one run through
    round K, so FedALA's lines start at round K (where they leave FedAvg's) instead of covering FedAvg's."""
    parts = []
    for run, label in ((fedavg_run, labels[0]), (fedala_run, labels[1])):
        first = K if run is fedala_run else 1
        r = run.rounds.dropna(subset=["acc"])
        r = r[r["round"] >= first]
        parts.append(pd.DataFrame({"label": f"{label}, all clients", "algo": run.config.algo,
                                   "round": r["round"].to_numpy(), "value": r["acc"].to_numpy()}))
    for run, label in ((fedavg_run, labels[0]), (fedala_run, labels[1])):
        first = K if run is fedala_run else 1
        c = run.clients.dropna(subset=["test_acc"])
        c = c[(c["client"] == client) & (c["round"] >= first)]
        parts.append(pd.DataFrame({"label": f"{label}, client {client}", "algo": run.config.algo,
                                   "round": c["round"].to_numpy(), "value": c["test_acc"].to_numpy()}))
    return pd.concat(parts, ignore_index=True)


def mean_after(run, K: int, client: int | None = None) -> float:
    """Mean test accuracy (%) over the rounds after ``K``: pooled, or ``client``'s own."""
    if client is None:
        r = run.rounds.dropna(subset=["acc"])
        return float(r.loc[r["round"] > K, "acc"].mean())
    c = run.clients.dropna(subset=["test_acc"])
    return float(c.loc[(c["client"] == client) & (c["round"] > K), "test_acc"].mean())


def _no_train_loss(run, need: str) -> DataError:
    """What to set when a run recorded no train-split losses (recording only: the result stays the same)."""
    return DataError(f"the {run.config.algo} run recorded no train-split losses: {need}. Ask for it with "
                     "record_train_loss=True: get_or_run(cfg.replace(record_train_loss=True)), or --set "
                     "record_train_loss=true (a stored run without them is recomputed with them, the same result)")


def _client_table(run, column: str) -> pd.DataFrame:
    """rounds × clients of a per-client column, evaluated rounds only (NaN where a client has no value)."""
    c = run.clients.dropna(subset=[column])
    if c.empty:
        raise _no_train_loss(run, "the per-client view of Fig. 5 needs the clients' train-split losses")
    return c.pivot(index="round", columns="client", values=column).sort_index()


def client_spread(runs: Iterable, column: str = "trained_loss", labels=None) -> pd.DataFrame:
    """Fig. 5 per client, tidy: label, round, median, q25, q75 of the clients' ``column`` (each client's
    train-split loss; unweighted, so no single client decides them)."""
    parts = []
    runs = list(runs)
    for run, label in zip(runs, unique_labels(runs, labels)):
        piv = _client_table(run, column)
        q = piv.quantile([0.25, 0.5, 0.75], axis=1).T
        parts.append(pd.DataFrame({"label": label, "algo": run.config.algo, "round": piv.index.to_numpy(),
                                   "median": q[0.5].to_numpy(),
                                   "q25": q[0.25].to_numpy(), "q75": q[0.75].to_numpy()}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["label", "algo", "round", "median", "q25", "q75"])


def variance_shares(run, column: str = "trained_loss", *, from_round: int | None = None) -> pd.DataFrame:
    """How much of the round curve's jaggedness each client accounts for (Fig. 5's "which client").

    The round curve is the sample-weighted mean S(t) = Σ_i w_i ℓ_i(t) (w_i: the client's share of the
    train samples of the clients with a value that round), as drawn. Over the evaluated rounds from
    ``from_round`` (default: after the first tenth, the initial descent), its round-to-round change ΔS is
    the sum of the clients' changes Δ(w_i ℓ_i), and client i's share of the variance of ΔS is
    Cov(Δ(w_i ℓ_i), ΔS) / Var(ΔS): the shares add up to 1 (a client can have a small negative one).

    Columns: client, share, train_size, weight (its w_i when all clients count), first, last (the rounds
    used); sorted by share, largest first. Empty when fewer than three rounds are left.
    """
    piv = _client_table(run, column)
    rounds = piv.index.to_numpy()
    start = from_round if from_round is not None else int(rounds[0]) + len(rounds) // 10
    piv = piv.loc[piv.index >= start]
    sizes = np.asarray(run.meta.get("train_sizes", np.ones(piv.shape[1])), dtype=float)[piv.columns.to_numpy()]
    have = piv.notna().to_numpy()
    w = np.where(have, sizes, 0.0)
    w = w / np.maximum(w.sum(1, keepdims=True), 1e-300)
    contrib = np.nan_to_num(piv.to_numpy() * w)
    cols = ["client", "share", "train_size", "weight", "first", "last"]
    if len(contrib) < 3:
        return pd.DataFrame(columns=cols)
    d = np.diff(contrib, axis=0)
    total = d.sum(1)
    var = total.var()
    shares = ((d - d.mean(0)) * (total - total.mean())[:, None]).mean(0) / var if var > 0 else np.zeros(d.shape[1])
    out = pd.DataFrame({"client": piv.columns.to_numpy().astype(int), "share": shares,
                        "train_size": sizes.astype(int), "weight": sizes / sizes.sum(),
                        "first": int(piv.index[0]), "last": int(piv.index[-1])})
    return out.sort_values("share", ascending=False, kind="stable").reset_index(drop=True)


def training_outcomes(run, *, rounds: tuple[int, int] | None = None, far: float = 10.0) -> dict:
    """What local training did to the clients' train-split loss over ``rounds`` (default: all evaluated
    rounds with both losses): per round, how many clients ended with a higher loss than their initialised
    model had ("worse"), and how many ended ``far`` times above that round's median client ("far"), and how
    many distinct clients were ever far. Fig. 5 uses it to say why a weighted curve is jagged when no single
    client dominates it. Keys: rounds, clients (per round, median), worse (median per round), far (mean per
    round), far_clients (distinct), far_share (mean share of the weighted mean those clients make)."""
    c = run.clients.dropna(subset=["trained_loss", "init_loss"])
    if rounds is not None:
        c = c[(c["round"] >= rounds[0]) & (c["round"] <= rounds[1])]
    if c.empty:
        return {"rounds": (0, 0), "clients": 0, "worse": 0.0, "far": 0.0, "far_clients": 0, "far_share": 0.0}
    sizes = np.asarray(run.meta.get("train_sizes", []), dtype=float)
    w = sizes[c["client"].to_numpy()] if len(sizes) else np.ones(len(c))
    c = c.assign(worse=c["trained_loss"] > c["init_loss"], wl=w * c["trained_loss"])
    med = c.groupby("round")["trained_loss"].transform("median")
    c = c.assign(far=c["trained_loss"] > far * med)
    g = c.groupby("round")
    share = (c["wl"].where(c["far"], 0.0).groupby(c["round"]).sum() / g["wl"].sum()).fillna(0.0)
    return {"rounds": (int(c["round"].min()), int(c["round"].max())), "clients": float(g.size().median()),
            "worse": float(g["worse"].sum().median()), "far": float(g["far"].sum().mean()),
            "far_clients": int(c.loc[c["far"], "client"].nunique()), "far_share": float(share.mean())}


def top_clients(runs: Iterable, column: str = "trained_loss", labels=None) -> pd.DataFrame:
    """For each run, the client with the largest :func:`variance_shares` share and its own curve, tidy:
    label, client, share, train_size, weight, first, last, round, loss."""
    rows = []
    runs = list(runs)
    for run, label in zip(runs, unique_labels(runs, labels)):
        shares = variance_shares(run, column)
        if len(shares):
            top = shares.iloc[0]
            c = run.clients[run.clients["client"] == top["client"]].dropna(subset=[column])
            rows.append(pd.DataFrame({"label": label, **{k: top[k] for k in shares.columns},
                                      "round": c["round"].to_numpy(), "loss": c[column].to_numpy()}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(
        columns=["label", "client", "share", "train_size", "weight", "first", "last", "round", "loss"])


def plateau_round(run, *, points: float = 0.5, rounds: int = 3, search: tuple[int, int] | None = None) -> dict:
    """Where ``run``'s best accuracy has plateaued: the first round K in ``search`` (default: all rounds that
    have ``rounds`` recorded rounds after them) after which the best accuracy so far rises by less than
    ``points`` percentage points over the next ``rounds`` rounds, best(K + rounds) − best(K) < points.

    Returns {"K", "found" (False: no round qualified, K is the last round tried), "best_at_K",
    "best_after" (best(K + rounds), %), "points", "rounds", "search" (the rounds tried)}."""
    best = run.rounds.set_index("round")["best_acc"].astype(float).ffill()
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
