"""A sweep's result as files: every grid point, and the table over seeds (``fedala-lab sweep --out``)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..analysis.tables import sweep_table, table_markdown


def save_sweep(result, out: str | os.PathLike, by: Iterable[str] | None = None) -> list[Path]:
    """Write ``runs.csv`` (per grid point), ``table.csv`` and ``table.md`` (mean ± std over seeds, rows
    ``by``: default the spec's) of a sweep's result (:func:`~fedala_lab.experiments.sweeps.run_sweep`) into
    folder ``out``. A sweep with failed runs (``result.failed``) writes ``runs.partial.csv``,
    ``table.partial.csv`` and ``table.partial.md`` instead, the markdown opening with what failed: files that
    cannot be taken for a complete sweep."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    part = ".partial" if result.failed else ""
    paths = [out / f"runs{part}.csv", out / f"table{part}.csv", out / f"table{part}.md"]
    table = sweep_table(result, by)
    result.frame.to_csv(paths[0], index=False)
    table.to_csv(paths[1], index=False)
    head = (f"Sweep `{result.spec.name}`: test accuracy (%), pooled over clients, mean ± std over seeds, "
            f"best and final round.\n\n")
    if result.failed:
        head = (f"**Incomplete: {len(result.failed)} run(s) failed**, so this table lacks their grid points:\n\n"
                + "".join(f"- `{k}`: {msg}\n" for k, msg in result.failed.items()) + "\n" + head)
    paths[2].write_text(head + table_markdown(table) + "\n")
    return paths
