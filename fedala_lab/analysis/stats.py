"""Statistics over seeds, in one place (compute only): confidence intervals, paired tests against a reference,
and per-client fairness. Every face calls this module: ``seed_table`` and the sweep's tables
(:mod:`.tables`), the figures' tables and error bars, the notebooks, the app (docs/comparing.md).

    long = seed_stats(groups_frame({"FedAvg": avg_runs, "FedALA": ala_runs}))   # one row per (method, metric)
    print(verdict(long, "FedALA", metric="final"))   # FedALA − FedAvg = +11.8 points, 95 % CI ±0.8, p = …

The rules, stated once (and in every output that uses them):

- **interval**: 95 %, over seeds. Student t with n − 1 degrees of freedom (mean ± t·s/√n) below
  :data:`BOOTSTRAP_FROM` seeds; from :data:`BOOTSTRAP_FROM` seeds on a percentile bootstrap of the mean
  (:func:`scipy.stats.bootstrap`, :data:`RESAMPLES` resamples, a fixed generator so that a table is the same
  each time). ``ci_method`` names which. One seed: no interval. Seeds that gave identical runs (every recorded
  number equal, :func:`~fedala_lab.record.run.trajectory`): no interval either, and the note says so instead
  of an interval of width 0.
- **paired**: a method against a reference, seed by seed (the same seed gives both runs the same draws: the
  first model, the batches, the clients picked): the differences' mean and interval as above, a paired t test
  (:func:`scipy.stats.ttest_rel`) and a Wilcoxon signed-rank test (:func:`scipy.stats.wilcoxon`). With n
  pairs Wilcoxon's smallest two-sided p is 2/2ⁿ, so below 6 seeds it cannot reach 0.05 (the note says so).
- **several methods against one reference**: the paired t p-values are Holm-adjusted (:func:`holm`) over the
  methods compared with that reference on one metric (and one setting of the other table columns).
- **fairness** (per run): the clients' own test accuracies (%), final (each client's ``test_acc`` at the last
  evaluated round) and best (each client's maximum over the evaluated rounds: every client at its own best
  round, so it flatters more than the pooled best). Their worst 10 % (the mean of the ⌈N/10⌉ lowest clients),
  the worst client, the 10th/50th/90th percentiles (numpy's linear interpolation) and the std over clients
  (population std, as the rounds' ``acc_std``). Over seeds they get the same interval and tests as the pooled
  accuracy.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..algorithms import registry
from ..errors import ConfigError
from ..record.run import Run, auc_summary, run_row

LEVEL = 0.95  # every interval's confidence level
ALPHA = 1 - LEVEL  # the level a gap is told apart from noise at
BOOTSTRAP_FROM = 10  # seeds from which the interval is a bootstrap one (fewer: Student t)
RESAMPLES = 9999
WILCOXON_FROM = 6  # pairs from which Wilcoxon's smallest two-sided p (2/2^n) is below 0.05
WORST_SHARE = 0.10  # the share of clients the "worst" mean is over

# The numbers one run gives, by name: pooled accuracy, then the clients' fairness numbers (all in %)
FAIRNESS = ("worst10", "worst", "p10", "p50", "p90", "client_std")
AUC = ("best_auc", "final_auc")  # the pooled test AUC (%), where a run recorded it
METRICS = ("best", "final", *(f"{k}_{f}" for k in ("final", "best") for f in FAIRNESS), *AUC)
ACCURACY = ("best", "final")
_FAIR_TITLE = {"worst10": "worst 10 % of clients", "worst": "worst client", "p10": "10th percentile of clients",
               "p50": "median client", "p90": "90th percentile of clients", "client_std": "std over clients"}
TITLES = {"best": "best pooled acc %", "final": "final pooled acc %",
          **{f"{k}_{f}": f"{t}, {k} acc %" for k in ("final", "best") for f, t in _FAIR_TITLE.items()}}
TITLES.update({f"{k}_auc": f"{k} pooled test AUC %" for k in ("best", "final")})
TITLES.update({f"{k}_client_std": f"std over clients, {k} acc (points)" for k in ("final", "best")})

AUTO = "auto"  # against=AUTO: the reference method (its spec's role: FedAvg) when one group is its, else none


# ------------------------------------------------------------------------------------------ one sample


def interval(values, *, identical: bool = False, what: str = "value") -> dict:
    """Mean, sample std (ddof 1), n and the 95 % interval of ``values`` (one per seed; NaN ones left out).

    Returns ``n``, ``mean``, ``std``, ``ci_lo``, ``ci_hi``, ``ci_method`` ("t", "bootstrap" or "" when there
    is no interval) and ``note`` (why there is none: no value, one seed, identical runs, equal values).
    ``identical``: the seeds gave identical runs (the caller knows from their trajectories); ``what`` the values
    are, for the note (e.g. "difference")."""
    a = np.asarray([v for v in values if v is not None], dtype=float)
    a = a[np.isfinite(a)]
    n = len(a)
    out = {"n": n, "mean": float(a.mean()) if n else math.nan, "std": float(a.std(ddof=1)) if n > 1 else math.nan,
           "ci_lo": math.nan, "ci_hi": math.nan, "ci_method": "", "note": ""}
    if n == 0:
        out["note"] = "no run"
    elif n == 1:
        out["note"] = "one seed: no interval"
    elif identical:
        out["note"] = f"the {n} seeds gave identical runs: no interval (the seed changes nothing here)"
    elif _all_equal(a):
        out["note"] = f"the {n} seeds gave the same {what}: no interval"
    elif n >= BOOTSTRAP_FROM:
        res = _bootstrap(a)
        out.update(ci_lo=float(res.low), ci_hi=float(res.high), ci_method="bootstrap")
    else:
        half = t_half_width(out["std"], n)
        out.update(ci_lo=out["mean"] - half, ci_hi=out["mean"] + half, ci_method="t")
    return out


def _all_equal(a: np.ndarray) -> bool:
    """Whether the values are one value, but for float rounding (a sum taken in another order)."""
    return bool(np.ptp(a) <= 1e-9 * max(1.0, float(np.abs(a).max())))


def t_half_width(std: float, n: int) -> float:
    """Half the width of the 95 % Student t interval of a mean: t(0.975, n − 1) · std / √n."""
    from scipy import stats

    return float(stats.t.ppf(0.5 + LEVEL / 2, n - 1) * std / math.sqrt(n))


def _bootstrap(a: np.ndarray):
    from scipy import stats

    # a fixed generator: the same values give the same interval (scipy < 1.15 calls it random_state)
    key = "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"
    return stats.bootstrap((a,), np.mean, confidence_level=LEVEL, n_resamples=RESAMPLES, method="percentile",
                           **{key: np.random.default_rng(0)}).confidence_interval


# what "±" and "[low, high]" mean in every table and caption
CI_NOTE = ("± : half-width of the 95 % interval of the mean over seeds, Student t (n − 1 degrees of freedom); "
           f"[low, high]: a percentile bootstrap ({RESAMPLES:,} resamples), used from {BOOTSTRAP_FROM} seeds on; "
           "one seed: no interval.")


# ----------------------------------------------------------------------------------------------- pairs


def paired(values, reference, *, identical: bool = False, same_runs: bool = False) -> dict:
    """A method against its reference, seed by seed: ``values[i]`` and ``reference[i]`` come from the same seed.

    Returns the differences' :func:`interval` (prefixed ``diff_``: ``diff_n``, ``diff_mean`` … ``diff_note``),
    ``p_t`` (paired t, :func:`scipy.stats.ttest_rel`), ``p_wilcoxon`` (signed-rank, :func:`scipy.stats.wilcoxon`,
    zero differences left out as scipy does), ``wilcoxon_min_p`` (2/2ⁿ: the smallest two-sided p n pairs can
    give) and ``wilcoxon_note`` (below 6 pairs: that it cannot reach 0.05). ``identical``: both sides' seeds
    gave identical runs; ``same_runs``: each seed's run is the reference's own (a difference of exactly 0)."""
    from scipy import stats

    x, r = np.asarray(values, dtype=float), np.asarray(reference, dtype=float)
    ok = np.isfinite(x) & np.isfinite(r)
    x, r = x[ok], r[ok]
    d = interval(x - r, identical=identical, what="difference")
    n = d["n"]
    if same_runs and n:
        d["note"] = "the runs are the reference's own, seed by seed: a difference of 0, no interval"
    out = {f"diff_{k}": v for k, v in d.items()}
    varies = n > 1 and not identical and not same_runs and not _all_equal(x - r)
    out["p_t"] = float(stats.ttest_rel(x, r).pvalue) if varies else math.nan
    with warnings.catch_warnings():  # scipy warns that ties and zeros leave the exact distribution: p is still its
        warnings.simplefilter("ignore")
        out["p_wilcoxon"] = (float(stats.wilcoxon(x, r).pvalue) if n and np.any(x != r) and not (identical or same_runs)
                             else math.nan)
    out["wilcoxon_min_p"] = wilcoxon_min_p(n) if n else math.nan
    out["wilcoxon_note"] = (f"with {n} seed(s) Wilcoxon's smallest two-sided p is 2/2^{n} = {wilcoxon_min_p(n):.3g}: "
                            "it cannot reach 0.05" if 0 < n < WILCOXON_FROM else "")
    return out


def wilcoxon_min_p(n: int) -> float:
    """The smallest two-sided p of the exact Wilcoxon signed-rank test with ``n`` pairs: every difference of one
    sign has probability 2 · (1/2)ⁿ under the null hypothesis."""
    return 2.0 / 2.0 ** n


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjustment of a family of p-values (NaN ones kept NaN and not counted): the i-th smallest
    of m becomes max over j ≤ i of min(1, (m − j + 1) · p₍ⱼ₎), in the input's order."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, math.nan)
    idx = np.flatnonzero(np.isfinite(p))
    m = len(idx)
    running = 0.0
    for rank, i in enumerate(idx[np.argsort(p[idx], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


# -------------------------------------------------------------------------------------------- fairness


def client_accuracy(run: Run) -> pd.DataFrame:
    """Each client's own test accuracy (%), indexed by client: ``final`` (its ``test_acc`` at the run's last
    evaluated round) and ``best`` (its maximum over the evaluated rounds, each client at its own best round)."""
    c = run.clients.dropna(subset=["test_acc"])
    acc = run.acc
    if not len(c) or not len(acc):
        return pd.DataFrame({"final": pd.Series(dtype=float), "best": pd.Series(dtype=float)})
    last = c[c["round"] == acc.index[-1]].set_index("client")["test_acc"]
    best = c.groupby("client")["test_acc"].max()
    return pd.DataFrame({"final": last, "best": best}).sort_index()


def spread_numbers(acc) -> dict:
    """The fairness numbers of one set of client accuracies (%): ``worst10`` (mean of the ⌈N/10⌉ lowest),
    ``worst``, ``p10``/``p50``/``p90`` (linear interpolation) and ``client_std`` (population std)."""
    a = np.sort(np.asarray(acc, dtype=float)[np.isfinite(np.asarray(acc, dtype=float))])
    if not len(a):
        return dict.fromkeys(FAIRNESS, math.nan)
    k = max(1, math.ceil(WORST_SHARE * len(a)))
    p10, p50, p90 = np.percentile(a, [10, 50, 90])
    return {"worst10": float(a[:k].mean()), "worst": float(a[0]), "p10": float(p10), "p50": float(p50),
            "p90": float(p90), "client_std": float(a.std())}


def fairness(run: Run) -> dict:
    """A run's fairness numbers (%), final and best (:func:`client_accuracy`, :func:`spread_numbers`), named
    ``final_worst10``, ``final_worst`` … ``best_client_std``."""
    acc = client_accuracy(run)
    return {f"{kind}_{k}": v for kind in ("final", "best") for k, v in spread_numbers(acc[kind]).items()}


def column(metric: str) -> str:
    """The runs' frame column a metric is read from: ``best_acc`` and ``final_acc`` (as every runs table names
    them: :func:`~fedala_lab.record.run.run_row`, a sweep's ``runs.csv``), the fairness numbers by their names."""
    return f"{metric}_acc" if metric in ACCURACY else metric


