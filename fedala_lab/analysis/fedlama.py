"""FedLAMA analysis (compute only): communication cost, δ_l / 1 − λ_l curves, interval timelines, and
accuracy against the share of FedAvg(τ0)'s communication (the layout of the paper's Tables 1–4).

    >>> runs = comparison_runs(preset("teach-fedlama"), store="runs")     # fedala_lab.experiments.runs
    >>> comm_accuracy_frame(runs)                                         # one row per run
    >>> lama_curves(runs["FedLAMA(τ0=5, φ=2)"])                           # the paper's Fig. 1 data

Communication is counted as the paper does, per client: C = Σ_l dim(u_l)·κ_l parameters (κ_l = times
layer l was averaged). For runs of other algorithms it is read from ``bytes_up`` (bytes per selected
client per round, divided by the bytes of one parameter): FedAvg's C is rounds × model size.

Which accuracy to compare. The engine evaluates every client's model before local training; FedLAMA by
default evaluates the server's model (``lama_eval="server"``: each layer as last averaged, the global model
at a window start), so every round of its curve is read on the same kind of model as FedAvg's. With
``lama_eval="clients"`` it evaluates each client's current model instead: only at the start of a φ·τ0 window
are all its layers freshly averaged; mid-window it still holds its own copies of the long-interval layers, a
partly *personalised* model that on non-IID clients scores far higher on the client's own test split, which
would credit FedLAMA with personalisation rather than with its aggregation; such runs are read at their
window starts only (:func:`synced_rounds`). Every run is compared on a common grid of local SGD steps
(multiples of φ·τ0 when FedAvg(φτ0) is in the set): same work, same kind of model. The as-evaluated numbers
over all rounds are kept in the frame too (``best_acc_all``, ``final_acc_all``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..algorithms import registry
from ..algorithms.fedlama import TABLE_ADJUST, TABLE_LAYERS, evaluates_server
from ..config import RunConfig, algo_label
from ..record.run import Run

# --------------------------------------------------------------------------------------------------
# per run


def _table(run: Run, name: str) -> pd.DataFrame:
    if name not in run.tables:
        raise KeyError(f"run {run.config.algo!r} has no {name!r} table: only FedLAMA runs record per-layer "
                       f"synchronisation (tables: {sorted(run.tables)})")
    return run.tables[name]


def _is_lama(cfg: RunConfig) -> bool:
    """Whether ``cfg`` runs FedLAMA (with or without ALA): its runs record the per-layer tables."""
    return cfg.algorithm.base.name == "fedlama"


def steps_per_round(cfg: RunConfig) -> int | None:
    """Local SGD steps of one round (None when a round is a number of epochs: steps then vary by client)."""
    if cfg.local_steps:
        return int(cfg.local_steps)
    if _is_lama(cfg):
        return int(cfg.tau0)
    return None


def layer_dims(run: Run) -> pd.Series:
    """Parameters per layer (tensor), in the model's order."""
    shapes = run.meta["param_shapes"]
    return pd.Series({n: int(np.prod(shapes[n])) for n in run.meta["param_names"]}, name="dim")


def num_parameters(run: Run) -> int:
    return int(layer_dims(run).sum())


def per_round_comm(run: Run) -> pd.Series:
    """Parameters each participating client sent up in each round (index: round).

    FedLAMA: Σ over the layers averaged that round of dim(u_l). Others: bytes_up / selected clients /
    bytes per parameter (FedAvg: the model size every round).
    """
    if _is_lama(run.config):
        lay = _table(run, TABLE_LAYERS)
        return (lay["dim"] * lay["synced"].astype(bool)).groupby(lay["round"]).sum().astype(np.int64)
    r = run.rounds.set_index("round")
    bytes_per_param = run.meta["model_bytes"] / num_parameters(run)
    sel = r["num_selected"].where(r["num_selected"] > 0)
    return (r["bytes_up"] / sel / bytes_per_param).fillna(0).round().astype(np.int64)


def communication(run: Run) -> dict:
    """The paper's cost C (parameters per client), its share of FedAvg(τ0) over the same rounds, κ_l, bytes.

    ``fedavg_cost`` is rounds × model size: what FedAvg with the same round length would send.
    """
    return _communication(run, per_round_comm(run))


def _communication(run: Run, per_round: pd.Series) -> dict:
    rounds = int(run.rounds["round"].max()) if len(run.rounds) else 0
    p = num_parameters(run)
    out = {
        "cost": int(per_round.sum()), "fedavg_cost": rounds * p, "rounds": rounds, "num_parameters": p,
        "bytes_up": int(run.rounds["bytes_up"].sum()), "bytes_down": int(run.rounds["bytes_down"].sum()),
    }
    out["percent_of_fedavg"] = 100.0 * out["cost"] / out["fedavg_cost"] if out["fedavg_cost"] else float("nan")
    if _is_lama(run.config):
        lay = _table(run, TABLE_LAYERS)
        out["kappa"] = lay.groupby("layer", sort=False)["synced"].sum().astype(int).to_dict()
    return out


