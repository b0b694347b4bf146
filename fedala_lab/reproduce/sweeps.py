"""A sweep's result as files: every grid point, and the table over seeds (``fedala-lab sweep --out``)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..analysis.tables import sweep_table, table_markdown


def save_sweep(result, out: str | os.PathLike, by: Iterable[str] | None = None) -> list[Path]:
    """Write ``runs.csv`` (per grid point), ``table.csv`` and ``table.md`` (mean ± std over seeds, rows
    ``by``: default the spec's) of a sweep's result (:func:`~fedala_lab.experiments.sweeps.run_sweep`) into
    folder ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "runs.csv", out / "table.csv", out / "table.md"]
    table = sweep_table(result, by)
    result.frame.to_csv(paths[0], index=False)
    table.to_csv(paths[1], index=False)
    head = (f"Sweep `{result.spec.name}`: test accuracy (%), pooled over clients, mean ± std over seeds, "
            f"best and final round.\n\n")
    paths[2].write_text(head + table_markdown(table) + "\n")
    return paths