def run_metrics(run: Run) -> dict:
    """Every number of :data:`METRICS` for one run (%), by its :func:`column`: ``best_acc`` and ``final_acc``
    (pooled) and :func:`fairness`."""
    return {"best_acc": run.best_acc, "final_acc": run.final_acc, **fairness(run), **auc_summary(run)}


def with_fairness(frame: pd.DataFrame, runs: Sequence[Run]) -> pd.DataFrame:
    """``frame`` (one row per run, in ``runs``' order: a sweep's frame) with the :func:`fairness` columns and
    the Run itself (column ``run``)."""
    rows = pd.DataFrame([fairness(r) for r in runs], index=frame.index,
                        columns=[f"{k}_{f}" for k in ("final", "best") for f in FAIRNESS])
    return pd.concat([frame, rows], axis=1).assign(run=list(runs))


def client_gains(run: Run, reference: Run, kind: str = "final") -> pd.DataFrame:
    """Client by client, ``run`` against ``reference`` (same seed, same data: the same client ids hold the same
    data): ``acc`` and ``ref_acc`` (% , :func:`client_accuracy`'s ``kind``) and ``gain`` (points)."""
    if kind not in ("final", "best"):
        raise ConfigError("kind", kind, "final or best")
    if run.config.seed != reference.config.seed:
        raise ConfigError("reference", reference.config.seed, f"a run of the same seed ({run.config.seed})")
    if run.config.data != reference.config.data:
        raise ConfigError("reference", reference.config.data.dataset,
                          "a run on the same data and split (the same client ids hold the same data)")
    a, b = client_accuracy(run)[kind], client_accuracy(reference)[kind]
    both = a.index.intersection(b.index)
    return pd.DataFrame({"acc": a[both], "ref_acc": b[both], "gain": a[both] - b[both]}).rename_axis("client")


