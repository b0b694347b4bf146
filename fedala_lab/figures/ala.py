"""What ALA learns: its weights W (Fig. 2) and its loss over weight-learning epochs (Fig. 3).

    >>> ALAWeightsDisplay.from_run(run, client=8)              # W heatmaps, lighter = larger
    >>> ALALossDisplay.from_run(run, client=8)                 # ALA loss per weight-learning epoch
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analysis.curves import ala_loss_curve
from ..config import algo_label
from .base import Display, new_axes, panel_axes


def _as_matrix(w: np.ndarray) -> np.ndarray:
    """A 2-D picture of one weight tensor: rows = output units.

    Matrices as they are; convolution kernels (out, in, k, k) as (out, in·k·k); biases and other vectors
    as a (n, 1) strip standing next to their layer's matrix.
    """
    w = np.asarray(w)
    if w.ndim == 0:
        return w.reshape(1, 1)
    if w.ndim == 1:
        return w.reshape(-1, 1)
    return w.reshape(w.shape[0], -1)


class ALAWeightsDisplay(Display):
    """Heatmaps of a client's learned ALA weights W, one per parameter tensor of the top p blocks.

    Lighter = larger (grey scale from 0, black, to 1, white): a weight of 1 takes the global model's
    value, 0 keeps the old local one (Eq. 4). Rows are output units; biases stand as a strip.
    ``held_labels``: the labels the client holds; the output layer's rows of those labels (one row per
    label) are framed in red.
    """

    def __init__(self, weights: dict[str, np.ndarray], *, client: int, round_: int, held_labels=None,
                 title: str | None = None):
        self.weights_ = {k: np.asarray(v) for k, v in weights.items()}
        self.client = client
        self.round_ = round_
        self.held_labels = None if held_labels is None else sorted(int(v) for v in held_labels)
        self.title = title

    @classmethod
    def from_run(cls, run, client: int, round_: int | None = None, *, held_labels=None, ax=None,
                 title: str | None = None):
        """W of ``client`` after learning in ``round_`` (latest recorded at or before it; default: last);
        ``held_labels`` as in the class (e.g. ``FederatedData.labels_held(client)``)."""
        r, weights = run.ala_weights(client, round_)
        return cls(weights, client=client, round_=r, held_labels=held_labels, title=title).plot(ax=ax)

    def output_layer(self) -> list[str]:
        """The tensors of the output layer (the last module among the weights), whose rows are labels."""
        names = list(self.weights_)
        head = names[-1].rsplit(".", 1)[0] if names else ""
        return [n for n in names if n.rsplit(".", 1)[0] == head]

    def summary(self) -> pd.DataFrame:
        """Per tensor: shape, number of weights, mean, share of weights at 0 and at 1 (clipped)."""
        return pd.DataFrame([{"param": k, "shape": tuple(v.shape), "weights": int(v.size),
                              "mean": float(v.mean()), "at_0": float((v <= 0).mean()),
                              "at_1": float((v >= 1).mean())} for k, v in self.weights_.items()])

    def plot(self, ax=None, cmap: str = "gray"):
        mats = [(k, _as_matrix(v)) for k, v in self.weights_.items()]
        if not mats:
            raise ValueError("no ALA weights to draw")
        # widths follow the number of columns, within limits so a bias strip stays visible
        ratios = [float(np.clip(m.shape[1], 1, 64)) ** 0.5 for _, m in mats]
        fig, axes = panel_axes(ax, len(mats), (min(3.0 + 2.2 * len(mats), 14), 3.6), width_ratios=ratios,
                               error=f"expected {len(mats)} axes (one per ALA weight tensor), got {{got}}")
        self.images_ = []
        for a, (name, m) in zip(axes, mats):
            im = a.imshow(m, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
            self.images_.append(im)
            a.set_title(f"{name}\n{' × '.join(map(str, self.weights_[name].shape))}", fontsize=9)
            a.set_xlabel("input" if m.shape[1] > 1 else "")
            if m.shape[1] == 1:
                a.set_xticks([])
        axes[0].set_ylabel("output unit")
        self.held_marks_ = self._mark_held(dict(zip(self.weights_, axes)))
        self.colorbar_ = fig.colorbar(self.images_[-1], ax=axes, label="ALA weight W (1 = global, 0 = local)",
                                      shrink=0.9)
        held = f"; red: the rows of the {len(self.held_labels)} label(s) it holds" if self.held_marks_ else ""
        fig.suptitle(self.title or f"ALA weights of client {self.client} after round {self.round_}{held}",
                     fontsize=11)
        return self._drawn(fig, np.asarray(axes))

    def _mark_held(self, axes: dict) -> list:
        """Frame the output layer's rows of the held labels in red; label its rows by label."""
        from matplotlib.patches import Rectangle

        marks = []
        if not self.held_labels:
            return marks
        for name in self.output_layer():
            m = _as_matrix(self.weights_[name])
            if m.shape[0] <= max(self.held_labels):
                continue  # not one row per label
            a = axes[name]
            for label in self.held_labels:
                marks.append(a.add_patch(Rectangle((-0.5, label - 0.5), m.shape[1], 1, fill=False, lw=1.6,
                                                   edgecolor="tab:red", clip_on=False)))
            if m.shape[0] <= 20:
                for row, tick in enumerate(a.set_yticks(range(m.shape[0]), map(str, range(m.shape[0])))):
                    if row in self.held_labels:
                        tick.label1.set_color("tab:red")
                        tick.label1.set_fontweight("bold")
            a.set_ylabel("label" if a is axes[self.output_layer()[0]] else "")
        return marks


