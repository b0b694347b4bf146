"""One look for every figure: a colour (and line style) per method, and one theme.

    >>> colour_for("fedala")                     # 'tab:blue': in every Display, the app and the notebooks
    >>> line_styles(["fedavg", "fedavg", "fedlama"])   # a method drawn twice keeps its colour
    >>> with theme(): ...                        # the settings every Display draws under

Colours are keyed by the algorithm's config name, as its spec declares them (algorithms/registry.py), never
by a legend label, so a run labelled "FedALA (ALA on after round 40)" is as blue as one labelled "FedALA".
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Sequence

from ..algorithms import registry

STYLES = registry.STYLES

# The theme: sizes that read on a projector and in a notebook, light grids, no top/right frame.
THEME = {
    "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "xtick.labelsize": 8, "ytick.labelsize": 8,
    "legend.fontsize": 8, "legend.frameon": False, "axes.spines.top": False, "axes.spines.right": False,
    "grid.alpha": 0.3, "grid.linewidth": 0.6, "figure.facecolor": "white", "axes.facecolor": "white",
    "image.cmap": "viridis",
}
_THEME_LOCK = threading.RLock()  # rcParams are global: one themed drawing at a time (the app is multi-user)


def method_of(algo: str, label: str = "") -> str:
    """``algo``, or where data drawn carries none, the algorithm a legend label spells (``FedAvg``)."""
    if algo:
        return algo
    return next((name for name in registry.names() if registry.label(name) == label), "")


def colour_for(algo: str, i: int = 0) -> str:
    """The colour of a method (by config name, its spec's); an unknown name gets the i-th colour of the
    default cycle."""
    return registry.look(algo, i).colour


def line_styles(algos: Sequence[str]) -> list[tuple[str, str]]:
    """(colour, line style) for runs drawn together, given their algorithms.

    Each method keeps its colour; drawn again (FedAvg every τ0 and every φ·τ0 steps), it takes the next
    line style. When every run is of one method (one method in several settings), colour would tell
    nothing: the default cycle tells the runs apart instead.
    """
    algos = list(algos)
    if len(algos) > 1 and len(set(algos)) == 1:
        return [(f"C{i % 10}", "-") for i in range(len(algos))]
    out, seen = [], {}
    for i, algo in enumerate(algos):
        look = registry.look(algo, i)
        colour = look.colour
        k = seen[colour] = seen.get(colour, -1) + 1
        base = STYLES.index(look.line_style) if look.line_style in STYLES else 0
        out.append((colour, STYLES[(base + k) % len(STYLES)]))
    return out


def styled_groups(frame, by: str = "label") -> list[tuple]:
    """(label, rows, colour, line style) per group of a tidy frame, in order, styled by its ``algo``
    column (see :func:`line_styles`; a frame without one is styled by the default cycle)."""
    groups = list(frame.groupby(by, sort=False))
    algos = [method_of(str(df["algo"].iloc[0]) if "algo" in df and len(df) else "", label) for label, df in groups]
    return [(label, df, c, ls) for (label, df), (c, ls) in zip(groups, line_styles(algos))]


@contextlib.contextmanager
def theme():
    """Draw under :data:`THEME` (every Display's ``plot`` does); matplotlib's settings are restored after."""
    import matplotlib

    with _THEME_LOCK, matplotlib.rc_context(THEME):
        yield


def themed(plot):
    """``plot`` drawn under :func:`theme` (the Display base class wraps every subclass's ``plot``)."""

    @functools.wraps(plot)
    def wrapper(*args, **kwargs):
        with theme():
            return plot(*args, **kwargs)

    return wrapper