def gain_summary(pairs: Iterable[tuple[Run, Run]], kind: str = "final") -> dict:
    """:func:`client_gains` over several (run, reference) pairs (one per seed), the (client, seed) pairs pooled:
    ``pairs`` counted, how many ``gain``, ``lose`` and ``tie``, the ``mean_gain`` and ``median_gain`` and the
    ``worst_loss`` (the lowest gain; positive when no client loses), in points; ``seeds``."""
    frames = [client_gains(r, ref, kind) for r, ref in pairs]
    g = pd.concat(frames)["gain"].to_numpy() if frames else np.array([])
    return {"seeds": len(frames), "pairs": len(g), "gain": int((g > 0).sum()), "lose": int((g < 0).sum()),
            "tie": int((g == 0).sum()), "mean_gain": float(g.mean()) if len(g) else math.nan,
            "median_gain": float(np.median(g)) if len(g) else math.nan,
            "worst_loss": float(g.min()) if len(g) else math.nan}


# -------------------------------------------------------------------------------------- groups of runs


def metrics_frame(runs: Iterable[Run], extra: Iterable[str] = ()) -> pd.DataFrame:
    """One row per run: its :func:`~fedala_lab.record.run.run_row` (config, seed, trajectory …; ``extra``
    config fields), every number of :data:`METRICS` and the Run itself (column ``run``)."""
    rows = [{**run_row(r, extra), **run_metrics(r), "run": r} for r in runs]
    return pd.DataFrame(rows, columns=None if rows else ["algo", "seed", "trajectory", *map(column, METRICS), "run"])


