"""Many methods at a glance: where a dozen curves on one axes are a tangle.

    >>> RankedAccuracyDisplay.from_runs(runs)               # one row per method, best first, every seed a dot
    >>> CurvePanelsDisplay.from_runs(groups, references)    # small multiples: one panel per group of methods

:class:`RankedAccuracyDisplay` ranks the methods by their mean final accuracy over seeds: each seed's run is
a dot, the mean a bar, so a gap smaller than the seeds' spread reads as one. :class:`CurvePanelsDisplay`
draws a few curves per panel (e.g. a method beside its ``+ALA`` version) over the same references (FedAvg,
Local) in grey, on shared axes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis import stats
from ..analysis.curves import ROUND_METRICS, accuracy_curves, unique_labels
from .base import Display, new_axes
from .style import OTHERS, colour_for, highlighted, styled_groups


def ranked_frame(runs, labels=None, metric: str = "final_acc") -> pd.DataFrame:
    """Tidy label, algo, seed, value (%) of ``metric`` ("final_acc" or "best_acc") per run; runs that share a
    label (a method over seeds) are one row of the ranking."""
    runs = list(runs)
    if labels is None:
        from ..config import algo_label

        labels = [algo_label(r.config.algo) for r in runs]
    rows = [{"label": lab, "algo": r.config.algo, "seed": r.config.seed, "value": r.summary()[metric]}
            for r, lab in zip(runs, labels, strict=True)]
    return pd.DataFrame(rows, columns=["label", "algo", "seed", "value"])


class RankedAccuracyDisplay(Display):
    """One row per label, ranked by the mean of its runs' values (best on top): every run a dot, the mean a
    vertical bar with its value written beside it, the 95 % interval of the mean over seeds as a line when there
    is one (:mod:`~fedala_lab.analysis.stats`)."""

    def __init__(self, frame: pd.DataFrame, *, metric: str = "final_acc", title: str | None = None,
                 highlight: int | None = None, keep=()):
        self.frame_ = frame
        self.metric = metric
        self.title = title
        self.highlight = highlight  # with more rows: the best few (and those in keep) in colour, the rest grey
        self.keep = tuple(keep)

    @classmethod
    def from_runs(cls, runs, *, labels=None, metric: str = "final_acc", ax=None, title: str | None = None,
                  highlight: int | None = None, keep=()):
        """Rank ``runs`` (labels: one per run; equal labels are one method over seeds)."""
        return cls(ranked_frame(runs, labels, metric), metric=metric, title=title, highlight=highlight,
                   keep=keep).plot(ax=ax)

    @property
    def ranking_(self) -> pd.DataFrame:
        """label, algo, n, mean, std, lo and hi (the 95 % interval: :func:`~fedala_lab.analysis.stats.interval`)
        over the runs of a label, best first."""
        g = self.frame_.groupby("label", sort=False)
        out = g.agg(algo=("algo", "first"), n=("value", "size"), mean=("value", "mean"), std=("value", "std"))
        ci = {lab: stats.interval(v) for lab, v in g["value"]}
        out["lo"], out["hi"] = [ci[lab]["ci_lo"] for lab in out.index], [ci[lab]["ci_hi"] for lab in out.index]
        return out.sort_values("mean", ascending=False, kind="stable").reset_index()

    def plot(self, ax=None):
        rank = self.ranking_
        fig, ax = new_axes(ax, figsize=(6.4, max(2.2, 0.32 * len(rank) + 1.1)))
        y = np.arange(len(rank))[::-1]  # best on top
        lo = self.frame_["value"].min() if len(self.frame_) else 0.0
        shown = set(highlighted(list(rank["label"]), self.highlight, self.keep))
        for yi, r in zip(y, rank.itertuples(index=False)):
            colour = colour_for(r.algo) if r.label in shown else OTHERS
            vals = self.frame_.loc[self.frame_["label"] == r.label, "value"]
            ax.scatter(vals, np.full(len(vals), yi), s=16, color=colour, alpha=0.6, zorder=3)
            if np.isfinite(r.lo):
                ax.hlines(yi, r.lo, r.hi, color=colour, lw=1.2, zorder=2)
            ax.vlines(r.mean, yi - 0.3, yi + 0.3, color=colour, lw=2.4, zorder=4)
            ax.annotate(stats.format_ci(r.mean, r.lo, r.hi), (vals.max(), yi),
                        xytext=(6, 0), textcoords="offset points", va="center", fontsize=8)
        ax.set_yticks(y, rank["label"])
        ax.set_ylim(-0.7, len(rank) - 0.3)
        ax.set_xlim(max(0.0, lo - 5), 100)
        n = int(rank["n"].max()) if len(rank) else 0
        what = "final" if self.metric == "final_acc" else "best"
        ax.set_xlabel(f"{what} test accuracy (%), pooled over clients"
                      + (f"; dots: {n} seeds, bar: their mean, line: its 95 % interval" if n > 1 else "; one seed"))
        ax.grid(True, axis="x")
        ax.set_title(self.title or f"Methods ranked by {what} accuracy")
        return self._drawn(fig, ax)


class CurvePanelsDisplay(Display):
    """Small multiples: one panel per group of runs, each drawn in its method's colour over the references
    in grey, all panels on the same axes."""

    def __init__(self, panels: dict[str, pd.DataFrame], references: pd.DataFrame, *, metric: str = "acc",
                 title: str | None = None):
        self.panels_ = panels
        self.references_ = references
        self.metric = metric
        self.title = title

    @classmethod
    def from_runs(cls, groups: dict, references=(), *, metric: str = "acc", title: str | None = None):
        """``groups``: {panel title: [(run, label), …]}; ``references``: [(run, label), …] drawn in every panel."""
        panels = {name: accuracy_curves([r for r, _ in pairs], metric, [lab for _, lab in pairs])
                  for name, pairs in groups.items()}
        refs = list(references)
        ref = accuracy_curves([r for r, _ in refs], metric, unique_labels([r for r, _ in refs], [lab for _, lab in refs]))
        return cls(panels, ref, metric=metric, title=title).plot()

    def plot(self):
        """A figure of its own (panels need one; there is no ``ax`` to draw into)."""
        from matplotlib.figure import Figure

        n = len(self.panels_)
        cols = min(3, max(n, 1))
        rows = -(-n // cols)
        fig = Figure(figsize=(3.6 * cols, 2.9 * rows + 0.4), layout="constrained")
        axes = np.atleast_1d(fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)).ravel()
        greys = ("0.45", "0.7")
        for a, (name, curves) in zip(axes, self.panels_.items()):
            for i, (label, df) in enumerate(self.references_.groupby("label", sort=False)):
                a.plot(df["round"], df["value"], color=greys[i % 2], lw=1.1, ls="--", label=str(label))
            for label, df, colour, ls in styled_groups(curves):
                a.plot(df["round"], df["value"], color=colour, ls=ls, lw=1.5, label=str(label))
            a.set_title(name)
            a.grid(True, alpha=0.3)
            a.legend(fontsize=7, loc="lower right")
        for a in axes[n:]:
            a.set_visible(False)
        for a in axes[::cols]:
            a.set_ylabel(ROUND_METRICS[self.metric])
        for a in axes[(rows - 1) * cols:]:
            a.set_xlabel("round")
        fig.suptitle(self.title or "Accuracy per round, a panel per method")
        return self._drawn(fig, list(axes[:n]))
