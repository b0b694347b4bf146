"""FedAvg against heterogeneity: one method on splits from IID to pathological, over seeds.

    >>> HeterogeneityDisplay.from_runs({"IID": runs_iid, "Dir(0.1)": runs_dir, "pathological": runs_pat})

Left: the best pooled test accuracy per split, mean over seeds with its 95 % interval (every seed drawn as a
dot). Right: the spread between clients (the std of their test accuracies in the last round), likewise. Computed by
:func:`~fedala_lab.analysis.tables.seed_table`; the splits are drawn in the order given.
"""

from __future__ import annotations

import numpy as np

from ..analysis.tables import final_spread, seed_table
from .base import Display, ci_yerr, panel_axes


class HeterogeneityDisplay(Display):
    """``frame_``: :func:`seed_table` of the groups (label, n_seeds, best/final/spread mean, std and interval);
    ``points_``: {label: (best accuracies %, spreads)} of the single runs."""

    def __init__(self, frame, points, *, title: str | None = None):
        self.frame_ = frame
        self.points_ = points
        self.title = title

    @classmethod
    def from_runs(cls, groups, ax=None, *, title: str | None = None):
        """``groups``: {split label: runs of one method that differ only in their seed}, in drawing order."""
        groups = {label: list(runs) for label, runs in groups.items()}
        points = {label: ([r.best_acc for r in runs], [final_spread(r) for r in runs])
                  for label, runs in groups.items()}
        return cls(seed_table(groups), points, title=title).plot(ax=ax)

    def plot(self, ax=None):
        fig, axes = panel_axes(ax, 2, (10.4, 3.8), error="the heterogeneity view draws into 2 axes, got {got}")
        f = self.frame_
        x = np.arange(len(f))
        for a, (key, ylabel) in zip(axes, (("best", "best pooled test accuracy (%)"),
                                          ("spread", "spread between clients (points)"))):
            yerr = ci_yerr(f, key)
            a.bar(x, f[f"{key}_mean"], yerr=yerr, color="0.75", edgecolor="black",
                  capsize=4, width=0.6, label="mean and 95 % interval over seeds")
            for i, label in enumerate(f["label"]):
                vals = self.points_[label][0 if key == "best" else 1]
                a.scatter(np.full(len(vals), i), vals, s=14, color="black", zorder=3,
                          label="one seed" if i == 0 else None)
                top = max(f[f"{key}_mean"].iloc[i] + yerr[1, i], max(vals, default=0))
                a.annotate(f"{f[f'{key}_mean'].iloc[i]:.1f}", (i, top), ha="center",  # above the error bar
                           va="bottom", xytext=(0, 4), textcoords="offset points", fontsize=8)
            a.set_xticks(x, f["label"])
            a.set_ylabel(ylabel)
            a.grid(True, axis="y")
        axes[0].set_ylim(0, 100)  # bars from 0: a cut axis would make a few points look like a fall by half
        # one legend for both panels, under them: inside, it sat on the first bar
        handles, labels = axes[0].get_legend_handles_labels()
        self.legend_ = fig.legend(handles, labels, loc="outside lower center", ncol=2, frameon=False)
        n = int(f["n_seeds"].max()) if len(f) else 0
        fig.suptitle(self.title or f"FedAvg as the clients' data drift apart ({n} seed(s) each)")
        return self._drawn(fig, axes)