def groups_frame(groups: Mapping[str, Iterable[Run]]) -> pd.DataFrame:
    """:func:`metrics_frame` of labelled groups of runs that differ only in their seed (column ``label``)."""
    parts = [metrics_frame(list(runs)).assign(label=label) for label, runs in groups.items()]
    return pd.concat(parts, ignore_index=True) if parts else metrics_frame([]).assign(label=pd.Series(dtype=object))


def seed_stats(frame: pd.DataFrame, by: Sequence[str] = ("label",), *, against=AUTO, versus: str | None = None,
               metrics: Sequence[str] = ACCURACY) -> pd.DataFrame:
    """The statistics over seeds of every group of ``frame`` (rows of runs: ``by`` columns, ``seed``, the
    ``metrics``' :func:`column` s, optionally ``trajectory``; :func:`metrics_frame`, :func:`groups_frame`, a sweep's
    frame), long: one row per (group, metric).

    Columns: the ``by`` columns, ``metric``, :func:`interval`'s (``n`` seeds, ``mean``, ``std``, ``ci_lo``,
    ``ci_hi``, ``ci_method``, ``note``), ``identical`` (n > 1 and every seed gave the same run) and, against a
    reference, ``reference`` (its ``versus`` value) with :func:`paired`'s columns over the seeds both have and
    ``p_holm`` (the paired t p-values Holm-adjusted over the groups compared with the same reference on the same
    metric) with ``holm_family`` (how many p-values that family holds). The reference's own rows have no
    comparison (NaN).

    ``versus``: the column that names what is compared (default: ``label`` if in ``by``, else ``algo``, else the
    first of ``by``); rows that agree in the other ``by`` columns are compared with each other. ``against``: the
    reference's value in that column ("FedAvg" and "fedavg" both name FedAvg); ``AUTO`` (default): the reference
    method (its spec's ``role``: FedAvg) when one group is its, else no comparison; None: no comparison. Several
    rows of one group and seed (a sweep's grid points that share a run) count once: their mean.
    """
    if not len(frame):  # no run (a sweep whose every run failed): nothing to say, whatever the columns
        return pd.DataFrame()
    missing = [c for c in [*by, "seed", *map(column, metrics)] if c not in frame]
    if missing:
        raise ConfigError("metrics", missing[0], "a column of the runs' frame: " + ", ".join(map(str, frame.columns)))
    by, versus, ref_value, groups = _grouped(frame, by, versus, against)
    has_traj = "trajectory" in frame
    per_seed = {}  # group key -> one row per seed: the metrics, the seed's trajectory, whether its rows agree
    for key, g in groups.items():
        seeds = g.groupby("seed", sort=True)
        agg = seeds[[column(m) for m in metrics]].mean().set_axis(list(metrics), axis=1)
        agg["trajectory"] = seeds["trajectory"].first() if has_traj else None
        agg["one_run"] = seeds["trajectory"].nunique() == 1 if has_traj else False
        per_seed[key] = agg

    def identical(agg) -> bool:
        return has_traj and len(agg) > 1 and agg["trajectory"].nunique() == 1 and bool(agg["one_run"].all())

    rows = []
    for key, agg in per_seed.items():
        ident = identical(agg)
        ref_key = _partner(key, by, versus, ref_value, per_seed)
        for m in metrics:
            row = {**dict(zip(by, key)), "metric": m, **interval(agg[m], identical=ident), "identical": ident}
            if ref_value is not None:
                row["reference"] = ref_value if ref_key is not None else None
            if ref_key is not None:
                ref = per_seed[ref_key]
                both = agg.index.intersection(ref.index)
                same = has_traj and len(both) > 0 and bool((agg.loc[both, "trajectory"] == ref.loc[both, "trajectory"]).all())
                row.update(paired(agg.loc[both, m], ref.loc[both, m], identical=ident and identical(ref),
                                  same_runs=same))
            rows.append(row)
    out = pd.DataFrame(rows)
    if ref_value is not None and len(out):
        out["p_holm"], out["holm_family"] = math.nan, 0
        if "p_t" in out:
            rest = [b for b in by if b != versus]
            for idx in out.groupby([*rest, "metric"] if rest else "metric", sort=False, dropna=False).groups.values():
                out.loc[idx, "p_holm"] = holm(out.loc[idx, "p_t"])
                out.loc[idx, "holm_family"] = int(out.loc[idx, "p_t"].notna().sum())
    return out


