"""A sweep's result as files: every grid point, and the tables over seeds (``fedala-lab sweep --out``)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from ..analysis import stats as st
from ..analysis.tables import sweep_gains, sweep_stats, sweep_table, table_latex, table_markdown


def save_sweep(result, out: str | os.PathLike, by: Iterable[str] | None = None, *, against=st.AUTO) -> list[Path]:
    """Write a sweep's result (:func:`~fedala_lab.experiments.sweeps.run_sweep`) into folder ``out``:

    - ``runs.csv``: one row per grid point;
    - ``table.csv``, ``table.md``, ``table.tex``: the table over seeds (rows ``by``: default the spec's), best and
      final pooled accuracy and the worst 10 % of clients with 95 % intervals, and against ``against`` (default
      FedAvg when the rows are algorithms) the paired differences with their p-values (docs/comparing.md);
    - ``stats.csv``: every statistic of every row, long (:func:`~fedala_lab.analysis.tables.sweep_stats`: the
      per-client numbers too, Wilcoxon's p, the notes), when a run finished;
    - ``clients.csv``: per client, each row against the reference (how many clients gain and lose, by how much),
      when there is a reference.

    A sweep with failed runs (``result.failed``) writes ``runs.partial.csv``, ``table.partial.csv`` … instead, the
    markdown opening with what failed: files that cannot be taken for a complete sweep. Each file is written
    under a temporary name and then renamed."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    part = ".partial" if result.failed else ""
    table = sweep_table(result, by, against=against)
    head = (f"Sweep `{result.spec.name}`: test accuracy (%), pooled over clients, and the worst 10 % of clients, mean "
            "over seeds with 95 % intervals, best and final round.")
    fail = ""
    if result.failed:
        fail = (f"**Incomplete: {len(result.failed)} run(s) failed**, so this table lacks their grid points:\n\n"
                + "".join(f"- `{k}`: {msg}\n" for k, msg in result.failed.items()) + "\n")
    files = {f"runs{part}.csv": result.frame.to_csv(index=False), f"table{part}.csv": table.to_csv(index=False),
             f"table{part}.md": fail + head + "\n\n" + table_markdown(table, by) + "\n",
             f"table{part}.tex": table_latex(table, by, caption=("Incomplete: runs failed. " if fail else "") + head)}
    for name, frame in ((f"stats{part}.csv", sweep_stats(result, by, against=against)),
                        (f"clients{part}.csv", sweep_gains(result, by, against=against))):
        if len(frame):  # none without a finished run, or (clients) without a reference
            files[name] = frame.to_csv(index=False)
    paths = []
    for name, text in files.items():
        path = out / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
        paths.append(path)
    return paths
