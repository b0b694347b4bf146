"""Ablations of ALA's hyper-parameters and its applicability (compute only, no matplotlib).

- :func:`ablation_frame` — the paper's Tables 1 and 6: accuracy against s (percent of local data used
  to learn W) or p (how many top blocks get weights), with the number of ALA weights for each p and the
  time ALA takes per round.
- :func:`applicability_frame` — ALA added to FedAvg and FedProx: accuracy of each base method, of the
  method with ALA, and the gain (the paper: Cifar100 FedAvg+ALA +24.03, FedProx+ALA +24.19).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from ..errors import ConfigError
from .tables import accuracy_table, runs_frame

ABLATION_PARAMS = ("p", "s", "eta", "threshold")


def ala_weight_count(run) -> int:
    """Number of ALA weights of an ALA run: one per parameter of its top p blocks (Table 6), read off
    the run's own record (``meta["ala_params"]`` and ``meta["param_shapes"]``)."""
    shapes = run.meta["param_shapes"]
    return sum(int(np.prod(shapes[n])) for n in run.meta["ala_params"])


def ablation_frame(runs: Iterable, param: str = "p") -> pd.DataFrame:
    """One row per value of ``param`` (sorted): best/final accuracy mean and std over seeds (%), the
    number of seeds, the mean ALA time per round (init_seconds, s), and for ``p`` the number of ALA
    weights. All runs must be ALA runs that differ only in ``param`` and the seed."""
    if param not in ABLATION_PARAMS:
        raise ConfigError("param", param, "one of " + ", ".join(ABLATION_PARAMS))
    runs = list(runs)
    if not runs:
        raise ConfigError("runs", [], f"at least one ALA run per value of {param}")
    not_ala = [r.config.algo for r in runs if not r.config.uses_ala]
    if not_ala:
        raise ConfigError("runs", not_ala[0], f"ALA runs (an ablation of {param} needs ALA)")
    _check_same_except(runs, {param, "seed"})
    df = runs_frame(runs, extra=[param])
    df["ala_seconds"] = [float(np.nanmean(r.rounds["init_seconds"].to_numpy()[1:]))
                         if len(r.rounds) > 1 else np.nan for r in runs]
    table = accuracy_table(df, by=[param])
    secs = df.groupby(param)["ala_seconds"].mean()
    table["ala_seconds"] = table[param].map(secs)
    if param == "p":
        by_p = {r.config.p: r for r in runs}  # every p in the table has a run
        table["ala_weights"] = [ala_weight_count(by_p[int(v)]) for v in table["p"]]
    return table.sort_values(param, kind="stable").reset_index(drop=True)


def _check_same_except(runs, allowed: set[str]) -> None:
    """All runs share their config except the fields in ``allowed`` (else the ablation mixes effects)."""
    def flat(cfg):
        d = cfg.canonical()
        data = d.pop("data")
        return {**d, **{f"data.{k}": v for k, v in data.items()}}

    ref = flat(runs[0].config)
    for r in runs[1:]:
        f = flat(r.config)
        diff = sorted(k for k in set(ref) | set(f) if k not in allowed and ref.get(k) != f.get(k))
        if diff:
            raise ConfigError("runs", diff[0], f"runs that differ only in {', '.join(sorted(allowed))} "
                              f"({diff[0]}: {ref.get(diff[0])!r} vs {f.get(diff[0])!r})")


# ALA on top of a base method: which algorithm names pair up
_WITH_ALA = {"fedavg": ("fedala", "fedavg+ala"), "fedprox": ("fedprox+ala",), "fedlama": ("fedlama+ala",)}


def applicability_frame(runs: Iterable, which: str = "best") -> pd.DataFrame:
    """ALA added to a base method: one row per base method present with an ALA counterpart.

    Columns: base, with_ala (algorithm names), base_mean/base_std, ala_mean/ala_std (% over seeds),
    gain (difference of means, percentage points), n_seeds. ``which`` = "best" or "final" round.
    FedALA counts as FedAvg+ALA (it is the same algorithm); "fedavg+ala" is used when both exist.
    """
    if which not in ("best", "final"):
        raise ConfigError("which", which, "best or final")
    table = accuracy_table(list(runs), by=("algo",)).set_index("algo")
    rows = []
    for base, partners in _WITH_ALA.items():
        if base not in table.index:
            continue
        present = [a for a in partners if a in table.index]
        if not present:
            continue
        ala = present[-1]
        b, a = table.loc[base], table.loc[ala]
        rows.append({"base": base, "with_ala": ala,
                     "base_mean": b[f"{which}_mean"], "base_std": b[f"{which}_std"],
                     "ala_mean": a[f"{which}_mean"], "ala_std": a[f"{which}_std"],
                     "gain": a[f"{which}_mean"] - b[f"{which}_mean"],
                     "n_seeds": int(min(a["n_seeds"], b["n_seeds"]))})
    if not rows:
        raise ConfigError("runs", sorted(table.index), "a base method (fedavg, fedprox, fedlama) and its +ALA run")
    return pd.DataFrame(rows)