def discrepancy_frame(run: Run) -> pd.DataFrame:
    """Tidy unit discrepancies d_l at every synchronisation: round, step, layer, interval, d."""
    lay = _table(run, TABLE_LAYERS)
    return lay[lay["synced"].astype(bool)][["round", "step", "layer", "interval", "d"]].reset_index(drop=True)


def interval_timeline(run: Run) -> pd.DataFrame:
    """Interval τ_l (steps) per layer (rows, model order) and round (columns)."""
    lay = _table(run, TABLE_LAYERS)
    wide = lay.pivot(index="layer", columns="round", values="interval")
    return wide.reindex([n for n in run.meta["param_names"] if n in wide.index])


def adjustment_rounds(run: Run) -> list[int]:
    return sorted(int(r) for r in _table(run, TABLE_ADJUST)["round"].unique())


def lama_curves(run: Run, round_: int | None = None) -> pd.DataFrame:
    """δ_l and 1 − λ_l against l, the number of lowest-discrepancy layers given the long interval (Fig. 1).

    From the re-assignment at ``round_`` (the last one if None; the latest at or before it otherwise).
    Columns: round, n_long (l = 0…L; l = 0 is δ = 0, 1 − λ = 1), layer (the l-th layer added, "" for 0),
    dim, d, delta, one_minus_lambda, long (that layer was given φ·τ0).
    """
    adj = _table(run, TABLE_ADJUST)
    rounds = adjustment_rounds(run)
    if not rounds:
        raise KeyError("no interval re-assignment recorded (the run is shorter than φ rounds)")
    if round_ is None:
        r = rounds[-1]
    else:
        earlier = [x for x in rounds if x <= round_]
        if not earlier:
            raise KeyError(f"no interval re-assignment at or before round {round_} (first: {rounds[0]})")
        r = earlier[-1]
    rows = adj[adj["round"] == r].sort_values("rank")
    zero = pd.DataFrame({"round": [r], "rank": [0], "layer": [""], "dim": [0], "d": [np.nan], "delta": [0.0],
                         "one_minus_lambda": [1.0], "long": [False], "interval": [np.nan]})
    out = pd.concat([zero, rows], ignore_index=True).rename(columns={"rank": "n_long"})
    out["long"] = out["long"].astype(bool)
    return out[["round", "n_long", "layer", "dim", "d", "delta", "one_minus_lambda", "long"]]


# --------------------------------------------------------------------------------------------------
# accuracy on a common footing


def synced_rounds(run: Run) -> np.ndarray:
    """Rounds whose evaluation saw a synchronised model, comparable with FedAvg's: every round of a FedLAMA run
    that evaluates the server's model (``lama_eval="server"``, the default) and of the other algorithms;
    only the window starts ((t − 1) mod φ = 0) of a FedLAMA run that evaluates its clients' models."""
    r = run.rounds["round"].to_numpy()
    if _is_lama(run.config) and not evaluates_server(run.config):
        return r[(r - 1) % run.config.phi == 0]
    return r


def step_accuracy(run: Run) -> pd.Series:
    """Pooled accuracy (%) of the synchronised rounds (:func:`synced_rounds`), indexed by the local SGD steps
    done before the evaluation ((t − 1)·steps)."""
    spr = steps_per_round(run.config)
    if spr is None:
        raise ValueError(f"run {run.config.algo!r} counts rounds in epochs; a step axis needs local_steps")
    acc = run.acc
    acc = acc[acc.index.isin(synced_rounds(run))]
    return pd.Series(acc.to_numpy(), index=(acc.index.to_numpy() - 1) * spr, name=acc.name)


def _common_steps(series: list[pd.Series]) -> np.ndarray:
    common = set.intersection(*(set(s.index.tolist()) for s in series)) if series else set()
    return np.array(sorted(common), dtype=np.int64)


def comparison_label(run: Run) -> str:
    """FedAvg(5 steps), FedLAMA(τ0=5, φ=2), FedLAMA+ALA(…), FedALA(5 steps)… from the config."""
    cfg = run.config
    spr = steps_per_round(cfg)
    name = algo_label(registry.alias_for(cfg.algo))  # fedavg+ala is FedALA itself: both share a label here
    if _is_lama(cfg):
        return f"{name}(τ0={cfg.tau0}, φ={cfg.phi})"
    return f"{name}({spr} steps)" if spr else name


def _reference(runs: Mapping[str, Run], reference: str | None) -> str:
    if reference is not None:
        if reference not in runs:
            raise KeyError(f"reference {reference!r} is not one of the runs: {list(runs)}")
        return reference
    plain = [(steps_per_round(r.config) or 0, k) for k, r in runs.items()
             if r.config.algo in registry.with_role("reference") and steps_per_round(r.config)]
    if not plain:
        raise ValueError("no FedAvg run with local_steps among the runs; pass reference= (the FedAvg(τ0) run)")
    return min(plain)[1]


def _as_mapping(runs: Mapping[str, Run] | Iterable[Run]) -> dict[str, Run]:
    if isinstance(runs, Mapping):
        return dict(runs)
    out: dict[str, Run] = {}
    for r in runs:
        label = comparison_label(r)
        while label in out:
            label += "'"
        out[label] = r
    return out


