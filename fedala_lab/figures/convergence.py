"""Fig. 5: the global objective of the initialised and of the trained local models, per round.

    >>> disp = ConvergenceDisplay.from_runs([fedavg_run, fedala_run])
    >>> disp.frame_, disp.gap_            # the curves drawn, and where they meet
    >>> ConvergenceDisplay(frame, gap).plot()                # draw precomputed data

For each run two lines in one colour: the sample-weighted train loss over all clients of the models
right after local initialisation (dashed) and after local training (solid). The paper's observation
(MNIST, 2,000 rounds): with ALA the two meet after about 1,000 rounds — the initialisation already holds
what local training would add.

``per_client=True`` adds a second panel: the median and interquartile band of the clients' own trained
losses (unweighted, so no single client decides them), and for each run the client that accounts for the
largest share of the weighted curve's round-to-round variance drawn apart, with its share. A weighted mean
is readable only when no client dominates it: on the teach preset one client with 31 train samples decides
FedALA's curve for a hundred rounds (docs/design.md#federated-loop).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis.curves import client_spread, convergence_frame, convergence_gap, top_clients
from .base import Display, new_axes, panel_axes
from .style import styled_groups


class ConvergenceDisplay(Display):
    """``frame``: :func:`~fedala_lab.analysis.curves.convergence_frame`; ``gap``: its
    :func:`~fedala_lab.analysis.curves.convergence_gap` (where the curves meet)."""

    def __init__(self, frame: pd.DataFrame, gap: pd.DataFrame, *, log: bool = True, title: str | None = None,
                 spread: pd.DataFrame | None = None, top: pd.DataFrame | None = None):
        self.frame_ = frame
        self.gap_ = gap
        self.log = log
        self.title = title
        self.spread_ = spread  # label, round, median, q25, q75 of the clients' trained losses (per_client)
        self.top_ = top  # label, client, share, train_size, first, last, round, loss: each run's top client

    @classmethod
    def from_runs(cls, runs, ax=None, *, labels=None, log: bool = True, title: str | None = None,
                  per_client: bool = False):
        """``per_client``: add the per-client panel (``ax`` then is None, a single Axes split in two, or two)."""
        runs = list(runs)
        frame = convergence_frame(runs, labels)
        gap = convergence_gap(frame) if len(frame) else pd.DataFrame()
        spread = top = None
        if per_client:
            spread, top = client_spread(runs, labels=labels), top_clients(runs, labels=labels)
        return cls(frame, gap, log=log, title=title, spread=spread, top=top).plot(ax=ax)

    def plot(self, ax=None):
        if self.spread_ is None:
            fig, ax = new_axes(ax, figsize=(6.4, 4.0))
            self._mean_panel(ax)
            return self._drawn(fig, ax)
        fig, axes = panel_axes(ax, 2, (12.4, 4.4), error="the per-client view draws into 2 axes, got {got}")
        self._mean_panel(axes[0])
        self._client_panel(axes[1])
        return self._drawn(fig, axes)

    def _client_panel(self, ax):
        self.bands_, self.medians_, self.top_lines_ = [], [], []
        for label, df, c, _ in styled_groups(self.spread_):
            self.bands_.append(ax.fill_between(df["round"], df["q25"], df["q75"], color=c, alpha=0.18, lw=0,
                                               label=f"{label}: clients' interquartile range"))
            (m,) = ax.plot(df["round"], df["median"], "-", lw=1.3, color=c, label=f"{label}: median client")
            self.medians_.append(m)
            top = self.top_[self.top_["label"] == label] if self.top_ is not None and len(self.top_) else []
            if len(top):
                t = top.iloc[0]
                (line,) = ax.plot(top["round"], top["loss"], ":", lw=0.9, color=c, alpha=0.9,
                                  label=(f"{label}: client {int(t['client'])} ({int(t['train_size'])} train samples), "
                                         f"{100 * t['share']:.1f} % of the mean's round-to-round variance"))
                self.top_lines_.append(line)
        vals = self.spread_[["q25", "median", "q75"]].to_numpy(dtype=float)
        if self.log and len(vals) and np.nanmin(vals) > 0:
            ax.set_yscale("log")
            ax.set_ylim(bottom=np.nanmin(vals) / 20)  # a decade and more of room for the legend below the curves
        ax.set_xlabel("round")
        ax.set_ylabel("trained local model's train loss, per client")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(frameon=False, fontsize=7, loc="lower left")  # the corner the falling curves leave empty
        ax.set_title("Per client: median, interquartile band, the client that moves the mean most", fontsize=10)

    def _mean_panel(self, ax):
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
