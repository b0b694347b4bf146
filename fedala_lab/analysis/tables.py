"""Accuracy tables over seeds (the paper's Tables 2 and 7: mean ± std of 5 runs).

The paper reports the BEST round's pooled accuracy; users question that (it flatters methods that
overfit), so every table carries both the best and the final round.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from ..config import POOL_PREFIX
from ..record.run import Run, run_row, trajectory


def runs_frame(runs: Iterable[Run], extra: Iterable[str] = ()) -> pd.DataFrame:
    """One row per run (see :func:`run_row`)."""
    return pd.DataFrame([run_row(r, extra) for r in runs])


def accuracy_table(runs: Iterable[Run] | pd.DataFrame, by: Iterable[str] = ("algo",)) -> pd.DataFrame:
    """Mean and std over seeds of best- and final-round pooled accuracy (%), one row per group, and of the
    best and final pooled test AUC (%, ``best_auc_mean`` … ``final_auc_std``) where the runs recorded it.

    ``runs`` may be Run objects or a frame from :func:`runs_frame`. ``by`` names the columns that define
    a row (default: the algorithm); any config field can be used, e.g. ``by=("algo", "p")``. The std is
    the sample std (ddof=1) as numpy/pandas report for 5 runs; it is NaN for a single seed. ``identical``:
    the group's seeds all gave the same run (every recorded number equal, :func:`~fedala_lab.record.run.trajectory`),
    so its std says nothing about seeds — e.g. your own model's weights, your own data and ρ = 1 leave a seed
    nothing to draw.
    """
    by = list(by)
    df = runs if isinstance(runs, pd.DataFrame) else runs_frame(runs, by)
    if df.empty:
        return pd.DataFrame(columns=[*by, "best_mean", "best_std", "final_mean", "final_std", "n_seeds",
                                     "identical"])
    g = df.groupby(by, sort=False, dropna=False)
    auc = {f"{k}_auc_{stat}": (f"{k}_auc", stat) for k in ("best", "final") for stat in ("mean", "std")
           if f"{k}_auc" in df}
    out = g.agg(best_mean=("best_acc", "mean"), best_std=("best_acc", "std"),
                final_mean=("final_acc", "mean"), final_std=("final_acc", "std"),
                n_seeds=("seed", "nunique"), **auc).reset_index()
    same = g["trajectory"].nunique() if "trajectory" in df else None
    out["identical"] = (out["n_seeds"] > 1) & (same.to_numpy() == 1) if same is not None else False
    return out


def cost_table(runs: Iterable[Run]) -> pd.DataFrame:
    """Each method's cost (the paper's Table 3), measured: one row per algorithm (mean over its runs).

    Computation, per normal round (the mean over rounds 3 on, so FedALA's start phase in round 2 is apart;
    all rounds when a run is shorter): ``method_seconds``, the method's own work (``init_seconds``: local
    initialisation, ALA's weight learning; ``train_seconds``; ``aggregate_seconds``), and ``eval_seconds``
    apart: it holds what a method does to its models before evaluating them (FedAvg-C's fine-tuning) and
    what a run records (Fig. 5's train-split losses: two more forward passes over the training data), so
    methods recorded differently still compare; ``seconds``, the whole round. ``start_phase_seconds``: round
    2's method time beyond a normal round's (the ALA start phase; about 0 without ALA). Communication per client
    and round, in models (Σ = the model's bytes): ``up`` (bytes sent by a client that trained) and ``down``
    (bytes received, averaged over all clients), and ``total`` = up + down; ``formula``: the paper's notation of
    it (the algorithm's spec). Wall-clock seconds depend on the machine and its load: compare within a table.
    """
    rows = []
    for r in runs:
        rd = r.rounds.assign(method_seconds=lambda d: d["init_seconds"] + d["train_seconds"] + d["aggregate_seconds"])
        normal = rd[rd["round"] >= 3] if (rd["round"] >= 3).any() else rd
        second = rd[rd["round"] == 2]
        model = r.meta.get("model_bytes") or 1
        senders = (rd["num_selected"] - rd["dropped"]).clip(lower=1)
        alg = r.config.algorithm
        rows.append({
            "algo": r.config.algo, "label": alg.label, "formula": alg.base.communication,
            "rounds": int(rd["round"].max()) if len(rd) else 0,
            **{c: float(normal[c].mean()) for c in ("method_seconds", "seconds", "init_seconds", "train_seconds",
                                                     "eval_seconds", "aggregate_seconds")},
            "start_phase_seconds": float(second["method_seconds"].mean() - normal["method_seconds"].mean())
            if len(second) else 0.0,
            "up": float((rd["bytes_up"] / senders).mean() / model),
            "down": float((rd["bytes_down"] / r.config.data.num_clients).mean() / model),
        })
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df = df.groupby(["algo", "label", "formula"], sort=False, as_index=False).mean(numeric_only=True)
    df["total"] = df["up"] + df["down"]
    return df


def format_mean_std(mean: float, std: float, digits: int = 2) -> str:
    """``98.81 ± 0.01`` (or just the mean when there is one seed, "—" when there is none)."""
    if mean is None or (isinstance(mean, float) and np.isnan(mean)):
        return "—"
    if std is None or (isinstance(std, float) and np.isnan(std)):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def final_spread(run: Run) -> float:
    """The spread between clients in the last evaluated round: the std of their test accuracies (points)."""
    r = run.rounds.dropna(subset=["acc"])
    return float(r["acc_std"].iloc[-1]) if len(r) else float("nan")


def seed_table(groups: Mapping[str, Iterable[Run]], reference: str | None = None) -> pd.DataFrame:
    """Labelled groups of runs that differ only in their seed, one row each: best and final pooled accuracy
    (%) and the final round's spread between clients (:func:`final_spread`, points), mean and sample std
    over seeds; with ``reference`` (a label) also ``diff``: each run's best accuracy minus that of the
    reference group's run of the same seed (paired), mean and std over the seeds both groups have.

    Columns: label, n_seeds, identical (every seed gave the same run: see :func:`accuracy_table`), best_mean,
    best_std, final_mean, final_std, spread_mean, spread_std and, with a reference, diff_mean, diff_std. :func:`format_seed_table` writes them as "mean ± std".
    """
    if reference is not None and reference not in groups:
        from ..errors import ConfigError

        raise ConfigError("reference", reference, "one of the labels " + ", ".join(map(str, groups)))
    best = {label: {r.config.seed: r.best_acc for r in runs} for label, runs in groups.items()}
    rows = []
    for label, runs in groups.items():
        runs = list(runs)
        row = {"label": label, "n_seeds": len({r.config.seed for r in runs}),
               "identical": len(runs) > 1 and len({trajectory(r) for r in runs}) == 1}
        for name, values in (("best", [r.best_acc for r in runs]), ("final", [r.final_acc for r in runs]),
                             ("spread", [final_spread(r) for r in runs])):
            row[f"{name}_mean"], row[f"{name}_std"] = _mean_std(values)
        if reference is not None:
            ref = best[reference]
            row["diff_mean"], row["diff_std"] = _mean_std([v - ref[s] for s, v in best[label].items() if s in ref])
        rows.append(row)
    return pd.DataFrame(rows)


def _mean_std(values) -> tuple[float, float]:
    a = np.asarray(list(values), dtype=float)
    if not len(a):
        return float("nan"), float("nan")
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else float("nan")


def format_seed_table(table: pd.DataFrame, digits: int = 1) -> pd.DataFrame:
    """A :func:`seed_table` for reading: one "mean ± std" text per statistic, indexed by label."""
    same = table["identical"] if "identical" in table else [False] * len(table)
    out = {"seeds": [f"{n}, identical runs" if i else n for n, i in zip(table["n_seeds"], same)]}
    names = {"best": "best acc %", "final": "final acc %", "spread": "client spread",
             "diff": "paired diff of best"}
    for k, title in names.items():
        if f"{k}_mean" in table:
            cells = [format_mean_std(m, s, digits) for m, s in zip(table[f"{k}_mean"], table[f"{k}_std"])]
            out[title] = [c if k != "diff" or c.startswith("-") else "+" + c for c in cells]
    return pd.DataFrame(out, index=pd.Index(table["label"], name=None))


def sweep_table(result, by: Iterable[str] | None = None) -> pd.DataFrame:
    """A sweep's :func:`accuracy_table`: mean ± std over seeds per row of ``by`` (default: the spec's
    ``table_by()``) of its completed grid points, and a ``status`` per row: "complete", or which of its seeds
    diverged ("diverged", "diverged in 1 of 3 seeds"). A row whose seeds all diverged stays in the table,
    without accuracies (NaN) and with ``n_seeds`` 0: a diverged setting is a result, never dropped.

    ``result``: a :class:`~fedala_lab.experiments.sweeps.SweepResult`.
    """
    frame, by = result.frame, list(by or result.spec.table_by())
    if not len(frame):
        return accuracy_table(frame, by=by).assign(status=pd.Series(dtype=object))
    table = accuracy_table(frame[frame["status"] == "complete"], by=by)
    status = frame.groupby(by, sort=False, dropna=False)["status"].agg(_group_status).reset_index()
    table = status.merge(table, on=by, how="left")  # every group, in the grid's order
    table["n_seeds"] = table["n_seeds"].fillna(0).astype(int)
    table["identical"] = table["identical"].astype("boolean").fillna(False).astype(bool)
    auc = [c for c in table.columns if "_auc_" in c]
    return table[[*by, "best_mean", "best_std", "final_mean", "final_std", "n_seeds", "identical", "status", *auc]]


def _group_status(statuses: pd.Series) -> str:
    bad = int((statuses != "complete").sum())
    if not bad:
        return "complete"
    return "diverged" if bad == len(statuses) else f"diverged in {bad} of {len(statuses)} seeds"


def table_markdown(table: pd.DataFrame, by: Iterable[str] | None = None, digits: int = 2) -> str:
    """An :func:`accuracy_table` as GitHub Markdown: its ``by`` columns (default: those before the
    statistics), best and final accuracy as mean ± std (std left out for one seed, "—" without a run), the
    seeds ("3, identical runs" when the seeds changed nothing, with a note under the table), and a sweep
    table's ``status`` when a row is not complete."""
    by = list(by) if by is not None else list(table.columns[: list(table.columns).index("best_mean")])
    status = "status" in table and bool((table["status"] != "complete").any())
    head = [*by, "best acc %", "final acc %", "seeds"] + (["status"] if status else [])
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join(["---"] * len(by) + ["---:"] * 3 + (["---"] if status else [])) + "|"]
    identical = table["identical"].fillna(False).astype(bool) if "identical" in table else \
        pd.Series(False, index=table.index)
    for i, r in table.iterrows():
        seeds = f"{int(r['n_seeds'])}" + (", identical runs" if identical[i] else "")
        cells = [str(r[b]) for b in by] + [format_mean_std(r["best_mean"], r["best_std"], digits),
                                           format_mean_std(r["final_mean"], r["final_std"], digits),
                                           seeds] + ([str(r["status"])] if status else [])
        lines.append("| " + " | ".join(cells) + " |")
    if identical.any():
        lines += ["", ("identical runs: every seed gave the same run, so ± says nothing about seeds (nothing the "
                  "config draws depends on the seed: e.g. your own model's weights, your own data, ρ = 1, no "
                  "shuffling).")]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Tables 2/7 layout (rows = methods, columns = settings) and plain-text renderings (no tabulate needed)


def setting_label(cfg) -> str:
    """A short column name for a run's data setting, e.g. ``digits Dir(0.1)`` or ``MNIST pat(2)``."""
    d = cfg.data
    if d.comes_partitioned:  # a PFLlib folder or your own arrays: split as they came, by nothing of ours
        return _dataset_name(d)
    part = {"iid": "IID", "pathological": f"pat({d.classes_per_client})",
            "dirichlet": f"Dir({d.beta:g})"}[d.partition]
    return f"{_dataset_name(d)} {part}"


def data_title(d) -> str:
    """A figure title for a data setting (a DataConfig): ``digits, Dir(β=0.1), 20 clients``."""
    if d.is_pfllib:
        return f"{_dataset_name(d)} (a PFLlib partition), {d.num_clients} clients"
    if d.is_custom:
        return f"{_dataset_name(d)} (your data, split as given), {d.num_clients} clients"
    part = {"iid": "IID", "pathological": f"pathological, {d.classes_per_client} labels per client",
            "dirichlet": f"Dir(β={d.beta:g})"}[d.partition]
    return f"{_dataset_name(d)}, {part}, {d.num_clients} clients"


def _dataset_name(d) -> str:
    from pathlib import Path

    if d.is_pfllib:
        return Path(d.dataset[len("pfllib:"):]).name
    if d.is_custom:
        return d.dataset.split(":", 1)[1]
    if d.dataset.startswith(POOL_PREFIX):  # a PFLlib partition's images, partitioned afresh
        return Path(d.dataset[len(POOL_PREFIX):]).name + " pooled"
    return {"digits": "digits", "mnist_mini": "MNIST-mini", "mnist": "MNIST", "fashion_mnist": "Fashion-MNIST", "cifar10": "Cifar10",
            "cifar100": "Cifar100"}.get(d.dataset, d.dataset)


def run_settings(cfg) -> str:
    """The settings that make a run what it is, its algorithm's own only: ``lr 0.1, batch 10, E 1, ρ 1`` then
    the share of stragglers when there are any (``90 % stragglers dropped``: FedAvg drops them, FedProx keeps
    their partial work), then the algorithm's hyper-parameters as their declarations show them (``μ 0.001``
    for FedProx, ``η 1, s 80, p 1`` for ALA and the round ALA starts after when set, ``τ0 5, φ 2`` for FedLAMA;
    others when they differ from their default)."""
    parts = [f"lr {cfg.lr:g}", f"batch {cfg.batch_size}",
             f"τ {cfg.local_steps} steps" if cfg.local_steps else f"E {cfg.local_epochs}", f"ρ {cfg.join_ratio:g}"]
    if cfg.stragglers:  # a run with stragglers is not comparable with one without: say so, and what it did
        parts.append(f"{100 * cfg.stragglers:g} % stragglers {'dropped' if cfg.drops_stragglers else 'kept'}")
    parts += [t for p in cfg.algorithm.params if (t := p.shown(getattr(cfg, p.name))) is not None]
    return ", ".join(parts)


def layout_table(stats: pd.DataFrame, rows: str = "algo", columns: str = "setting", which: str = "both",
                 digits: int = 2, row_order=None, column_order=None) -> pd.DataFrame:
    """Pivot an :func:`accuracy_table` frame into the paper's layout: one row per method, one column per
    setting (``which="best"`` or ``"final"``), or two per setting (``"both"``: "best" and "final"; ``"auc"``:
    the best and the final pooled test AUC, "best AUC" and "final AUC").

    Cells are "mean ± std" strings (see :func:`format_mean_std`); a missing combination is "–".
    """
    if which not in ("best", "final", "both", "auc"):
        from ..errors import ConfigError

        raise ConfigError("which", which, "best, final, both or auc")
    kinds = {"both": ["best", "final"], "auc": ["best_auc", "final_auc"]}.get(which, [which])
    row_vals = list(row_order) if row_order is not None else list(dict.fromkeys(stats[rows]))
    col_vals = list(column_order) if column_order is not None else list(dict.fromkeys(stats[columns]))
    cells = {}
    for _, r in stats.iterrows():
        for k in kinds:
            cells[(r[rows], r[columns], k)] = format_mean_std(r.get(f"{k}_mean", np.nan), r.get(f"{k}_std", np.nan),
                                                              digits)
    out = {}
    for c in col_vals:
        for k in kinds:
            name = str(c) if len(kinds) == 1 else f"{c} ({k.replace('_auc', ' AUC')})"
            out[name] = [cells.get((rv, c, k), "–") for rv in row_vals]
    frame = pd.DataFrame(out, index=pd.Index(row_vals, name=rows))
    return frame


def frame_to_markdown(frame: pd.DataFrame, index: bool = True) -> str:
    """A GitHub-flavoured Markdown table of ``frame`` (cells as text; ``|`` escaped)."""
    def esc(v):
        return str(v).replace("|", "\\|")

    head = ([frame.index.name or ""] if index else []) + [esc(c) for c in frame.columns]
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join([":---"] * (1 if index else 0) + ["---:"] * len(frame.columns)) + "|"]
    for idx, row in frame.iterrows():
        cells = ([esc(idx)] if index else []) + [esc(v) for v in row.tolist()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def _latex_escape(text) -> str:
    s = "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))
    return s.replace("±", r"$\pm$").replace("–", "--")


def frame_to_latex(frame: pd.DataFrame, index: bool = True, caption: str | None = None,
                   label: str | None = None) -> str:
    """A booktabs ``tabular`` of ``frame`` (inside a ``table`` when a caption or label is given)."""
    spec = ("l" if index else "") + "r" * len(frame.columns)
    head = ([_latex_escape(frame.index.name or "")] if index else []) + [_latex_escape(c) for c in frame.columns]
    body = [" & ".join(([_latex_escape(i)] if index else []) + [_latex_escape(v) for v in row.tolist()]) + r" \\"
            for i, row in frame.iterrows()]
    lines = [rf"\begin{{tabular}}{{{spec}}}", r"\toprule", " & ".join(head) + r" \\", r"\midrule", *body,
             r"\bottomrule", r"\end{tabular}"]
    if caption or label:
        inner = [r"\begin{table}[t]", r"\centering"]
        if caption:
            inner.append(rf"\caption{{{_latex_escape(caption)}}}")
        if label:
            inner.append(rf"\label{{{label}}}")
        lines = [*inner, *lines, r"\end{table}"]
    return "\n".join(lines) + "\n"
