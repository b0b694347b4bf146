"""One look for every figure: a colour (and line style) per method, and one theme.

    >>> colour_for("fedala")                     # 'tab:blue': in every Display, the app and the notebooks
    >>> line_styles(["fedavg", "fedavg", "fedlama"])   # a method drawn twice keeps its colour
    >>> with theme(): ...                        # the settings every Display draws under
    >>> with projector(): disp = AccuracyCurveDisplay.from_runs(runs)   # the same figure for the back of a room

Colours are keyed by the algorithm's config name, as its spec declares them (algorithms/registry.py), never
by a legend label, so a run labelled "FedALA (ALA on after round 40)" is as blue as one labelled "FedALA".

Projector mode (:func:`projector`) draws every figure for a lecture hall: no text under
:data:`PROJECTOR_MIN_PT` points, lines :data:`PROJECTOR_LINE` times as thick, a high-contrast palette, and no
figure larger than :data:`PROJECTOR_MAX_SIZE` inches. It applies to whatever a Display draws (its own sizes
and colours included), after the Display has drawn.
"""

from __future__ import annotations

import contextlib
import contextvars
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

# Projector mode. A figure shown at 84 CSS px or more per figure inch (the lecture app's main figures at 1280×800,
# a slide at full width) has no text under 14 px (PROJECTOR_MIN_PT · 84 / 72): what reads from the back of a room.
PROJECTOR_MIN_PT = 12.0
PROJECTOR_LINE = 1.6  # lines and markers, times their drawn width
# inches: a larger figure is made smaller (its text would otherwise shrink on screen). The app shows a main
# figure in at most 738×350 px at 1280×800 (under a sentence), so one of this size at ≥ 84 px per inch.
PROJECTOR_MAX_SIZE = (8.8, 4.1)
# Matplotlib's default cycle (tab10, which the methods' colours use) → darker, high-contrast colours on white
# (after Okabe & Ito's colour-blind-safe palette where it has a match).
CONTRAST = {"#1f77b4": "#0072b2", "#ff7f0e": "#d55e00", "#2ca02c": "#009e73", "#d62728": "#9e1b32",
            "#9467bd": "#6a3d9a", "#8c564b": "#7f3b08", "#e377c2": "#b8418e", "#7f7f7f": "#4d4d4d",
            "#bcbd22": "#7a7a00", "#17becf": "#007c91"}
PROJECTOR_THEME = {
    **THEME, "font.size": 13, "axes.titlesize": 13.5, "axes.labelsize": 12.5, "xtick.labelsize": 12,
    "ytick.labelsize": 12, "legend.fontsize": 12, "figure.titlesize": 14, "lines.linewidth": 2.4,
    "lines.markersize": 7, "axes.linewidth": 1.3, "grid.linewidth": 0.9, "grid.alpha": 0.45,
    "xtick.major.width": 1.3, "ytick.major.width": 1.3,
}
_PROJECTOR = contextvars.ContextVar("fedala_lab_projector", default=False)
_DEPTH = threading.local()  # plot calls in progress in this thread: the outermost one finishes the figure


@contextlib.contextmanager
def projector(on: bool = True):
    """Draw the figures made inside (in this thread or task) in projector mode, or, with ``on=False``, not."""
    token = _PROJECTOR.set(bool(on))
    try:
        yield
    finally:
        _PROJECTOR.reset(token)


def projector_on() -> bool:
    """Whether figures drawn now are drawn in projector mode."""
    return _PROJECTOR.get()


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


OTHERS = "0.72"  # the colour of the methods not highlighted among many (see highlighted)


def highlighted(ranked: Sequence[str], highlight: int | None, keep: Sequence[str] = ()) -> list[str]:
    """The labels to draw in colour when many are drawn together (a bounded palette): all of them when there
    are at most ``highlight`` besides ``keep``, else the ``highlight`` first of ``ranked`` (best first) and those
    in ``keep`` (the references, FedAvg and Local); the others are drawn in :data:`OTHERS` grey."""
    ranked = list(dict.fromkeys(ranked))
    if highlight is None or len(ranked) <= highlight + len(keep):
        return ranked
    return [lab for i, lab in enumerate(ranked) if i < highlight or lab in keep]


def legend_below(ax, handles, most: int = 2, **kw):
    """A legend under ``ax``, below its tick labels and x label, in as many columns (at most ``most``) as fit the
    figure's width. Its distance is in font sizes (``borderaxespad``), not a share of the axes' height, so it
    keeps clear of the x label however the layout sizes the axes."""
    fig = ax.get_figure(root=True)
    return ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), borderaxespad=4.2,
                     frameon=False, ncol=legend_columns([h.get_label() for h in handles], fig.get_size_inches()[0],
                                                        most), **kw)


