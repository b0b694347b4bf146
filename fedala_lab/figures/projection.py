"""Fig. 4's honesty check: a marker's contour against its model's true loss.

    >>> ProjectionCheckDisplay(landscape).plot()    # landscape from TrajectoryDisplay.landscape_

The trajectory plot projects every model onto a plane; the models lie off it, so the contour under a
marker is the loss of its projection, not of the model. This draws both, per round (end of round: solid
the true loss, dotted the surface's under the marker), so plot and table can be read together: where the
lines part, the picture's contours say less than the table (:func:`~fedala_lab.analysis.landscape.projection_check`).
"""

from __future__ import annotations

from ..analysis.landscape import Landscape, projection_check
from .base import Display, new_axes
from .style import line_styles, method_of


class ProjectionCheckDisplay(Display):
    """``frame_``: :func:`projection_check` of the landscape; drawn for one phase (default the end of a round)."""

    def __init__(self, landscape: Landscape, *, phase: str = "end", after: int | None = None,
                 title: str | None = None):
        self.frame_ = projection_check(landscape)
        self.phase = phase
        self.after = after  # rounds after this one only (the Fig. 4 protocol: those with ALA on)
        self.title = title

    def plot(self, ax=None):
        fig, ax = new_axes(ax, figsize=(6.4, 3.6))
        f = self.frame_[self.frame_["phase"] == self.phase]
        if self.after is not None:
            f = f[f["round"] > self.after]
        groups = list(f.groupby("label", sort=False))
        styles = line_styles([method_of(df["algo"].iloc[0], label) for label, df in groups])
        for (label, df), (colour, _) in zip(groups, styles):
            ax.plot(df["round"], df["true_loss"], color=colour, marker="s", ms=3, lw=1.4,
                    label=f"{label}: true loss")
            ax.plot(df["round"], df["plane_loss"], color=colour, ls=":", lw=1.4,
                    label=f"{label}: contour under its marker")
        ax.set_xlabel("round")
        ax.set_ylabel(f"local loss, {'end' if self.phase == 'end' else 'start'} of round")
        ax.grid(True)
        ax.legend(fontsize=7.5)
        ax.set_title(self.title or "The plot's contours against the models' true losses")
        return self._drawn(fig, ax)
