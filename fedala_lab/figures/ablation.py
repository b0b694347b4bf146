"""ALA's hyper-parameters s and p (the paper's Tables 1 and 6) as plots.

    >>> AblationDisplay.from_runs(runs, param="s")   # accuracy vs s; ALA seconds per round vs s
    >>> AblationDisplay.from_runs(runs, param="p")   # accuracy vs p; number of ALA weights vs p

Left panel: best-round and final-round accuracy (mean over seeds, error bars = the 95 % interval of the mean,
:mod:`~fedala_lab.analysis.stats`; none for one seed). Right panel: the
cost of the setting — the number of ALA weights for p (log scale; Table 6), for s the images ALA passes per
round (counted) beside the time it took (timed: a loaded machine can reorder times, never counts).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis.ablation import ablation_frame
from ..errors import ConfigError
from .base import Display, ci_yerr, panel_axes

_PARAM_LABEL = {"p": "p (top blocks with ALA weights)", "s": "s (% of local data used to learn W)",
                "eta": "η (ALA weight learning rate)", "threshold": "start-phase threshold"}


class AblationDisplay(Display):
    def __init__(self, frame: pd.DataFrame, param: str, *, title: str | None = None):
        if param not in frame.columns:
            raise ConfigError("param", param, f"a column of the ablation frame ({', '.join(frame.columns)})")
        self.frame_ = frame
        self.param = param
        self.title = title

    @classmethod
    def from_runs(cls, runs, param: str = "p", ax=None, *, title: str | None = None):
        return cls(ablation_frame(runs, param), param, title=title).plot(ax=ax)

    def plot(self, ax=None):
        """Two panels (accuracy; cost). ``ax``: None, or a pair of axes."""
        fig, axes = panel_axes(ax, 2, (9.0, 3.8), split=False,
                               error="AblationDisplay draws two panels: pass two axes (accuracy, cost)")
        df = self.frame_
        x = df[self.param].to_numpy(dtype=float)
        a0, a1 = axes
        self.errorbars_ = []
        for kind, colour, marker in (("best", "tab:blue", "o"), ("final", "tab:gray", "s")):
            eb = a0.errorbar(x, df[f"{kind}_mean"], yerr=ci_yerr(df, kind), fmt=f"-{marker}", ms=4,
                             capsize=3, color=colour, label=f"{kind} round")
            self.errorbars_.append(eb)
        if self.param == "s":
            _log_x(a0, x)
        else:
            a0.set_xticks(x, [f"{v:g}" for v in x])
        a0.set_xlabel(_PARAM_LABEL.get(self.param, self.param))
        a0.set_ylabel("test accuracy (%)")
        n = df["n_seeds"]
        a0.set_title(f"Accuracy, mean and 95 % interval over {int(n.min())}"
                     + ("" if n.min() == n.max() else f"–{int(n.max())}") + " seed(s)", fontsize=10)
        a0.grid(True, alpha=0.3)
        a0.legend(frameon=False, fontsize=8)

        if self.param == "p" and "ala_weights" in df:
            self.cost_ = a1.bar([f"{int(v)}" for v in x], df["ala_weights"], color="tab:blue", alpha=0.75)
            a1.set_yscale("log")
            a1.set_ylabel("number of ALA weights (log scale)")
            for xi, v in enumerate(df["ala_weights"]):
                a1.annotate(f"{int(v):,}", (xi, v), ha="center", va="bottom", fontsize=8)
            a1.set_title("Weights ALA learns", fontsize=10)
        elif "ala_images" in df:  # counted work, with the measured time beside it (which load can reorder)
            self.cost_ = a1.plot(x, df["ala_images"], "-o", ms=4, color="tab:orange",
                                 label="images through ALA (counted)")[0]
            a1.set_ylabel("images through ALA per round (all clients)")
            a1.set_ylim(bottom=0)
            twin = a1.twinx()
            self.time_ = twin.plot(x, 1000 * df["ala_seconds"], ":s", ms=3, color="0.45",
                                   label="ms per round (timed)")[0]
            twin.set_ylabel("ALA time per round (ms, timed)", color="0.35")
            twin.set_ylim(bottom=0)
            if self.param == "s":
                _log_x(a1, x)
            a1.legend(handles=[self.cost_, self.time_], frameon=False, fontsize=8, loc="upper left")
            a1.set_title("Cost of ALA: counted, and timed", fontsize=10)
        else:
            self.cost_ = a1.plot(x, 1000 * df["ala_seconds"], "-o", ms=4, color="tab:orange")[0]
            if self.param == "s":
                _log_x(a1, x)
            a1.set_ylabel("ALA time per round (ms, all clients)")
            a1.set_title("Cost of ALA", fontsize=10)
        a1.set_xlabel(_PARAM_LABEL.get(self.param, self.param))
        a1.grid(True, alpha=0.3)
        fig.suptitle(self.title or f"Ablation of {self.param}", fontsize=11)
        return self._drawn(fig, np.asarray(axes))


def _log_x(ax, x) -> None:
    """A log x-axis ticked at the values tried only (minor log ticks would crowd them)."""
    ax.set_xscale("log")
    ax.set_xticks(x, [f"{v:g}" for v in x])
    ax.minorticks_off()
