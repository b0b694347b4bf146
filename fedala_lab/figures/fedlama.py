"""FedLAMA figures: the interval rule (paper Fig. 1), accuracy against communication (Tables 1–4), and the
per-layer interval timeline.

    >>> runs = comparison_runs(preset("teach-fedlama"), store="runs")        # experiments/runs.py
    >>> FedLAMACurvesDisplay.from_run(runs["FedLAMA(τ0=5, φ=2)"])
    >>> CommAccuracyDisplay.from_runs(runs).frame_                          # the table it draws
    >>> IntervalTimelineDisplay.from_run(runs["FedLAMA(τ0=5, φ=2)"])

Displays draw what analysis/fedlama.py computed; they compute nothing themselves. All of them as files:
``fedala_lab.reproduce.fedlama_figures``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis import fedlama as lama
from .base import Display, new_axes
from .style import legend_below, line_styles, method_of

_MAX_NAMED_LAYERS = 16  # beyond this, layer names on an axis become unreadable: show ranks / indices


def layer_label(name: str) -> str:
    """A parameter tensor's name as a reader says it: "fc1.1.weight" → "fc1 weight" (the numbers are positions
    inside a block's ``nn.Sequential``, which say nothing on a slide)."""
    parts = [p for p in str(name).split(".") if not p.isdigit()]
    return " ".join([".".join(parts[:-1]), parts[-1]]) if len(parts) > 1 else ".".join(parts)


class FedLAMACurvesDisplay(Display):
    """δ_l and 1 − λ_l against the number l of lowest-discrepancy layers given φ·τ0 (FedLAMA Fig. 1).

    ``curves``: the frame of :func:`fedala_lab.analysis.fedlama.lama_curves` (n_long, layer, delta,
    one_minus_lambda, long). The chosen l (the number of layers given the long interval) is where δ_l
    meets 1 − λ_l; it is marked with a vertical line.
    """

    def __init__(self, curves: pd.DataFrame, *, tau0: int | None = None, phi: int | None = None,
                 title: str | None = None):
        self.curves_ = curves.reset_index(drop=True)
        self.n_long_ = int(curves["long"].sum())
        self.round_ = int(curves["round"].iloc[0]) if len(curves) else None
        self.tau0, self.phi, self.title = tau0, phi, title

    @classmethod
    def from_run(cls, run, round_: int | None = None, *, ax=None, title: str | None = None):
        """Curves of the re-assignment at ``round_`` (the last one if None) of a FedLAMA run."""
        disp = cls(lama.lama_curves(run, round_), tau0=run.config.tau0, phi=run.config.phi, title=title)
        return disp.plot(ax=ax)

    def plot(self, ax=None):
        c = self.curves_
        n_layers = len(c) - 1
        fig, ax = new_axes(ax, figsize=(max(5.5, 0.45 * n_layers + 3), 4.2))
        x = c["n_long"].to_numpy()
        self.line_delta_, = ax.plot(x, c["delta"], "o-", color="tab:red", label="δ_l  (share of discrepancy)")
        self.line_lambda_, = ax.plot(x, c["one_minus_lambda"], "s-", color="tab:blue",
                                     label="1 − λ_l  (share of parameters still at τ0)")
        long_txt = (f"{self.n_long_} layer{'s' if self.n_long_ != 1 else ''} get φ·τ0"
                    + (f" = {self.phi * self.tau0} steps" if self.phi and self.tau0 else ""))
        self.chosen_ = ax.axvline(self.n_long_, color="0.3", ls="--", lw=1, label=long_txt)
        ax.set_xlabel("l: number of lowest-discrepancy layers given the long interval")
        ax.set_ylabel("fraction")
        ax.set_ylim(-0.03, 1.03)
        ax.set_xticks(x)
        if 0 < n_layers <= _MAX_NAMED_LAYERS:
            ax.set_xticklabels(["0"] + [f"{i}\n{layer_label(n)}" for i, n in zip(x[1:], c["layer"].iloc[1:])],
                               fontsize=7)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper center", fontsize=8, frameon=True, framealpha=0.9)
        ax.set_title(self.title or f"FedLAMA interval rule at round {self.round_} (layers sorted by d_l)")
        return self._drawn(fig, ax)


