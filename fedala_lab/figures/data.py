"""Client data distributions (FedALA paper Fig. 6–9): who holds which labels, and how many.

    >>> disp = DataDistributionDisplay.from_data(fd)                 # bubble plot
    >>> disp = DataDistributionDisplay.from_data(fd, kind="heatmap")
    >>> disp.figure_, disp.ax_, disp.counts_                        # the figure, axes and the data drawn
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .base import Display, new_axes


class DataDistributionDisplay(Display):
    """Bubble plot (x: client, y: label, circle area ∝ samples) or a client × label heatmap.

    ``counts`` is the tidy frame of :meth:`FederatedData.label_counts` (client, split, label, count).
    """

    def __init__(self, counts: pd.DataFrame, *, num_clients: int | None = None, num_classes: int | None = None,
                 class_names=None, split: str = "all", title: str | None = None):
        df = counts if split == "all" else counts[counts["split"] == split]
        self.counts_ = df.groupby(["client", "label"], as_index=False)["count"].sum()
        self.num_clients = num_clients or (int(counts["client"].max()) + 1 if len(counts) else 0)
        self.num_classes = num_classes or (int(counts["label"].max()) + 1 if len(counts) else 0)
        self.class_names = list(class_names) if class_names else [str(i) for i in range(self.num_classes)]
        self.split = split
        self.title = title

    @classmethod
    def from_data(cls, data, *, kind: str = "bubble", split: str = "all", ax=None, title: str | None = None):
        """Compute the counts of a :class:`FederatedData` and draw them."""
        disp = cls(data.label_counts(), num_clients=data.num_clients, num_classes=data.num_classes,
                   class_names=data.class_names, split=split, title=title)
        return disp.plot(kind=kind, ax=ax)

    def matrix(self) -> np.ndarray:
        """(num_classes, num_clients) sample counts."""
        m = np.zeros((self.num_classes, self.num_clients), dtype=np.int64)
        m[self.counts_["label"].to_numpy(), self.counts_["client"].to_numpy()] = self.counts_["count"].to_numpy()
        return m

    def plot(self, kind: str = "bubble", ax=None):
        if kind not in ("bubble", "heatmap"):
            from ..errors import ConfigError

            raise ConfigError("kind", kind, "bubble or heatmap")
        width = max(5.0, 0.32 * self.num_clients + 1.5)
        fig, ax = new_axes(ax, figsize=(min(width, 16), 4.2))
        df = self.counts_
        if kind == "bubble":
            peak = max(int(df["count"].max()) if len(df) else 1, 1)
            # area ∝ samples; the largest bubble gets ~ 400 pt²
            self.artist_ = ax.scatter(df["client"], df["label"], s=400 * df["count"] / peak, c="tab:red",
                                      alpha=0.6, edgecolors="darkred", linewidths=0.5)
            ax.set_ylim(-0.7, self.num_classes - 0.3)
            ax.set_xlim(-0.7, self.num_clients - 0.3)
            ax.grid(True, alpha=0.25)
            # a size key: three reference bubbles
            for v in sorted({max(1, peak // 10), max(1, peak // 2), peak}):
                ax.scatter([], [], s=400 * v / peak, c="tab:red", alpha=0.6, edgecolors="darkred", label=str(v))
            ax.legend(title="samples", loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False,
                      labelspacing=1.2, borderpad=0.8)
        else:
            m = self.matrix()
            self.artist_ = ax.imshow(m, aspect="auto", cmap="viridis", origin="lower", interpolation="nearest")
            self.colorbar_ = ax.figure.colorbar(self.artist_, ax=ax, label="samples")
        ax.set_xlabel("client")
        ax.set_ylabel("label")
        step = 1 if self.num_clients <= 30 else max(1, self.num_clients // 20)
        ax.set_xticks(range(0, self.num_clients, step))
        ax.set_yticks(range(self.num_classes))
        if self.num_classes <= 20:
            ax.set_yticklabels(self.class_names[: self.num_classes])
        split = "" if self.split == "all" else f" ({self.split} split)"
        ax.set_title(self.title or f"Samples per client and label{split}")
        self.kind = kind
        return self._drawn(fig, ax)