class ALALossDisplay(Display):
    """The ALA loss of one client against cumulative weight-learning epochs (Fig. 3).

    The start phase (the client's first ALA, several passes until the loss settles) is shaded; each later
    round adds one pass. The solid line is the loss of each pass's last batch (what the reference checks
    for convergence); the thin line the mean over the pass.
    """

    def __init__(self, curve: pd.DataFrame, *, client: int, label: str | None = None, round_: int | None = None,
                 title: str | None = None):
        self.curve_ = curve
        self.client = client
        self.label = label
        self.round_ = round_
        self.title = title

    @classmethod
    def from_run(cls, run, client: int, ax=None, *, round_: int | None = None, title: str | None = None):
        """The ALA loss of ``client``; ``round_`` marks that round's pass(es) (e.g. Fig. 2's round)."""
        return cls(ala_loss_curve(run, client), client=client, label=algo_label(run.config.algo), round_=round_,
                   title=title).plot(ax=ax)

    @property
    def start_epochs(self) -> int:
        return int(self.curve_["start_phase"].sum())

    def plot(self, ax=None):
        fig, ax = new_axes(ax, figsize=(6.4, 3.8))
        df = self.curve_
        sp = df[df["start_phase"]]
        (self.line_,) = ax.plot(df["cum_epoch"], df["loss"], "-o", ms=2.5, lw=1.3, color="tab:blue",
                                label="last batch of the pass")
        (self.mean_line_,) = ax.plot(df["cum_epoch"], df["loss_mean"], "-", lw=0.8, color="tab:blue",
                                     alpha=0.45, label="mean over the pass")
        self.span_ = None
        if len(sp):
            lo, hi = sp["cum_epoch"].min() - 0.5, sp["cum_epoch"].max() + 0.5
            r0 = int(sp["round"].iloc[0])
            capped = " (capped)" if bool(sp["capped"].any()) else ""
            self.span_ = ax.axvspan(lo, hi, color="tab:orange", alpha=0.18,
                                    label=f"start phase: round {r0}, {len(sp)} epochs{capped}")
        self.round_mark_ = None
        if self.round_ is not None and len(df) and (df["round"] <= self.round_).any():
            r = int(df.loc[df["round"] <= self.round_, "round"].max())  # latest round with a pass, as Fig. 2
            x = df.loc[df["round"] == r, "cum_epoch"]
            self.round_mark_ = ax.axvspan(x.min() - 0.5, x.max() + 0.5, color="tab:red", alpha=0.25, lw=0,
                                          label=f"round {r}")
        ax.set_xlabel("weight-learning epoch (cumulative over rounds)")
        ax.set_ylabel("ALA loss (cross-entropy)")
        ax.set_xlim(0.5, max(df["cum_epoch"].max(), 1) + 0.5)
        ax.grid(True, alpha=0.3)
        ax.legend(frameon=False, fontsize=8)
        last = int(df["round"].max()) if len(df) else 0
        ax.set_title(self.title or f"{self.label or 'ALA'}: local loss of client {self.client} while learning W "
                                   f"(rounds ≤ {last})", fontsize=10)
        return self._drawn(fig, ax)
