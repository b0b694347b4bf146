"""Fig. 4: local trajectories of one client on its local loss surface, FedAvg vs FedALA.

    >>> disp = TrajectoryDisplay.from_runs(fedavg_run, fedala_run, client=4, rounds=(25, 50))
    >>> disp.landscape_.summary()         # final local loss of each run, off-plane residuals
    >>> TrajectoryDisplay(landscape).plot()                  # draw precomputed data (fast, for the app)

Drawn as in the paper: contours of the client's local loss on the plane of the two principal
components of all recorded local models (axes "C1: xx.xx %" with the explained variance); a red circle
marks each round's start (the model after local initialisation), a green square its end (after local
training); arrows join them in order (FedAvg black, FedALA blue; the rounds both runs share, before ALA is
switched on, once in grey). The models lie off the plane, so the
contour under a marker is not its loss: the legend gives each run's true final local loss and the
largest distance of its models from the plane (see :mod:`fedala_lab.analysis.landscape`).
"""

from __future__ import annotations

import numpy as np

from ..analysis.landscape import Landscape, compute_landscape
from ..config import algo_label
from .base import Display, new_axes
from .style import legend_columns, line_styles, method_of


class TrajectoryDisplay(Display):
    """``shared_through=K``: the runs are one run through round K (the Fig. 4 protocol, ALA on after K), so
    those rounds are drawn once, in grey, and each run's own colour starts where they part (the arrow from
    the end of round K to the start of round K + 1)."""

    def __init__(self, landscape: Landscape, *, title: str | None = None, shared_through: int | None = None):
        self.landscape_ = landscape
        self.title = title
        self.shared_through = shared_through

    @classmethod
    def from_runs(cls, fedavg_run, fedala_run, client: int, *, grid: int = 21, rounds=None,
                  num_samples: int | None = 256, margin: float = 0.2, labels=None,
                  device="cpu", progress: bool = False, ax=None, title: str | None = None):
        """Compute the landscape and draw it (``TrajectoryDisplay(landscape).plot()`` draws a precomputed one).

        ``rounds``: (first, last) window of snapshot rounds (default: all recorded). ``grid``: points per
        axis; the surface costs grid² forward passes of ``num_samples`` rows (a 21×21 grid of the teach
        MLP takes about a second on a laptop CPU). ``labels``: the two runs' names (default: the algorithms').
        The rounds the two runs share (FedALA's ``ala_after``) are drawn once.
        """
        labels = labels or (algo_label("fedavg"), algo_label("fedala"))
        landscape = compute_landscape({labels[0]: fedavg_run, labels[1]: fedala_run}, client, rounds=rounds,
                                      grid=grid, margin=margin, num_samples=num_samples, device=device,
                                      progress=progress)
        cfg = fedala_run.config
        shared = cfg.ala_after if cfg.algorithm.uses("ala") and cfg.ala_after > 0 else None
        return cls(landscape, title=title, shared_through=shared).plot(ax=ax)

    def plot(self, ax=None, *, levels: int = 14, cmap: str = "viridis"):
        ls = self.landscape_
        fig, ax = new_axes(ax, figsize=(6.6, 5.8))
        z = ls.loss
        zmin, zmax = float(np.nanmin(z)), float(np.nanmax(z))
        if zmin > 0 and zmax / zmin > 20:  # a deep valley: log-spaced levels show both rim and floor
            from matplotlib.colors import LogNorm

            lv = np.geomspace(zmin, zmax, levels + 1)
            norm = LogNorm(zmin, zmax)
        else:
            lv = np.linspace(zmin, zmax if zmax > zmin else zmin + 1e-9, levels + 1)
            norm = None
        X, Y = np.meshgrid(ls.xs, ls.ys)
        self.contourf_ = ax.contourf(X, Y, z, levels=lv, cmap=cmap, norm=norm, alpha=0.85)
        self.contour_ = ax.contour(X, Y, z, levels=lv, colors="white", linewidths=0.5, alpha=0.6)
        self.colorbar_ = fig.colorbar(self.contourf_, ax=ax, label=f"local loss of client {ls.client} "
                                                                  f"({ls.split}, {ls.num_samples} samples)")
        self.colorbar_.ax.yaxis.set_major_formatter(_plain_formatter())
        self.colorbar_.ax.yaxis.set_minor_formatter(_plain_formatter())

        self.arrows_, self.start_markers_, self.end_markers_ = [], [], []
        colours = [c for c, _ in line_styles([method_of(t.algo, t.label) for t in ls.trajectories])]
        K = self.shared_through
        self.shared_arrows_ = None
        from matplotlib.lines import Line2D

        handles = []
        for i, t in enumerate(ls.trajectories):
            own = np.ones(len(t.rounds), bool) if K is None else t.rounds > K
            first = int(np.argmax(own)) if own.any() else len(t.rounds)  # index of the run's first own round
            p = t.path()
            if first > 0 and i == 0:  # the shared rounds, once (every run holds the same models there)
                self.shared_arrows_ = self._arrows(ax, p[:2 * first], SHARED)
                self._markers(ax, t.start_xy[:first], t.end_xy[:first], SHARED)
                handles.append(Line2D([], [], color=SHARED, lw=2,
                                      label=f"rounds ≤ {K}: both runs (FedAvg, ALA off)"))
            q = self._arrows(ax, p[max(0, 2 * first - 1):], colours[i])
            s_, e_ = self._markers(ax, t.start_xy[first:], t.end_xy[first:], colours[i])
            self.arrows_.append(q)
            self.start_markers_.append(s_)
            self.end_markers_.append(e_)
            after = f"after round {K}, " if K is not None and first > 0 else ""
            handles.append(Line2D([], [], color=colours[i], lw=2,
                                  label=f"{t.label} ({after}final local loss {t.end_loss[-1]:.3g}, "
                                        f"off-plane ≤ {t.max_residual:.2g})"))
        # legend: one entry per run (arrow colour) and one per marker meaning
        handles += [Line2D([], [], ls="", marker="o", color="tab:red", label="start of round (initialised)"),
                    Line2D([], [], ls="", marker="s", color="tab:green", label="end of round (trained)")]
        # below the axes: inside, it would hide the trajectories it explains
        # under the figure, centred on it (under the axes alone, beside the colour bar, long labels stuck out)
        self.legend_ = ax.figure.legend(handles=handles, loc="outside lower center", fontsize=7.5, frameon=False,
                                        ncol=legend_columns([h.get_label() for h in handles],
                                                            fig.get_size_inches()[0], 2))
        ev = ls.explained_variance
        ax.set_xlabel(f"C1: {100 * ev[0]:.2f} %")
        ax.set_ylabel(f"C2: {100 * ev[1]:.2f} %")
        ax.set_xlim(ls.xs[0], ls.xs[-1])
        ax.set_ylim(ls.ys[0], ls.ys[-1])
        ax.set_title(self.title or f"Local trajectory of client {ls.client}, rounds {ls.rounds[0]}–{ls.rounds[1]} "
                                   f"(origin: last {ls.anchor_label} model)", fontsize=10)
        return self._drawn(fig, ax)


    @staticmethod
    def _arrows(ax, p, colour):
        if len(p) < 2:
            return None
        d = np.diff(p, axis=0)
        return ax.quiver(p[:-1, 0], p[:-1, 1], d[:, 0], d[:, 1], angles="xy", scale_units="xy", scale=1,
                         color=colour, width=0.004, headwidth=4, headlength=5, headaxislength=4.5, zorder=3)

    @staticmethod
    def _markers(ax, start_xy, end_xy, colour):
        s = ax.scatter(start_xy[:, 0], start_xy[:, 1], s=26, marker="o", facecolors="tab:red", edgecolors=colour,
                       linewidths=0.8, zorder=4)
        e = ax.scatter(end_xy[:, 0], end_xy[:, 1], s=26, marker="s", facecolors="tab:green", edgecolors=colour,
                       linewidths=0.8, zorder=4)
        return s, e


SHARED = "0.55"  # grey: the rounds both runs share


def _plain_formatter():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: f"{v:.3g}")