class CommAccuracyDisplay(Display):
    """Accuracy against communication in % of FedAvg(τ0)'s (FedLAMA Tables 1–4, drawn as curves).

    One line per run over its synchronised rounds (x: what had been sent before the evaluation, y: pooled
    accuracy), a marker on it where the final (or best) accuracy of the table was read; the legend gives each
    run's whole upload in % of FedAvg(τ0)'s; ``frame_`` is the table (one row per run, see
    :func:`fedala_lab.analysis.fedlama.comm_accuracy_frame`), ``to_markdown()`` prints it.
    """

    def __init__(self, frame: pd.DataFrame, curves: pd.DataFrame, *, metric: str = "final",
                 title: str | None = None):
        if metric not in ("final", "best"):
            from ..errors import ConfigError

            raise ConfigError("metric", metric, "final or best")
        self.frame_, self.curves_, self.metric, self.title = frame, curves, metric, title

    @classmethod
    def from_runs(cls, runs, *, reference: str | None = None, metric: str = "final", ax=None,
                  title: str | None = None):
        """``runs``: {label: Run} (e.g. from experiments' comparison_runs) or Runs; ``reference``: FedAvg(τ0)'s
        label."""
        frame, curves = lama.comm_accuracy(runs, reference=reference)
        return cls(frame, curves, metric=metric, title=title).plot(ax=ax)

    def plot(self, ax=None):
        fig, ax = new_axes(ax, figsize=(7.2, 4.8))
        col = f"{self.metric}_acc"
        self.lines_ = []
        self.markers_ = []
        styles = line_styles(self.frame_["algo"] if "algo" in self.frame_ else self.frame_["label"].map(method_of))
        for row, (color, ls) in zip(self.frame_.itertuples(index=False), styles):
            cur = self.curves_[self.curves_["label"] == row.label]
            line, = ax.plot(cur["comm_pct"], cur["acc"], ls=ls, color=color, lw=1.3, alpha=0.8,
                            label=f"{row.label}: uploads {row.comm_pct:.0f} %, {self.metric} {getattr(row, col):.2f} %")
            # the dot lies on the curve: where the accuracy was read, at what had been sent by then
            x = getattr(row, f"{self.metric}_comm_pct", row.comm_pct)
            mk = ax.scatter([x], [getattr(row, col)], s=60, color=color, edgecolors="black", zorder=3)
            self.lines_.append(line)
            self.markers_.append(mk)
        ax.set_xlabel("communication sent so far (% of FedAvg(τ0)'s total upload, per client)")
        ax.set_ylabel("pooled test accuracy (%)")
        lo = float(np.nanpercentile(self.curves_["acc"], 20)) if len(self.curves_) else 0.0
        hi = float(np.nanmax(self.curves_["acc"])) if len(self.curves_) else 100.0
        ax.set_ylim(max(0.0, lo - 2), min(100.0, hi + 1.5))
        ax.grid(True, alpha=0.3)
        # below the axes: inside, it would cover the curves' ends, where the comparison is read
        legend_below(ax, ax.get_legend_handles_labels()[0], 1, fontsize=8)
        ax.set_title(self.title or "Accuracy vs communication (same local SGD steps)")
        return self._drawn(fig, ax)

    def to_markdown(self) -> str:
        """The paper's table layout: method, τ0, φ, accuracy, communication (% of FedAvg(τ0))."""
        f = self.frame_
        lines = ["| method | local steps/round | φ | accuracy (%) | best (%) | communication (% of FedAvg(τ0)) |",
                 "|---|---:|---:|---:|---:|---:|"]
        for r in f.itertuples(index=False):
            lines.append(f"| {r.label} | {r.steps_per_round} | {r.phi} | {r.final_acc:.2f} | {r.best_acc:.2f} "
                         f"| {r.comm_pct:.1f} |")
        return "\n".join(lines)