def gain_table(frame: pd.DataFrame, by: Sequence[str] = ("label",), *, against=AUTO, versus: str | None = None,
               kind: str = "final") -> pd.DataFrame:
    """Per client, every group of ``frame`` (rows of runs with the Run in column ``run``: :func:`metrics_frame`,
    :func:`groups_frame`) against its reference (chosen as in :func:`seed_stats`), the runs paired by seed:
    :func:`gain_summary`'s columns, one row per compared group (the ``by`` columns and ``reference``). Groups whose
    data differ from the reference's (other clients under the same ids) get no row."""
    if len(frame) and "run" not in frame:
        raise ConfigError("frame", list(frame.columns), "a frame with the runs themselves (column run)")
    by, versus, ref_value, groups = _grouped(frame, by, versus, against)
    rows = []
    for key, g in groups.items():
        ref_key = _partner(key, by, versus, ref_value, groups)
        if ref_key is None:
            continue
        mine, ref = (dict(zip(x["seed"], x["run"])) for x in (g, groups[ref_key]))
        pairs = [(mine[s], ref[s]) for s in sorted(mine) if s in ref]
        if any(a.config.data != b.config.data for a, b in pairs):
            continue
        rows.append({**dict(zip(by, key)), "reference": ref_value, **gain_summary(pairs, kind)})
    return pd.DataFrame(rows, columns=None if rows else [*by, "reference", "seeds", "pairs", "gain", "lose", "tie",
                                                          "mean_gain", "median_gain", "worst_loss"])


