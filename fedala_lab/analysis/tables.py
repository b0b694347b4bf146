"""Accuracy tables over seeds (the paper's Tables 2 and 7: mean ± std of 5 runs), with the statistics of
:mod:`.stats`: 95 % intervals over seeds and paired tests against a reference (docs/comparing.md).

The paper reports the BEST round's pooled accuracy; users question that (it flatters methods that
overfit), so every table carries both the best and the final round.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from ..config import POOL_PREFIX
from ..record.run import Run, run_row
from . import stats as st


def runs_frame(runs: Iterable[Run], extra: Iterable[str] = ()) -> pd.DataFrame:
    """One row per run (see :func:`run_row`)."""
    return pd.DataFrame([run_row(r, extra) for r in runs])


def accuracy_table(runs: Iterable[Run] | pd.DataFrame, by: Iterable[str] = ("algo",), *, against=st.AUTO,
                   metrics: Iterable[str] = st.ACCURACY) -> pd.DataFrame:
    """Best- and final-round pooled accuracy (%) over seeds, one row per group (:func:`.stats.seed_stats` made
    wide: :func:`.stats.wide`).

    ``runs`` may be Run objects or a frame from :func:`runs_frame` (or a sweep's). ``by`` names the columns that
    define a row (default: the algorithm); any config field can be used, e.g. ``by=("algo", "p")``. Columns: the
    ``by`` columns, ``n_seeds``, ``identical`` (the group's seeds all gave the same run: every recorded number
    equal, :func:`~fedala_lab.record.run.trajectory` — e.g. your own model's weights, your own data and ρ = 1
    leave a seed nothing to draw —, so no interval), ``ci_method``, then per metric ``{m}_mean``, ``{m}_std``
    (sample std, ddof 1; NaN for one seed), ``{m}_lo`` and ``{m}_hi`` (the 95 % interval) and, against a
    reference (``against``: default FedAvg where the rows have an ``algo`` column and FedAvg is one of them; None
    for none), ``reference`` with ``{m}_diff``, ``{m}_diff_std``, ``{m}_diff_lo``, ``{m}_diff_hi``, ``{m}_p``
    (paired t), ``{m}_p_holm`` and ``{m}_p_wilcoxon``. ``metrics``: :data:`.stats.METRICS` names (default: best
    and final, with the best and final pooled test AUC (%) where the runs recorded it; the fairness numbers need
    Run objects or their columns)."""
    by, metrics = list(by), list(metrics)
    df = runs if isinstance(runs, pd.DataFrame) else st.metrics_frame(runs, by)
    metrics += [m for m in st.AUC if metrics == list(st.ACCURACY) and m in df and df[m].notna().any()]
    return st.wide(st.seed_stats(df, by, against=against, metrics=metrics), by, metrics)


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


def ci_cell(row, key: str, digits: int = 2, sign: bool = False) -> str:
    """A table's cell of ``{key}_mean`` (or ``{key}``) with its 95 % interval ``{key}_lo``/``{key}_hi``
    (:func:`.stats.format_ci`: "95.24 ± 0.83", "95.24 [94.10, 96.02]" for a bootstrap one), "(identical runs)"
    after a mean whose seeds all gave the same run."""
    mean = row.get(f"{key}_mean", row.get(key, np.nan))
    text = st.format_ci(mean, row.get(f"{key}_lo", np.nan), row.get(f"{key}_hi", np.nan), digits, sign)
    return text + " (identical runs)" if bool(row.get("identical", False)) and text != "—" else text


def final_spread(run: Run) -> float:
    """The spread between clients in the last evaluated round: the std of their test accuracies (points)."""
    r = run.rounds.dropna(subset=["acc"])
    return float(r["acc_std"].iloc[-1]) if len(r) else float("nan")


# seed_table's names for the columns of the wide frame (the paired difference there is of the best round's)
_SEED_COLUMNS = {**{f"final_client_std_{k}": f"spread_{k}" for k in ("mean", "std", "lo", "hi")},
                 "best_diff": "diff_mean", "best_diff_std": "diff_std", "best_diff_lo": "diff_lo",
                 "best_diff_hi": "diff_hi", "best_p": "diff_p", "best_p_holm": "diff_p_holm",
                 "best_p_wilcoxon": "diff_p_wilcoxon"}


def seed_table(groups: Mapping[str, Iterable[Run]], reference=st.AUTO) -> pd.DataFrame:
    """Labelled groups of runs that differ only in their seed, one row each (:func:`.stats.seed_stats`): best
    and final pooled accuracy (%) and the final round's spread between clients (the std of their accuracies,
    points: :func:`final_spread`), mean, sample std and 95 % interval over seeds; against ``reference`` (a label;
    default: the group of FedAvg runs when there is exactly one; None: none) each run paired with the reference's
    run of the same seed.

    Columns: label, n_seeds, identical (every seed gave the same run: see :func:`accuracy_table`), ci_method,
    ``best_``/``final_``/``spread_`` ``mean``, ``std``, ``lo``, ``hi`` and, against a reference, ``reference``,
    ``diff_mean``, ``diff_std``, ``diff_lo``, ``diff_hi``, ``diff_p`` (paired t), ``diff_p_holm``,
    ``diff_p_wilcoxon`` (the best round's paired difference) and the final round's ``final_diff``,
    ``final_diff_lo``, ``final_diff_hi``, ``final_p``, ``final_p_holm`` … . :func:`format_seed_table` writes them
    for reading; :func:`.stats.verdicts` says them in words."""
    if reference not in (None, st.AUTO) and reference not in groups:
        from ..errors import ConfigError

        raise ConfigError("reference", reference, "one of the labels " + ", ".join(map(str, groups)))
    long = st.seed_stats(st.groups_frame(groups), ("label",), against=reference,
                         metrics=("best", "final", "final_client_std"))
    table = st.wide(long, ["label"])
    table = table.drop(columns=[c for c in table if c.startswith("final_client_std_") and "diff" in c
                                or c.startswith("final_client_std_p")])
    return table.rename(columns=_SEED_COLUMNS)


def format_seed_table(table: pd.DataFrame, digits: int = 1) -> pd.DataFrame:
    """A :func:`seed_table` for reading, indexed by label: the seeds, then "mean ± half-width of the 95 %
    interval" (:func:`ci_cell`) per statistic, the paired difference and its p (paired t, Holm-adjusted where
    several groups are compared with the reference)."""
    same = table["identical"] if "identical" in table else [False] * len(table)
    out = {"seeds": [f"{n}, identical runs" if i else n for n, i in zip(table["n_seeds"], same)]}
    rows = table.to_dict("records")
    for k, title in {"best": "best acc %", "final": "final acc %", "spread": "client spread"}.items():
        if f"{k}_mean" in table:
            out[f"{title} (95 % CI)"] = [ci_cell(r, k, digits) for r in rows]
    if "diff_mean" in table:
        out[SEED_DIFF] = [_diff_cell(r, "diff", r["label"], table, digits) for r in rows]
        out[SEED_P] = [st.format_p(r["diff_p_holm"]) for r in rows]
    return pd.DataFrame(out, index=pd.Index(table["label"], name=None))


SEED_DIFF = "paired diff of best (95 % CI)"  # format_seed_table's columns of the comparison
SEED_P = "p (paired t, Holm)"


def _reference_of(table: pd.DataFrame):
    refs = table["reference"].dropna() if "reference" in table else []
    return refs.iloc[0] if len(refs) else None


def _diff_cell(row, key: str, value, table: pd.DataFrame, digits: int) -> str:
    """A row's paired difference with its interval; "reference" in the reference's own row ("—": no partner)."""
    if pd.notna(row.get("reference")):
        return ci_cell(row, key, digits, sign=True)
    return "reference" if value == _reference_of(table) else "—"


def sweep_stats(result, by: Iterable[str] | None = None, *, against=st.AUTO,
                metrics: Iterable[str] = st.METRICS) -> pd.DataFrame:
    """A sweep's :func:`.stats.seed_stats` (long: one row per group and metric) over its completed grid points,
    rows ``by`` (default: the spec's ``table_by()``); ``metrics``: every pooled and per-client number by default.
    ``result``: a :class:`~fedala_lab.experiments.sweeps.SweepResult`."""
    frame, by = _completed(result), list(by or result.spec.table_by())
    return st.seed_stats(frame, by, against=against, metrics=list(metrics))


def sweep_gains(result, by: Iterable[str] | None = None, *, against=st.AUTO, kind: str = "final") -> pd.DataFrame:
    """A sweep's per-client gains over the reference (:func:`.stats.gain_table`), rows ``by``."""
    return st.gain_table(_completed(result), list(by or result.spec.table_by()), against=against, kind=kind)


def _completed(result) -> pd.DataFrame:
    """The sweep's completed grid points with the per-client numbers and the Run (column ``run``)."""
    ok = (result.frame["status"] == "complete").to_numpy() if len(result.frame) else np.array([], dtype=bool)
    return st.with_fairness(result.frame[ok], [r for r, keep in zip(result.runs, ok) if keep])


# the sweep table's statistics: pooled accuracy, best and final, and the worst 10 % of clients at the end
SWEEP_METRICS = ("best", "final", "final_worst10")


def sweep_table(result, by: Iterable[str] | None = None, *, against=st.AUTO) -> pd.DataFrame:
    """A sweep's :func:`accuracy_table` (:data:`SWEEP_METRICS`: 95 % intervals, paired tests against
    ``against``, default FedAvg when the rows are algorithms and FedAvg is one) per row of ``by`` (default: the
    spec's ``table_by()``) of its completed grid points, and a ``status`` per row: "complete", or which of its
    seeds diverged ("diverged", "diverged in 1 of 3 seeds"). A row whose seeds all diverged stays in the table,
    without accuracies (NaN) and with ``n_seeds`` 0: a diverged setting is a result, never dropped.

    ``result``: a :class:`~fedala_lab.experiments.sweeps.SweepResult`.
    """
    frame, by = result.frame, list(by or result.spec.table_by())
    table = st.wide(sweep_stats(result, by, against=against, metrics=SWEEP_METRICS), by, SWEEP_METRICS)
    if not len(frame):
        return table.assign(status=pd.Series(dtype=object))
    status = frame.groupby(by, sort=False, dropna=False)["status"].agg(_group_status).reset_index()
    table = status.merge(table, on=by, how="left")  # every group, in the grid's order
    table["n_seeds"] = table["n_seeds"].fillna(0).astype(int)
    table["identical"] = table["identical"].astype("boolean").fillna(False).astype(bool)
    return table[[c for c in table if c != "status"] + ["status"]]


def _group_status(statuses: pd.Series) -> str:
    bad = int((statuses != "complete").sum())
    if not bad:
        return "complete"
    return "diverged" if bad == len(statuses) else f"diverged in {bad} of {len(statuses)} seeds"


def table_cells(table: pd.DataFrame, by: Iterable[str] | None = None, digits: int = 2,
                labels: Mapping | None = None) -> tuple[pd.DataFrame, list[str]]:
    """An :func:`accuracy_table` (or :func:`sweep_table`) as text cells, with the notes that say what they mean:
    its ``by`` columns (default: those before ``n_seeds``), each metric's mean with its 95 % interval
    (:func:`ci_cell`), against a reference the paired difference of the best and of the final round with their p
    (paired t, Holm-adjusted over the rows compared), the seeds, a sweep table's ``status`` when a row is not
    complete. ``labels`` maps the ``by`` values to names (e.g. an algorithm's). Returns (cells, notes)."""
    cols = list(table.columns)
    by = list(by) if by is not None else cols[: cols.index("n_seeds")]
    rows = table.to_dict("records")
    metrics = [m for m in st.METRICS if f"{m}_mean" in table]
    name = (lambda v: str((labels or {}).get(v, v)))
    out = {b: [name(r[b]) for r in rows] for b in by}
    for m in metrics:
        out[st.TITLES[m]] = [ci_cell(r, m, digits) for r in rows]
    ref = _reference_of(table)
    compared = ref is not None and any(f"{m}_diff" in table for m in metrics)
    for m in ("best", "final") if compared else ():
        if f"{m}_diff" in table:
            versus = "label" if "label" in by else "algo" if "algo" in by else by[0]
            out[f"{m} − {name(ref)}"] = [_diff_cell(r, f"{m}_diff", r.get(versus), table, digits) for r in rows]
            out[f"p ({m})"] = [st.format_p(r.get(f"{m}_p_holm")) for r in rows]
    identical = [bool(r.get("identical")) for r in rows]
    out["seeds"] = [f"{int(r['n_seeds'])}" + (", identical runs" if i else "") for r, i in zip(rows, identical)]
    if "status" in table and bool((table["status"] != "complete").any()):
        out["status"] = [str(r["status"]) for r in rows]
    return pd.DataFrame(out), _notes(table, ref, name, identical, compared)


def _notes(table: pd.DataFrame, ref, name, identical: list[bool], compared: bool) -> list[str]:
    """What a rendered table's numbers mean (:func:`table_cells`)."""
    notes = [st.CI_NOTE]
    if compared:
        n = table["n_seeds"][table["n_seeds"] > 0]
        least = int(n.min()) if len(n) else 0
        notes.append(f"{name(ref)} is the reference: each row's runs minus {name(ref)}'s run of the same seed "
                     "(paired), with a paired t test; p is Holm-adjusted over the rows compared with it (per "
                     "metric and setting). Where the interval holds 0 or p ≥ 0.05, the gap could be noise.")
        if 0 < least < st.WILCOXON_FROM:
            notes.append(f"Wilcoxon's signed-rank test (in the .csv) cannot reach 0.05 with {least} seed(s): its "
                         f"smallest two-sided p is 2/2^{least} = {st.wilcoxon_min_p(least):.3g}.")
    if any(identical):
        notes.append("identical runs: every seed gave the same run, so there is no interval over seeds (nothing "
                     "the config draws depends on the seed: e.g. your own model's weights, your own data, ρ = 1, no "
                     "shuffling).")
    return notes


def table_markdown(table: pd.DataFrame, by: Iterable[str] | None = None, digits: int = 2,
                   labels: Mapping | None = None) -> str:
    """An :func:`accuracy_table` as GitHub Markdown (:func:`table_cells`), its notes under it."""
    cells, notes = table_cells(table, by, digits, labels)
    return frame_to_markdown(cells, index=False) + "\n" + "\n\n".join(notes)


def table_latex(table: pd.DataFrame, by: Iterable[str] | None = None, digits: int = 2,
                labels: Mapping | None = None, caption: str = "", label: str | None = None) -> str:
    """An :func:`accuracy_table` as a booktabs LaTeX table (:func:`table_cells`), its notes in the caption."""
    cells, notes = table_cells(table, by, digits, labels)
    return frame_to_latex(cells, index=False, caption=" ".join([caption, *notes]).strip(), label=label)


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

    Cells are the mean with its 95 % interval over seeds (:func:`ci_cell`: "95.24 ± 0.83"); a missing
    combination is "–".
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
            cells[(r[rows], r[columns], k)] = ci_cell(r, k, digits)
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


# symbols a table's text uses, as LaTeX writes them without a Unicode input encoding
_LATEX_SYMBOLS = str.maketrans({"±": r"$\pm$", "–": "--", "—": "---", "−": "$-$", "≥": r"$\geq$", "≤": r"$\leq$",
                                "ρ": r"$\rho$", "μ": r"$\mu$", "η": r"$\eta$", "β": r"$\beta$", "τ": r"$\tau$",
                                "φ": r"$\varphi$", "Σ": r"$\Sigma$", "×": r"$\times$"})


def _latex_escape(text) -> str:
    s = "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))
    return s.translate(_LATEX_SYMBOLS)


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
