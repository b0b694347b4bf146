"""Per-client accuracy: who gains from personalisation and who loses.

    >>> ClientAccuracyDisplay.from_runs([fedavg_run, fedala_run])   # each client's final accuracy, per method
    >>> ClientSpreadDisplay.from_runs([fedavg_run, fedala_run])     # their spread: box and points (seaborn)

Both draw :func:`~fedala_lab.analysis.curves.client_accuracy` (the model each client holds at its run's last
evaluated round), one colour per method (:mod:`.style`). A pooled accuracy hides how unequal clients are;
personalisation (FedALA, Local) lifts most clients at once where one global model suits few.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from ..analysis.curves import client_accuracy
from .base import Display, new_axes
from .style import OTHERS, highlighted, legend_below, styled_groups


class ClientDisplay(Display):
    """What the per-client Displays share: ``frame`` is label, algo, client, acc (:func:`client_accuracy`).
    With more methods than ``highlight`` (besides those labelled in ``keep``), only the ``highlight`` best by
    their clients' mean accuracy and those in ``keep`` are in colour, the others grey (:func:`.style.highlighted`)."""

    def __init__(self, frame: pd.DataFrame, *, title: str | None = None, highlight: int | None = None, keep=()):
        self.frame_ = frame
        self.title = title
        self.highlight = highlight
        self.keep = tuple(keep)

    @classmethod
    def from_runs(cls, runs, *, labels=None, ax=None, title: str | None = None, highlight: int | None = None,
                  keep=()):
        """Each client's accuracy at its run's last evaluated round (labels: as for the curves), drawn."""
        return cls(client_accuracy(runs, labels), title=title, highlight=highlight, keep=keep).plot(ax=ax)

    def _groups(self) -> list[tuple]:
        """(label, rows, colour, line style, in colour?) per method, the ones not highlighted in grey."""
        groups = styled_groups(self.frame_)
        means = self.frame_.groupby("label", sort=False)["acc"].mean().sort_values(ascending=False, kind="stable")
        shown = set(highlighted(list(means.index), self.highlight, self.keep))
        return [(label, rows, colour if label in shown else OTHERS, ls, label in shown)
                for label, rows, colour, ls in groups]


class ClientAccuracyDisplay(ClientDisplay):
    """One marker per client and method at the client's final accuracy (%); a grey bar spans each client's
    range across methods."""

    def plot(self, ax=None):
        df = self.frame_
        n_clients = int(df["client"].max()) + 1 if len(df) else 0
        fig, ax = new_axes(ax, figsize=(max(6.4, 0.3 * n_clients + 2.5), 4.3))
        spread = df.groupby("client")["acc"].agg(["min", "max"])
        self.ranges_ = ax.vlines(spread.index, spread["min"], spread["max"], color="0.8", lw=3, zorder=1)
        groups = self._groups()
        rest = sum(1 for *_, shown in groups if not shown)
        self.markers_ = []
        for i, (label, rows, colour, _, shown) in enumerate(groups):
            shift = 0.5 * (i - (len(groups) - 1) / 2) / max(len(groups), 1)  # side by side within a client
            # the clients' unweighted mean, not the pooled accuracy (every test image counted once) of tables
            if shown:
                name = f"{label}: mean over clients {rows['acc'].mean():.1f} %"
            else:  # one legend entry for them all, on the first
                first = not any(m.get_label().endswith("(grey)") for m in self.markers_)
                name = f"{rest} others (grey)" if first else "_nolegend_"
            self.markers_.append(ax.scatter(rows["client"] + shift, rows["acc"], s=22 if shown else 10, color=colour,
                                            zorder=3 if shown else 2, label=name))
        ax.set_xlabel("client")
        ax.set_ylabel("test accuracy (%), last evaluated round")
        ax.set_xticks(range(0, n_clients, 1 if n_clients <= 30 else max(1, n_clients // 20)))
        ax.set_ylim(-2, 102)
        ax.grid(True, axis="y")
        if self.markers_:  # below the axes: inside, it would cover clients' markers; the grey ones last
            named = sorted((m for m in self.markers_ if m.get_label()[0] != "_"),
                           key=lambda m: m.get_label().endswith("(grey)"))
            legend_below(ax, named, 3)
        ax.set_title(self.title or "Accuracy of each client's model")
        return self._drawn(fig, ax)


class ClientSpreadDisplay(ClientDisplay):
    """The distribution of the clients' final accuracies per method: a box (quartiles, whiskers) and every
    client as a point, drawn with seaborn on a pyplot-free Figure."""

    def plot(self, ax=None):
        import seaborn as sns  # here: importing seaborn takes seconds

        df = self.frame_
        groups = self._groups()
        palette = {label: colour for label, _, colour, *_ in groups}
        # up to 5 methods side by side; more as rows (a figure as wide as 18 boxes would show as a thumbnail)
        across = len(groups) > 5
        size = (6.4, 0.42 * len(groups) + 1.3) if across else (max(4.0, 1.3 * len(groups) + 2), 3.8)
        fig, ax = new_axes(ax, figsize=size)
        xy = {"x": "acc", "y": "label"} if across else {"x": "label", "y": "acc"}
        if len(df):
            with warnings.catch_warnings():  # seaborn 0.13 still passes boxplot's deprecated `vert`
                warnings.simplefilter("ignore", DeprecationWarning)
                sns.boxplot(data=df, **xy, hue="label", palette=palette, fill=False,
                            showfliers=False, width=0.55, legend=False, ax=ax)
            sns.stripplot(data=df, **xy, hue="label", palette=palette, size=4, alpha=0.75,
                          jitter=0.18, legend=False, ax=ax)
        self.medians_ = {label: float(np.median(rows["acc"])) for label, rows, *_ in groups}
        value_axis = "x" if across else "y"
        getattr(ax, f"set_{value_axis}label")("test accuracy of a client (%)")
        getattr(ax, f"set_{'y' if across else 'x'}label")("")
        getattr(ax, f"set_{value_axis}lim")(-2, 102)
        ax.grid(True, axis=value_axis)
        ax.set_title(self.title or f"Spread over {df['client'].nunique()} clients")
        return self._drawn(fig, ax)