def _grouped(frame: pd.DataFrame, by: Sequence[str], versus: str | None, against):
    """(by, versus, the reference's value or None, {group key (a tuple): its rows}) of :func:`seed_stats`."""
    by = list(by)
    versus = versus or ("label" if "label" in by else "algo" if "algo" in by else by[0])
    if versus not in by:
        raise ConfigError("versus", versus, "one of the table's columns: " + ", ".join(by))
    groups = ({k if isinstance(k, tuple) else (k,): g for k, g in frame.groupby(by, sort=False, dropna=False)}
              if len(frame) else {})
    return by, versus, _reference(frame, versus, against), groups


def _partner(key: tuple, by: list[str], versus: str, ref_value, keys) -> tuple | None:
    """The key of the reference group ``key`` is compared with (the same other ``by`` values), or None."""
    if ref_value is None:
        return None
    want = {**dict(zip(by, key)), versus: ref_value}
    ref_key = tuple(want[b] for b in by)
    return ref_key if ref_key != key and ref_key in keys else None


def _reference(frame: pd.DataFrame, versus: str, against):
    """The ``versus`` value that names the reference (None: no comparison)."""
    if against is None or not len(frame):  # no run: nothing to compare, with whatever reference
        return None
    values = list(dict.fromkeys(frame[versus]))
    if against == AUTO:
        reference = registry.with_role("reference")
        if versus == "algo":
            return next((v for v in reference if v in values), None)
        if "algo" in frame:  # a labelled group whose runs are all the reference method's, when exactly one is
            ref = [v for v in values if len(a := set(frame.loc[frame[versus] == v, "algo"])) == 1 and a <= {*reference}]
            return ref[0] if len(ref) == 1 else None
        return None
    for v in values:
        if _names(v, against):
            return v
    raise ConfigError("against", against, f"one of the compared {versus} values: " + ", ".join(map(str, values)))


def _names(value, against) -> bool:
    """Whether ``against`` (as given on a command line or in code) names ``value``: its text, case apart, or
    the same number, or (an algorithm's name) its label."""
    if value == against or str(value).strip().lower() == str(against).strip().lower():
        return True
    try:
        if float(value) == float(against):
            return True
    except (TypeError, ValueError):
        pass
    from ..config import algo_label

    try:
        return isinstance(value, str) and algo_label(value).lower() == str(against).strip().lower()
    except Exception:  # noqa: BLE001 - a label that is no algorithm's name names nothing here
        return False


