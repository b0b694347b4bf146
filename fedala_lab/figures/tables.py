"""Accuracy tables in the paper's layout (Tables 2 and 7), as a DataFrame, Markdown, LaTeX or a figure.

    >>> t = AccuracyTable.from_runs(runs)                  # rows: methods; columns: settings (best, final)
    >>> t.frame_                                           # "mean ± 95 % interval" strings (%)
    >>> t.stats_                                           # the numbers behind them (std, p-values too)
    >>> print(t.to_markdown()); print(t.to_latex())
    >>> AccuracyTable.from_applicability(runs)             # ALA added to each method (Table 4), with the gain
    >>> AccuracyTable.from_costs(runs)                     # seconds and models sent per round (Table 3)

The paper reports the best round's pooled accuracy, mean ± std over 5 runs; we show the final round's
too (``which="both"``), since the best round flatters methods that overfit (docs/design.md#federated-loop), and
± is the 95 % interval of the mean over seeds (docs/comparing.md), as every caption says.
"""

from __future__ import annotations

import pandas as pd

from ..analysis import stats as st
from ..analysis.ablation import applicability_frame
from ..analysis.tables import (
    accuracy_table,
    ci_cell,
    cost_table,
    frame_to_latex,
    frame_to_markdown,
    layout_table,
    runs_frame,
    setting_label,
)
from ..config import algo_label
from .base import Display, new_axes


