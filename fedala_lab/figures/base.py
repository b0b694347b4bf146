"""What every Display shares: figures built without pyplot, saved as PNG and PDF.

The pattern (scikit-learn's Display objects): ``__init__`` stores computed data; ``plot(ax=None)`` draws
it and returns ``self`` with ``figure_`` and ``ax_`` set; ``from_…`` classmethods compute and then plot.
Figures are ``matplotlib.figure.Figure`` objects, never pyplot's global state, so a long-running app
with several users does not leak or mix figures. Matplotlib is imported only when something is drawn.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .style import themed


def new_axes(ax=None, figsize=(6.4, 4.0), nrows=1, ncols=1, **subplot_kw):
    """Return (figure, axes): ``ax``'s figure if given, else a fresh pyplot-free Figure."""
    if ax is not None:
        return ax.figure, ax
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=True, subplot_kw=subplot_kw or None)
    return fig, axes


def panel_axes(ax, n: int, figsize, *, width_ratios=None, split: bool = True, error: str = ""):
    """Return (figure, list of ``n`` axes side by side): in a fresh figure when ``ax`` is None; ``ax``
    itself when it is a sequence of ``n`` axes (else ValueError with ``error``, formatted with ``got``);
    with ``split``, in place of a single Axes used as the bounding box (as scikit-learn's multi-panel
    displays do), without it a single Axes is a sequence of one."""
    if ax is None:
        from matplotlib.figure import Figure

        fig = Figure(figsize=figsize, layout="constrained")
        kw = {"width_ratios": width_ratios} if width_ratios is not None else None
        return fig, list(fig.subplots(1, n, squeeze=False, gridspec_kw=kw)[0])
    if split and not isinstance(ax, (list, tuple, np.ndarray)):
        fig = ax.figure
        spec = ax.get_subplotspec()
        ax.remove()
        gs = spec.subgridspec(1, n, width_ratios=width_ratios)
        return fig, [fig.add_subplot(gs[0, i]) for i in range(n)]
    axes = list(np.ravel(ax))
    if len(axes) != n:
        raise ValueError(error.format(got=len(axes)))
    return axes[0].figure, axes


def ci_yerr(frame, key: str) -> np.ndarray:
    """Error bars of ``{key}_mean`` that are its 95 % interval (``{key}_lo``, ``{key}_hi``): a (2, n) array of the
    distances below and above, 0 where there is no interval (one seed, identical runs)."""
    mean = frame[f"{key}_mean"].to_numpy(dtype=float)
    lo, hi = (frame[f"{key}_{s}"].to_numpy(dtype=float) for s in ("lo", "hi"))
    return np.nan_to_num(np.vstack([mean - lo, hi - mean]))


class Display:
    """Base class: ``savefig`` writes the drawn figure (PNG and/or PDF by suffix); every subclass's ``plot``
    draws under the one theme of :mod:`.style`."""

    figure_ = None
    ax_ = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "plot" in cls.__dict__:
            cls.plot = themed(cls.__dict__["plot"])

    def _drawn(self, fig, ax):
        """Keep what ``plot`` drew; ``figure_`` is the root Figure even when drawn into a SubFigure
        (a SubFigure cannot be saved on its own). Returns ``self``."""
        self.figure_, self.ax_ = fig.get_figure(root=True), ax
        return self

    def savefig(self, path: str | Path, *, dpi: int = 120, formats: tuple[str, ...] | None = None) -> list[Path]:
        """Save the figure to ``path``; with ``formats=("png", "pdf")`` save each next to it."""
        if self.figure_ is None:
            self.plot()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        targets = [path.with_suffix("." + f) for f in formats] if formats else [path]
        for p in targets:
            self.figure_.savefig(p, dpi=dpi)
        return targets