def wide(long: pd.DataFrame, by: Sequence[str], metrics: Sequence[str] = ()) -> pd.DataFrame:
    """:func:`seed_stats`' long frame as one row per group: ``n_seeds``, ``identical``, ``ci_method`` and per
    metric ``{m}_mean``, ``{m}_std``, ``{m}_lo``, ``{m}_hi`` and, against a reference, ``reference`` with
    ``{m}_diff``, ``{m}_diff_std``, ``{m}_diff_lo``, ``{m}_diff_hi``, ``{m}_p`` (paired t), ``{m}_p_holm``,
    ``{m}_p_wilcoxon``. ``metrics``: those whose columns are there even without a row (NaN)."""
    by = list(by)
    if not len(long):
        return pd.DataFrame(columns=[*by, "n_seeds", "identical", "ci_method",
                                     *(f"{m}_{k}" for m in metrics for k in ("mean", "std", "lo", "hi"))])
    first = long.groupby(by, sort=False, dropna=False).first().reset_index()
    out = first[by].copy()
    out["n_seeds"] = first["n"].astype(int)
    out["identical"] = first["identical"].astype(bool)
    out["ci_method"] = first["ci_method"]
    if "reference" in long:
        out["reference"] = first["reference"]
    names = {"mean": "mean", "std": "std", "ci_lo": "lo", "ci_hi": "hi", "diff_mean": "diff", "diff_std": "diff_std",
             "diff_ci_lo": "diff_lo", "diff_ci_hi": "diff_hi", "p_t": "p", "p_holm": "p_holm",
             "p_wilcoxon": "p_wilcoxon"}
    for m, part in long.groupby("metric", sort=False):
        part = part.set_index(by) if len(by) > 1 else part.set_index(by[0])
        for col, short in names.items():
            if col in part:
                vals = part[col]
                out[f"{m}_{short}"] = [vals.get(tuple(r) if len(by) > 1 else r[0], math.nan)
                                       for r in out[by].itertuples(index=False)]
    return out


# ------------------------------------------------------------------------------------------ in words


def format_p(p: float) -> str:
    """A p-value in two significant digits (``p < 0.0001`` below that; "—" when there is none)."""
    if p is None or not np.isfinite(p):
        return "—"
    return "< 0.0001" if p < 1e-4 else f"{p:.2g}"


def format_ci(mean: float, lo: float, hi: float, digits: int = 2, sign: bool = False) -> str:
    """``95.24 ± 0.83`` (a symmetric interval), ``95.24 [94.10, 96.02]`` (a bootstrap one), the mean alone
    when there is no interval, "—" when there is no mean."""
    if mean is None or not np.isfinite(mean):
        return "—"
    m = f"{mean:+.{digits}f}" if sign else f"{mean:.{digits}f}"
    around = interval_text(mean, lo, hi, digits)
    return f"{m} {around}" if around else m


def interval_text(mean: float, lo: float, hi: float, digits: int = 2) -> str:
    """The interval around ``mean`` alone: ``± 0.83`` (symmetric), ``[94.10, 96.02]`` (a bootstrap one), "" (none)."""
    if any(v is None or not np.isfinite(v) for v in (mean, lo, hi)):
        return ""
    if math.isclose(mean - lo, hi - mean, rel_tol=1e-9, abs_tol=1e-12):
        return f"± {hi - mean:.{digits}f}"
    return f"[{lo:.{digits}f}, {hi:.{digits}f}]"


def is_noise(row) -> bool:
    """Whether a compared row's gap cannot be told from noise: no interval, an interval that holds 0, or a
    (Holm-adjusted, where there are several) paired t p ≥ 0.05."""
    lo, hi = row.get("diff_ci_lo", math.nan), row.get("diff_ci_hi", math.nan)
    p = row.get("p_holm", math.nan)
    p = row.get("p_t", math.nan) if not np.isfinite(p) else p
    return not (np.isfinite(lo) and np.isfinite(hi)) or lo <= 0 <= hi or not np.isfinite(p) or p >= ALPHA


def verdict_row(row, label: str, reference: str, digits: int = 1) -> str:
    """One compared row of :func:`seed_stats` in words: "FedALA − FedAvg = +11.8 points, 95 % CI ±0.8, p = 0.0003
    over 3 seeds (paired t)", and "with 3 seeds this gap could be noise" where the interval holds 0 or p ≥ 0.05.
    Where several methods were compared with the reference the p is Holm-adjusted, and says so."""
    family = int(row.get("holm_family", 1) or 1)
    n, d = int(row.get("diff_n", 0) or 0), row.get("diff_mean", math.nan)
    head = f"{label} − {reference} = {d:+.{digits}f} points" if np.isfinite(d) else f"{label} − {reference}: no pair"
    if not n:
        return f"{label} − {reference}: no seed in common, nothing to compare"
    seeds = f"{n} seed{'s' if n != 1 else ''}"
    note = row.get("diff_note") or ""
    if n == 1:
        return f"{head}; one seed: no interval, so this gap could be noise"
    if note:  # identical runs, or the same difference every seed: say so instead of an interval of width 0
        return f"{head} over {seeds}; {note}"
    lo, hi = row["diff_ci_lo"], row["diff_ci_hi"]
    ci = (f"±{hi - d:.{digits}f}" if row.get("diff_ci_method") == "t" else
          f"[{lo:+.{digits}f}, {hi:+.{digits}f}] (bootstrap)")
    holm_p = row.get("p_holm", math.nan)
    p = holm_p if family > 1 and np.isfinite(holm_p) else row.get("p_t", math.nan)
    test = "paired t" + (f", Holm-adjusted over {family} comparisons" if family > 1 else "")
    text = f"{head}, 95 % CI {ci}, p {_eq(format_p(p))} over {seeds} ({test})"
    if is_noise(row):
        text += f": with {seeds} this gap could be noise"
    return text