class AccuracyTable(Display):
    """A table of text cells (``frame_``) with the numbers it came from (``stats_``)."""

    def __init__(self, frame: pd.DataFrame, stats: pd.DataFrame | None = None, *, title: str | None = None,
                 caption: str | None = None):
        self.frame_ = frame
        self.stats_ = stats
        self.title = title
        self.caption = caption

    @classmethod
    def from_runs(cls, runs, by=("algo",), *, which: str = "both", digits: int = 2, title: str | None = None,
                  ax=None, plot: bool = True):
        """Group ``runs`` by ``by`` (+ their data setting) and lay them out: rows = the ``by`` values
        (method names), columns = settings (dataset and partition), cells = mean ± the 95 % interval over seeds
        of the accuracy (``which`` best, final or both) or of the pooled test AUC (``which="auc"``: best and final).
        ``stats_`` holds the numbers, and each method against FedAvg in its setting, paired by seed (the
        ``best_diff``, ``best_p_holm`` … columns of :func:`~fedala_lab.analysis.tables.accuracy_table`)."""
        runs = list(runs)
        by = list(by)
        df = runs_frame(runs, by)
        df["setting"] = [setting_label(r.config) for r in runs]
        stats = accuracy_table(df, by=[*by, "setting"])
        if len(by) == 1:
            stats["row"] = stats[by[0]].map(lambda v: algo_label(v) if by[0] == "algo" else f"{by[0]}={v}")
        else:
            stats["row"] = stats[by].astype(str).agg(", ".join, axis=1)
        frame = layout_table(stats, rows="row", columns="setting", which=which, digits=digits)
        frame.index.name = "method" if by == ["algo"] else ", ".join(by)
        n = stats["n_seeds"]
        seeds = f"{int(n.min())}" if n.min() == n.max() else f"{int(n.min())}–{int(n.max())}"
        what = "Test AUC (%)" if which == "auc" else "Test accuracy (%)"
        pooled = ("each client's micro-averaged AUC weighted by its test samples" if which == "auc"
                  else "pooled over clients")
        cap = f"{what}, {pooled}, mean over {seeds} seed(s); best round and final round. " + st.CI_NOTE
        t = cls(frame, stats, title=title or what, caption=cap)
        return t.plot(ax=ax) if plot else t

    @classmethod
    def from_applicability(cls, runs, *, which: str = "best", digits: int = 2, title: str | None = None,
                           ax=None, plot: bool = True):
        """ALA added to each method present with its +ALA run (the paper's Table 4): accuracy without, with, and
        the gain (percentage points: +ALA minus the base run of the same seed) with its p (paired t, Holm-adjusted
        over the rows)."""
        stats = applicability_frame(runs, which=which)
        rows = stats.to_dict("records")
        frame = pd.DataFrame({
            "base": [ci_cell(r, "base", digits) for r in rows], "+ALA": [ci_cell(r, "ala", digits) for r in rows],
            "gain": [ci_cell(r, "gain", digits, sign=True) for r in rows],
            "p": [st.format_p(r["p_holm"]) for r in rows],
        }, index=pd.Index([algo_label(b) for b in stats["base"]], name="method"))
        cap = (f"ALA added to a base method: test accuracy (%) at the {which} round, mean over "
               f"{int(stats['n_seeds'].min())} seed(s), and the gain in percentage points (+ALA minus the base run "
               "of the same seed), p: paired t over seeds, Holm-adjusted over the rows. " + st.CI_NOTE)
        t = cls(frame, stats, title=title or "Applicability of ALA", caption=cap)
        return t.plot(ax=ax) if plot else t

    @classmethod
    def from_costs(cls, runs, *, title: str | None = None, ax=None, plot: bool = True):
        """Computation and communication per round of each method (the paper's Table 3), measured: seconds of
        the method's work in a normal round and its phases, evaluation apart, the ALA start phase's extra time,
        and the models a client sends up and receives per round (Σ = one model), beside the paper's notation."""
        stats = cost_table(runs)
        frame = pd.DataFrame({
            "method s / round": [f"{v:.3f}" for v in stats["method_seconds"]],
            "local init s": [f"{v:.3f}" for v in stats["init_seconds"]],
            "train s": [f"{v:.3f}" for v in stats["train_seconds"]],
            "eval s": [f"{v:.3f}" for v in stats["eval_seconds"]],
            "start phase +s": [f"{v:.2f}" for v in stats["start_phase_seconds"]],
            "up (Σ)": [f"{v:.3f}" for v in stats["up"]],
            "down (Σ)": [f"{v:.3f}" for v in stats["down"]],
            "paper": list(stats["formula"]),
        }, index=pd.Index(list(stats["label"]), name="method"))
        cap = ("Per round, mean over runs (seconds: rounds 3 on; the start phase: round 2's extra time). Method: "
               "local initialisation + training + aggregation. Evaluation apart: it holds what a method does to "
               "its models before they are evaluated (FedAvg-C's fine-tuning epoch, Per-FedAvg's step) and, in "
               "runs that record them, Fig. 5's two passes over the training data. Up: "
               "models a client that trained sent; down: models a client received, over all clients; Σ = one "
               "model's bytes. Wall-clock seconds depend on the machine and its load.")
        t = cls(frame, stats, title=title or "Computation and communication per round", caption=cap)
        return t.plot(ax=ax) if plot else t

    def to_markdown(self) -> str:
        """GitHub Markdown (no optional dependency)."""
        out = frame_to_markdown(self.frame_)
        return (f"{out}\n{self.caption}\n") if self.caption else out

    def to_latex(self, label: str | None = None) -> str:
        """A booktabs table (``\\usepackage{booktabs}``)."""
        return frame_to_latex(self.frame_, caption=self.caption, label=label)

    def plot(self, ax=None):
        nrows, ncols = self.frame_.shape
        fig, ax = new_axes(ax, figsize=(min(2.0 + 1.8 * ncols, 16), 0.9 + 0.32 * (nrows + 1)))
        ax.set_axis_off()
        cells = self.frame_.astype(str).to_numpy().tolist()
        self.table_ = ax.table(cellText=cells, rowLabels=[str(i) for i in self.frame_.index],
                               colLabels=[str(c) for c in self.frame_.columns], loc="center", cellLoc="center")
        self.table_.auto_set_font_size(False)
        self.table_.set_fontsize(9)
        self.table_.scale(1.0, 1.35)
        for (r, c), cell in self.table_.get_celld().items():
            if r == 0 or c == -1:
                cell.set_text_props(weight="bold")
                cell.set_facecolor("#eef2f7")
        ax.set_title(self.title, fontsize=11)
        if self.caption:
            ax.text(0.5, 0.0, self.caption, transform=ax.transAxes, ha="center", va="top", fontsize=7.5,
                    wrap=True, color="0.3")
        return self._drawn(fig, ax)