class _Compared(NamedTuple):
    """What the table and the curves of one comparison share, computed once."""

    runs: dict[str, Run]
    ref: str
    accs: dict[str, pd.Series]  # step_accuracy of each run
    per_round: dict[str, pd.Series]  # per_round_comm of each run
    ref_cost: int


def _compare(runs: Mapping[str, Run] | Iterable[Run], reference: str | None) -> _Compared:
    runs = _as_mapping(runs)
    ref = _reference(runs, reference)
    accs = {k: step_accuracy(r) for k, r in runs.items()}
    per_round = {k: per_round_comm(r) for k, r in runs.items()}
    return _Compared(runs, ref, accs, per_round, int(per_round[ref].sum()))


def comm_accuracy_frame(runs: Mapping[str, Run] | Iterable[Run], *, reference: str | None = None) -> pd.DataFrame:
    """One row per run: communication and accuracy, the layout of the paper's Tables 1–4.

    ``runs``: {label: Run} (as from :func:`fedala_lab.experiments.runs.comparison_runs`) or Runs (labelled by :func:`comparison_label`).
    ``reference``: the label of FedAvg(τ0) (default: the FedAvg run with the fewest steps per round).
    Columns: label, algo, steps_per_round, tau0, phi, rounds, total_steps, comm (C, parameters per client),
    comm_pct (% of the reference's C), bytes_up, bytes_down, best_acc / final_acc (%, on the steps all
    runs share, synchronised rounds only), final_step (where final_acc was read), final_comm_pct (what had
    been sent before that evaluation, % of the reference's C: the point of the run's curve where final_acc
    lies; best_comm_pct the same for best_acc), best_acc_all / final_acc_all (% as evaluated, all rounds).
    """
    return _frame(_compare(runs, reference))


def comm_accuracy_curves(runs: Mapping[str, Run] | Iterable[Run], *, reference: str | None = None) -> pd.DataFrame:
    """Tidy accuracy against cumulative communication: label, round, step, comm_pct, acc (%), synced.

    ``comm_pct`` is what the clients had sent before that round's evaluation, in % of the reference's total
    C. Only synchronised rounds are kept (see the module docstring).
    """
    return _curves(_compare(runs, reference))


def comm_accuracy(runs: Mapping[str, Run] | Iterable[Run], *,
                  reference: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(:func:`comm_accuracy_frame`, :func:`comm_accuracy_curves`) of the same runs, computed together."""
    cmp = _compare(runs, reference)
    return _frame(cmp), _curves(cmp)


def _frame(cmp: _Compared) -> pd.DataFrame:
    common = _common_steps(list(cmp.accs.values()))
    rows = []
    for k, r in cmp.runs.items():
        cfg, com = r.config, _communication(r, cmp.per_round[k])
        spr = steps_per_round(cfg)
        a = cmp.accs[k]
        on_grid = a[a.index.isin(common)] if len(common) else a
        sent_before = cmp.per_round[k].sort_index().cumsum().shift(1, fill_value=0)

        def sent_pct(step, sent_before=sent_before, spr=spr):  # sent before the evaluation at ``step``
            got = sent_before.get(int(step) // spr + 1, np.nan)
            return 100.0 * float(got) / cmp.ref_cost if cmp.ref_cost else float("nan")

        rows.append({
            "label": k, "algo": cfg.algo, "steps_per_round": spr,
            "tau0": cfg.tau0 if _is_lama(cfg) else spr, "phi": cfg.phi if _is_lama(cfg) else 1,
            "rounds": com["rounds"], "total_steps": com["rounds"] * spr, "comm": com["cost"],
            "comm_pct": 100.0 * com["cost"] / cmp.ref_cost if cmp.ref_cost else float("nan"),
            "bytes_up": com["bytes_up"], "bytes_down": com["bytes_down"],
            "best_acc": float(on_grid.max()) if len(on_grid) else float("nan"),
            "final_acc": float(on_grid.iloc[-1]) if len(on_grid) else float("nan"),
            "final_step": int(on_grid.index[-1]) if len(on_grid) else -1,
            "final_comm_pct": sent_pct(on_grid.index[-1]) if len(on_grid) else float("nan"),
            "best_comm_pct": sent_pct(on_grid.idxmax()) if len(on_grid) else float("nan"),
            "best_acc_all": r.best_acc, "final_acc_all": r.final_acc,
            "reference": k == cmp.ref,
        })
    return pd.DataFrame(rows)


def _curves(cmp: _Compared) -> pd.DataFrame:
    frames = []
    for k, r in cmp.runs.items():
        cum = cmp.per_round[k].sort_index().cumsum()
        before = cum.shift(1, fill_value=0)  # sent before round t's evaluation
        acc = cmp.accs[k]
        rounds = acc.index.to_numpy() // steps_per_round(r.config) + 1
        frames.append(pd.DataFrame({
            "label": k, "round": rounds, "step": acc.index.to_numpy(),
            "comm_pct": 100.0 * before.reindex(rounds).to_numpy() / cmp.ref_cost, "acc": acc.to_numpy(),
        }))
    return pd.concat(frames, ignore_index=True)