def _eq(p: str) -> str:
    return p if p.startswith("<") else f"= {p}"


def verdicts(long: pd.DataFrame, metric: str = "final", labels: Mapping | None = None, digits: int = 1,
             by: str | None = None) -> list[str]:
    """Every compared group of :func:`seed_stats`' ``long`` frame on ``metric``, in words (:func:`verdict_row`);
    ``labels`` maps the compared values to names (e.g. algorithm labels). ``by``: the column naming the groups
    (default: ``label``, else ``algo``, else the first)."""
    if not len(long) or "reference" not in long:
        return []
    rows = long[(long["metric"] == metric) & long["reference"].notna()]
    col = by or next(c for c in ("label", "algo", *long.columns) if c in long)
    name = (lambda v: str((labels or {}).get(v, v)))
    return [verdict_row(r, name(r[col]), name(r["reference"]), digits) for _, r in rows.iterrows()]


def verdict(long: pd.DataFrame, label, metric: str = "final", digits: int = 1) -> str:
    """The verdict on one group (its value in ``label``'s column) of :func:`seed_stats`' frame (see
    :func:`verdicts`)."""
    col = next(c for c in ("label", "algo", *long.columns) if c in long)
    rows = long[(long["metric"] == metric) & long["reference"].notna()] if "reference" in long else long.iloc[:0]
    hit = rows[rows[col].map(lambda v: _names(v, label))]
    if not len(hit):
        raise ConfigError("label", label, "a group compared with the reference: "
                          + ", ".join(map(str, rows[col])) if len(rows) else "a group with a reference")
    r = hit.iloc[0]
    return verdict_row(r, str(r[col]), str(r["reference"]), digits)


def interval_words(row, label: str, digits: int = 1) -> str:
    """One group of :func:`seed_stats` in words: "FedALA: 85.2 %, 95 % CI ±1.0 over 3 seeds" (or its note)."""
    n, m = int(row["n"]), row["mean"]
    if not n:
        return f"{label}: no run"
    seeds = f"{n} seed{'s' if n != 1 else ''}"
    if row.get("note"):
        return f"{label}: {m:.{digits}f} % over {seeds}; {row['note']}"
    ci = format_ci(m, row["ci_lo"], row["ci_hi"], digits)
    return f"{label}: {ci.replace(' ± ', ' %, 95 % CI ±').replace(' [', ' %, 95 % CI [')} over {seeds}"


def gain_words(summary: Mapping, label: str, reference: str, kind: str = "final", digits: int = 1) -> str:
    """:func:`gain_summary` in words: how many clients gain and lose against the reference, by how much."""
    if not summary["pairs"]:
        return f"{label} vs {reference}, per client: no client in common"
    seeds = f"{summary['seeds']} seed{'s' if summary['seeds'] != 1 else ''}"
    per = "client-seed pairs" if summary["seeds"] > 1 else "clients"
    return (f"{label} vs {reference}, per client ({kind} accuracy, {seeds}): {summary['gain']} of {summary['pairs']} "
            f"{per} gain, {summary['lose']} lose" + (f", {summary['tie']} tie" if summary["tie"] else "")
            + f"; gain per client: mean {summary['mean_gain']:+.{digits}f}, median {summary['median_gain']:+.{digits}f}, "
            f"lowest {summary['worst_loss']:+.{digits}f} points")
