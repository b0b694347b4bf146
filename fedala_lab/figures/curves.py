"""Accuracy (or any per-round metric) over rounds, one line per run.

    >>> disp = AccuracyCurveDisplay.from_runs([fedavg_run, fedala_run])
    >>> disp.curves_          # tidy label, round, value (what was drawn)
    >>> disp.lines_           # one Line2D per run
    >>> AccuracyCurveDisplay.from_runs(many_runs, highlight=3)   # the 3 best in colour, the others grey
"""

from __future__ import annotations

import textwrap

import pandas as pd

from ..analysis.curves import ROUND_METRICS, accuracy_curves
from .base import Display, new_axes
from .style import OTHERS, highlighted, legend_below, styled_groups

LONG_LABEL = 28  # characters: a legend with a longer label goes under the axes


class AccuracyCurveDisplay(Display):
    """Per-round curves of one metric (``acc`` in %, losses as they are), one line per run."""

    def __init__(self, curves: pd.DataFrame, metric: str = "acc", title: str | None = None, *,
                 marks: dict | None = None, highlight: int | None = None, keep=()):
        self.curves_ = curves
        self.metric = metric
        self.title = title
        self.marks = dict(marks or {})  # x → text: a vertical line with its text (e.g. where ALA switches on)
        # with more curves than this: the `highlight` best by last value (and the labels in `keep`) in colour,
        # the others thin and grey, named in one legend entry
        self.highlight = highlight
        self.keep = tuple(keep)

    @classmethod
    def from_runs(cls, runs, metric: str = "acc", ax=None, *, labels=None, title: str | None = None,
                  marks: dict | None = None, highlight: int | None = None, keep=()):
        """Compute the curves of ``runs`` (labels: a list, a {run: label} dict, or the algorithm names)."""
        return cls(accuracy_curves(runs, metric, labels), metric, title, marks=marks, highlight=highlight,
                   keep=keep).plot(ax=ax)

    @property
    def highlighted_(self) -> list:
        """The labels drawn in colour: all, or the ``highlight`` best by their last value plus ``keep``."""
        labels = list(dict.fromkeys(self.curves_["label"]))
        last = self.curves_.groupby("label", sort=False)["value"].last()
        best = last.sort_values(ascending=self.metric != "acc" and "acc" not in self.metric).index
        chosen = set(highlighted(list(best), self.highlight, self.keep))
        return [lab for lab in labels if lab in chosen]

    def plot(self, ax=None):
        fig, ax = new_axes(ax, figsize=(6.4, 4.0))
        self.lines_ = []
        groups = styled_groups(self.curves_)
        dots = max((len(df) for _, df, _, _ in groups), default=0) <= 30  # markers on every curve, or on none
        shown = set(self.highlighted_)
        rest = [label for label, *_ in groups if label not in shown]
        for label, df, colour, ls in groups:
            if label in shown:
                (line,) = ax.plot(df["round"], df["value"], ls=ls, marker="o" if dots else None, ms=3,
                                  lw=1.6 if rest else 1.4, color=colour, label=str(label), zorder=3)
            else:  # one legend entry for all of them, on the first
                (line,) = ax.plot(df["round"], df["value"], lw=0.8, color=OTHERS, zorder=2,
                                  label=f"{len(rest)} others (grey)" if label == rest[0] else "_nolegend_")
            self.lines_.append(line)
        self.mark_lines_ = []
        rounds = self.curves_["round"] if len(self.curves_) else pd.Series([0, 1])
        middle = (rounds.min() + rounds.max()) / 2
        for x, text in self.marks.items():
            self.mark_lines_.append(ax.axvline(x, color="0.35", ls=":", lw=1.2))
            left = x > middle  # the text on the side with room, inside the axes
            ax.annotate(text, (x, 0.02), xycoords=("data", "axes fraction"), xytext=(-4 if left else 4, 0),
                        textcoords="offset points", ha="right" if left else "left", va="bottom", fontsize=8,
                        color="0.25")
        ax.set_xlabel("round")
        ax.set_ylabel(ROUND_METRICS[self.metric])
        ax.grid(True, alpha=0.3)
        named = [line.get_label() for line in self.lines_ if not line.get_label().startswith("_")]
        if named and max(len(n) for n in named) > LONG_LABEL:
            # long labels (the Runs tab names each run's settings): under the axes, where they cover no curve
            # and no axis label, one or two columns as the figure's width allows
            for line in self.lines_:
                line.set_label(textwrap.fill(line.get_label(), 70))
            legend_below(ax, [line for line in self.lines_ if not line.get_label().startswith("_")], 2, fontsize=8)
        elif named:
            ax.legend(frameon=False, fontsize=8)
        ax.set_title(self.title or f"{ROUND_METRICS[self.metric].split(' (')[0]} per round")
        return self._drawn(fig, ax)