class IntervalTimelineDisplay(Display):
    """Per-layer aggregation interval over rounds (heatmap: τ0 or φ·τ0), with the unit discrepancies d_l.

    ``timeline``: layers × rounds of τ_l in steps (:func:`interval_timeline`); ``discrepancy``: the tidy
    d_l at each synchronisation (:func:`discrepancy_frame`), drawn below on a log scale when given and no
    ``ax`` is passed.
    """

    def __init__(self, timeline: pd.DataFrame, discrepancy: pd.DataFrame | None = None, *, tau0: int,
                 phi: int, comm_pct: float | None = None, title: str | None = None):
        self.timeline_, self.discrepancy_ = timeline, discrepancy
        self.tau0, self.phi, self.comm_pct, self.title = tau0, phi, comm_pct, title

    @classmethod
    def from_run(cls, run, *, ax=None, discrepancy: bool = True, title: str | None = None):
        com = lama.communication(run)
        disp = cls(lama.interval_timeline(run), lama.discrepancy_frame(run) if discrepancy else None,
                   tau0=run.config.tau0, phi=run.config.phi, comm_pct=com["percent_of_fedavg"], title=title)
        return disp.plot(ax=ax)

    def plot(self, ax=None):
        from matplotlib.colors import BoundaryNorm, ListedColormap

        tl = self.timeline_
        n_layers = tl.shape[0]
        two = self.discrepancy_ is not None and ax is None
        height = max(3.0, 0.28 * n_layers + 1.6)
        if two:
            fig, axes = new_axes(None, figsize=(8.0, height + 3.0), nrows=2, ncols=1)
            ax, ax_d = axes
        else:
            fig, ax = new_axes(ax, figsize=(8.0, height))
            ax_d = None
        r = tl.columns.to_numpy()
        levels = tl.to_numpy(dtype=float) / self.tau0  # 1 or φ
        cmap = ListedColormap(["#d9d9d9", "tab:green"])
        norm = BoundaryNorm([0.5, 1.5, max(self.phi, 2) + 0.5], 2)
        self.image_ = ax.imshow(levels, aspect="auto", interpolation="nearest", cmap=cmap, norm=norm,
                                extent=(r.min() - 0.5, r.max() + 0.5, n_layers - 0.5, -0.5))
        self.colorbar_ = fig.colorbar(self.image_, ax=ax, ticks=[1, (1.5 + max(self.phi, 2) + 0.5) / 2])
        self.colorbar_.ax.set_yticklabels([f"τ0 = {self.tau0}", f"φ·τ0 = {self.phi * self.tau0}"])
        self.colorbar_.set_label("interval (local steps)")
        ax.set_yticks(range(n_layers))
        if n_layers <= 40:
            ax.set_yticklabels([layer_label(n) for n in tl.index], fontsize=7)
        ax.set_xlabel("round (one round = τ0 local steps)")
        ax.set_ylabel("layer (parameter tensor)")
        comm = f": {self.comm_pct:.1f} % of FedAvg(τ0)'s communication" if self.comm_pct is not None else ""
        ax.set_title(self.title or f"FedLAMA(τ0={self.tau0}, φ={self.phi}) interval per layer{comm}")
        self.discrepancy_lines_ = []
        if ax_d is not None:
            d = self.discrepancy_
            for i, (name, g) in enumerate(d.groupby("layer", sort=False)):
                line, = ax_d.plot(g["round"], g["d"], lw=1, color=f"C{i % 10}",
                                  label=layer_label(name) if n_layers <= _MAX_NAMED_LAYERS else None)
                self.discrepancy_lines_.append(line)
            if (d["d"] > 0).any():
                ax_d.set_yscale("log")
            ax_d.set_xlabel("round")
            ax_d.set_ylabel("unit discrepancy d_l")
            ax_d.set_title("d_l = Σ p_i ‖u_l − x_i,l‖² / (τ_l · dim u_l) at each synchronisation", fontsize=9)
            ax_d.grid(True, alpha=0.3)
            if n_layers <= _MAX_NAMED_LAYERS:
                ax_d.legend(fontsize=7, ncol=2, frameon=False, loc="upper right")
        self.ax_discrepancy_ = ax_d
        return self._drawn(fig, ax)
