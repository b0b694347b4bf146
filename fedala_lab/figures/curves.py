"""Accuracy (or any per-round metric) over rounds, one line per run.

    >>> disp = AccuracyCurveDisplay.from_runs([fedavg_run, fedala_run])
    >>> disp.curves_          # tidy label, round, value (what was drawn)
    >>> disp.lines_           # one Line2D per run
"""

from __future__ import annotations

import pandas as pd

from ..analysis.curves import ROUND_METRICS, accuracy_curves
from .base import Display, new_axes
from .style import styled_groups


class AccuracyCurveDisplay(Display):
    """Per-round curves of one metric (``acc`` in %, losses as they are), one line per run."""

    def __init__(self, curves: pd.DataFrame, metric: str = "acc", title: str | None = None):
        self.curves_ = curves
        self.metric = metric
        self.title = title

    @classmethod
    def from_runs(cls, runs, metric: str = "acc", ax=None, *, labels=None, title: str | None = None):
        """Compute the curves of ``runs`` (labels: a list, a {run: label} dict, or the algorithm names)."""
        return cls(accuracy_curves(runs, metric, labels), metric, title).plot(ax=ax)

    def plot(self, ax=None):
        fig, ax = new_axes(ax, figsize=(6.4, 4.0))
        self.lines_ = []
        for label, df, colour, ls in styled_groups(self.curves_):
            (line,) = ax.plot(df["round"], df["value"], ls=ls, marker="o" if len(df) <= 30 else None, ms=3,
                              lw=1.4, color=colour, label=str(label))
            self.lines_.append(line)
        ax.set_xlabel("round")
        ax.set_ylabel(ROUND_METRICS[self.metric][0])
        ax.grid(True, alpha=0.3)
        if self.lines_:
            ax.legend(frameon=False)
        ax.set_title(self.title or f"{ROUND_METRICS[self.metric][0].split(' (')[0]} per round")
        return self._drawn(fig, ax)
