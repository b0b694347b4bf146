"""Fig. 5: the global objective of the initialised and of the trained local models, per round.

    >>> disp = ConvergenceDisplay.from_runs([fedavg_run, fedala_run])
    >>> disp.frame_, disp.gap_            # the curves drawn, and where they meet
    >>> ConvergenceDisplay(frame, gap).plot()                # draw precomputed data

For each run two lines in one colour: the sample-weighted train loss over all clients of the models
right after local initialisation (dashed) and after local training (solid). The paper's observation
(MNIST, 2,000 rounds): with ALA the two meet after about 1,000 rounds — the initialisation already holds
what local training would add.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis.curves import convergence_frame, convergence_gap
from .base import Display, new_axes
from .style import styled_groups


class ConvergenceDisplay(Display):
    """``frame``: :func:`~fedala_lab.analysis.curves.convergence_frame`; ``gap``: its
    :func:`~fedala_lab.analysis.curves.convergence_gap` (where the curves meet)."""

    def __init__(self, frame: pd.DataFrame, gap: pd.DataFrame, *, log: bool = True, title: str | None = None):
        self.frame_ = frame
        self.gap_ = gap
        self.log = log
        self.title = title

    @classmethod
    def from_runs(cls, runs, ax=None, *, labels=None, log: bool = True, title: str | None = None):
        frame = convergence_frame(runs, labels)
        gap = convergence_gap(frame) if len(frame) else pd.DataFrame()
        return cls(frame, gap, log=log, title=title).plot(ax=ax)

    def plot(self, ax=None):
        fig, ax = new_axes(ax, figsize=(6.4, 4.0))
        self.lines_ = []
        for label, df, c, _ in styled_groups(self.frame_):
            (a,) = ax.plot(df["round"], df["init_loss"], "--", lw=1.3, color=c, label=f"{label}: initialised")
            (b,) = ax.plot(df["round"], df["trained_loss"], "-", lw=1.3, color=c, label=f"{label}: trained")
            self.lines_ += [a, b]
        vals = self.frame_[["init_loss", "trained_loss"]].to_numpy(dtype=float)
        if self.log and len(vals) and np.nanmin(vals) > 0:
            ax.set_yscale("log")
        ax.set_xlabel("round")
        ax.set_ylabel("global objective (train loss, sample-weighted)")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(frameon=False, fontsize=8)
        ax.set_title(self.title or "Local models: after initialisation vs after training", fontsize=10)
        return self._drawn(fig, ax)
