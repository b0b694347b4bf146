"""What every Display shares: figures built without pyplot, saved as PNG and PDF.

The pattern (scikit-learn's Display objects): ``__init__`` stores computed data; ``plot(ax=None)`` draws
it and returns ``self`` with ``figure_`` and ``ax_`` set; ``from_…`` classmethods compute and then plot.
Figures are ``matplotlib.figure.Figure`` objects, never pyplot's global state, so a long-running app
with several users does not leak or mix figures. Matplotlib is imported only when something is drawn.
"""

from __future__ import annotations

from pathlib import Path


def new_axes(ax=None, figsize=(6.4, 4.0), nrows=1, ncols=1, **subplot_kw):
    """Return (figure, axes): ``ax``'s figure if given, else a fresh pyplot-free Figure."""
    if ax is not None:
        return ax.figure, ax
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=True, subplot_kw=subplot_kw or None)
    return fig, axes


class Display:
    """Base class: ``savefig`` writes the drawn figure (PNG and/or PDF by suffix)."""

    figure_ = None
    ax_ = None

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
