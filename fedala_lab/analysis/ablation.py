"""Ablations of ALA's hyper-parameters and its applicability (compute only, no matplotlib).

- :func:`ablation_frame` — the paper's Tables 1 and 6: accuracy against s (percent of local data used
  to learn W) or p (how many top blocks get weights), with the number of ALA weights for each p and the
  time ALA takes per round; or against any other hyper-parameter of the runs' algorithm.
- :func:`applicability_frame` — ALA added to any method (the paper's Table 4): accuracy of each method, of the
  method with ALA, and the gain (the paper: Cifar100 FedAvg+ALA +24.03, FedProx+ALA +24.19).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from ..algorithms import registry
from ..errors import ConfigError
from . import stats as st
from .tables import accuracy_table, runs_frame


def ala_weight_count(run) -> int:
    """Number of ALA weights of an ALA run: one per parameter of its top p blocks (Table 6), read off
    the run's own record (``meta["ala_params"]`` and ``meta["param_shapes"]``)."""
    shapes = run.meta["param_shapes"]
    return sum(int(np.prod(shapes[n])) for n in run.meta["ala_params"])


def ala_images(run) -> int:
    """Images ALA passes through the top p blocks in a normal round, all clients together: one pass over each
    client's window of s % of its training images (the start phase, round 2, repeats passes). Counted from
    the run's own record (its train sizes and s), so it does not vary with the machine's load as seconds do."""
    from ..algorithms.ala import window_size

    return sum(window_size(int(n), run.config.s) for n in run.meta["train_sizes"])


def ablation_frame(runs: Iterable, param: str = "p", against=None) -> pd.DataFrame:
    """One row per value of ``param`` (sorted): best/final accuracy over seeds (%) as :func:`accuracy_table` gives
    it (mean, std, 95 % interval, the number of seeds), the mean time of local initialisation per round
    (``ala_seconds``: ALA's, from init_seconds), for ALA runs the images ALA passes per normal round
    (``ala_images``, counted: see :func:`ala_images`), and for ALA's ``p`` the number of ALA weights. ``param`` is a
    hyper-parameter of the runs' algorithm (ALA's p, s, eta, threshold…; FedProx's mu…); the runs must differ
    only in it and the seed. ``against``: a value of ``param`` every other value is compared with, paired by seed
    (the ``best_diff``, ``best_p_holm`` … columns), or None."""
    runs = list(runs)
    if not runs:
        raise ConfigError("runs", [], f"at least one run per value of {param}")
    other = [r.config.algo for r in runs if param not in r.config.algorithm.param_names]
    if other:
        who = registry.owner(param)
        raise ConfigError("runs", other[0], f"{who} runs (an ablation of {param} needs {who})" if who else
                          f"runs of an algorithm with the hyper-parameter {param}")
    _check_same_except(runs, {param, "seed"})
    df = runs_frame(runs, extra=[param])
    df["ala_seconds"] = [float(np.nanmean(r.rounds["init_seconds"].to_numpy()[1:]))
                         if len(r.rounds) > 1 else np.nan for r in runs]
    table = accuracy_table(df, by=[param], against=against)
    secs = df.groupby(param)["ala_seconds"].mean()
    table["ala_seconds"] = table[param].map(secs)
    if runs[0].config.uses_ala:  # counted, so that load cannot reorder the costs as it can the seconds
        images = {getattr(r.config, param): ala_images(r) for r in runs}
        table["ala_images"] = table[param].map(images)
    if param == "p" and runs[0].config.uses_ala:
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


def applicability_frame(runs: Iterable, which: str = "best") -> pd.DataFrame:
    """ALA added to a method: one row per method present with an ALA counterpart (any ``X`` and ``X+ala``;
    the paper's Table 4), in the order the methods first appear.

    Columns: base, with_ala (algorithm names), base_mean/base_std/base_lo/base_hi and ala_mean/ala_std/ala_lo/
    ala_hi (% over seeds, with the 95 % interval: :mod:`.stats`), gain (the mean over seeds of the +ALA run minus
    the base run of the same seed, percentage points) with gain_lo/gain_hi (its 95 % interval), p (paired t),
    p_holm (Holm-adjusted over the table's rows), p_wilcoxon, and n_seeds (the seeds both have). ``which`` =
    "best" or "final" round. FedALA counts as FedAvg+ALA (it is the same algorithm); "fedavg+ala" is used when
    both exist.
    """
    if which not in ("best", "final"):
        raise ConfigError("which", which, "best or final")
    runs = list(runs)
    frame = runs_frame(runs)
    partners: dict[str, list[str]] = {}
    for r in runs:  # each ALA run under the method it adds ALA to
        alg = r.config.algorithm
        if alg.uses("ala"):
            found = partners.setdefault(alg.without("ala"), [])
            if r.config.algo not in found:
                found.append(r.config.algo)
    rows = []
    for base in dict.fromkeys(r.config.algo for r in runs):
        present = sorted(partners.get(base, []), key=lambda a: "+" in a)  # the explicit +ala spelling last
        if not present:
            continue
        ala = present[-1]
        long = st.seed_stats(frame[frame["algo"].isin([base, ala])], ["algo"], against=base, metrics=[which])
        b, a = (long[long["algo"] == name].iloc[0] for name in (base, ala))
        rows.append({"base": base, "with_ala": ala,
                     **{f"base_{k}": b[c] for k, c in _COLS.items()}, **{f"ala_{k}": a[c] for k, c in _COLS.items()},
                     "gain": a["diff_mean"], "gain_lo": a["diff_ci_lo"], "gain_hi": a["diff_ci_hi"], "p": a["p_t"],
                     "p_wilcoxon": a["p_wilcoxon"], "n_seeds": int(a["diff_n"])})
    if not rows:
        raise ConfigError("runs", sorted(frame["algo"].unique()), "a method and its +ala run (e.g. fedavg and fedala)")
    out = pd.DataFrame(rows)
    out.insert(out.columns.get_loc("p_wilcoxon"), "p_holm", st.holm(out["p"]))
    return out


_COLS = {"mean": "mean", "std": "std", "lo": "ci_lo", "hi": "ci_hi"}  # applicability_frame's names of seed_stats'