def legend_columns(labels: Sequence[str], width_in: float, most: int) -> int:
    """How many columns (at most ``most``) a legend of ``labels`` at the current legend font size takes to fit
    in ``width_in`` inches (a legend wider than its figure squeezes the axes to nothing)."""
    import matplotlib
    from matplotlib.font_manager import FontProperties

    size = FontProperties(size=matplotlib.rcParams["legend.fontsize"]).get_size_in_points()
    entry = max((len(str(lab)) for lab in labels), default=0) * 0.55 * size + 3 * size  # text + marker + gap
    return max(1, min(most, len(labels), int(width_in * 72 // max(entry, 1.0))))


def styled_groups(frame, by: str = "label") -> list[tuple]:
    """(label, rows, colour, line style) per group of a tidy frame, in order, styled by its ``algo``
    column (see :func:`line_styles`; a frame without one is styled by the default cycle)."""
    groups = list(frame.groupby(by, sort=False))
    algos = [method_of(str(df["algo"].iloc[0]) if "algo" in df and len(df) else "", label) for label, df in groups]
    return [(label, df, c, ls) for (label, df), (c, ls) in zip(groups, line_styles(algos))]


@contextlib.contextmanager
def theme():
    """Draw under :data:`THEME`, or :data:`PROJECTOR_THEME` in projector mode (every Display's ``plot`` does);
    matplotlib's settings are restored after."""
    import matplotlib

    with _THEME_LOCK, matplotlib.rc_context(_projector_rc() if projector_on() else THEME):
        yield


def _projector_rc() -> dict:
    from cycler import cycler

    return {**PROJECTOR_THEME, "axes.prop_cycle": cycler(color=list(CONTRAST.values()))}


def themed(plot):
    """``plot`` drawn under :func:`theme` (the Display base class wraps every subclass's ``plot``); in projector
    mode the figure is then made readable from afar (:func:`for_projector`), once, by the outermost ``plot``."""

    @functools.wraps(plot)
    def wrapper(*args, **kwargs):
        depth = getattr(_DEPTH, "n", 0)
        _DEPTH.n = depth + 1
        try:
            with theme():
                out = plot(*args, **kwargs)
                if depth == 0 and projector_on() and getattr(out, "figure_", None) is not None:
                    for_projector(out.figure_)
                return out
        finally:
            _DEPTH.n = depth

    return wrapper


def for_projector(fig) -> None:
    """Make ``fig`` readable on a projector, whatever sizes and colours its Display chose: every text at least
    :data:`PROJECTOR_MIN_PT` points (tick labels too, also those made later), titles wrapped, lines and markers
    :data:`PROJECTOR_LINE` times as thick (once each), the default palette's colours darkened (:data:`CONTRAST`),
    and the figure within :data:`PROJECTOR_MAX_SIZE` inches (titles and axis labels wrap to fit)."""
    from matplotlib.colors import to_hex, to_rgba
    from matplotlib.lines import Line2D
    from matplotlib.text import Text

    def contrast(c):
        try:
            rgba = to_rgba(c)
        except (TypeError, ValueError):
            return c
        dark = CONTRAST.get(to_hex(rgba))
        return c if dark is None else to_rgba(dark, rgba[3])

    fig.set_size_inches(*(min(v, top) for v, top in zip(fig.get_size_inches(), PROJECTOR_MAX_SIZE)))
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            ticks = axis.get_major_ticks() + axis.get_minor_ticks()
            small = min((t.label1.get_fontsize() for t in ticks), default=PROJECTOR_MIN_PT)
            axis.set_tick_params(which="both", labelsize=max(small, PROJECTOR_MIN_PT))
    for text in fig.findobj(Text):
        if text.get_fontsize() < PROJECTOR_MIN_PT:
            text.set_fontsize(PROJECTOR_MIN_PT)
    _wrap_titles(fig)
    for line in fig.findobj(Line2D):
        if not getattr(line, "_fedala_projector", False):
            line.set_linewidth(line.get_linewidth() * PROJECTOR_LINE)
            line.set_markersize(line.get_markersize() * PROJECTOR_LINE ** 0.5)
            line.set_color(contrast(line.get_color()))
            line.set_markerfacecolor(contrast(line.get_markerfacecolor()))
            line.set_markeredgecolor(contrast(line.get_markeredgecolor()))
            line._fedala_projector = True
    from matplotlib.collections import Collection
    from matplotlib.patches import Patch

    for coll in fig.findobj(Collection):
        faces = coll.get_facecolor()
        if len(faces) and not getattr(coll, "_fedala_projector", False):
            coll.set_facecolor([contrast(tuple(c)) for c in faces])
            edges = coll.get_edgecolor()
            if len(edges):
                coll.set_edgecolor([contrast(tuple(c)) for c in edges])
            coll._fedala_projector = True
    for patch in fig.findobj(Patch):
        if patch is not fig.patch and patch.axes is not None and patch is not patch.axes.patch:
            patch.set_facecolor(contrast(patch.get_facecolor()))
            patch.set_edgecolor(contrast(patch.get_edgecolor()))



def _wrap_titles(fig) -> None:
    """Break titles and axis labels that the larger text made longer than the room they have (their axes' width,
    or height for a y label; the figure's width for its title) into lines. Matplotlib's own wrapping is left alone: the
    layout engine does not see its lines, and a wrapped title then sticks out of the figure."""
    import math
    import textwrap

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()  # a pyplot-free Figure has no renderer of its own
    width = fig.bbox.width
    # the room an axes' title and labels have: the axes' own (as placed before the layout engine shrinks them)
    texts = [(t, ax.bbox.width) for ax in fig.axes for t in (ax.title, ax.xaxis.label)]
    texts += [(ax.yaxis.label, ax.bbox.height) for ax in fig.axes]
    if getattr(fig, "_suptitle", None) is not None:
        texts.append((fig._suptitle, width))
    for text, room in texts:
        words = text.get_text()
        if not words or "\n" in words:
            continue
        extent = text.get_window_extent(renderer)
        long = max(extent.width, extent.height)
        if long > 0.92 * room:
            lines = math.ceil(long / (0.92 * room))
            text.set_text(textwrap.fill(words, math.ceil(len(words) / lines) + 2, break_on_hyphens=False))
