"""Time the lecture notebooks top to bottom, headless, and print each one's median (issue 32).

    python benchmarks/notebook_times.py                          # smoke mode, every notebook, 3 times each
    python benchmarks/notebook_times.py --full --repeats 1 03_fedprox 06_ablations
    python benchmarks/notebook_times.py --budget 180             # exit 1 if a median is over 180 s
    python benchmarks/notebook_times.py --full --repeats 1 --store runs   # after lecture prepare --notebooks

Each execution is what tests/test_notebooks.py runs (nbclient, the venv's ``python3`` kernel, ``MPLBACKEND``
removed; fedala_lab.webapp.lecture.execute_notebook), in smoke mode (``FEDALA_LAB_SMOKE=1``: the parameters cell
picks tiny settings) unless ``--full``, with a fresh empty run store (``FEDALA_LAB_RUNS`` in a new temporary
folder), so every run a notebook needs is trained during the measurement: the first-time cost for a student,
kernel start-up and shutdown included; or, with ``--store DIR``, reading the runs a ``fedala-lab lecture prepare
--notebooks notebooks/`` put there (what a class waits for). Besides the wall time, the CPU seconds of the
kernel and of the processes it started.

The time budget used to be an assertion in the test (180 s per notebook in smoke mode); wall-clock time on a
shared machine says how busy the machine was as much as how fast a notebook is, so the test checks that the
notebooks run and draw, and the timing lives here. The 1-minute load average before and after each notebook
is printed with its times: a load above the number of CPUs means the notebook got less than a whole CPU.
benchmarks/notebook_times.md keeps the measurements taken so far.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
CELL_TIMEOUT = 600  # s, one cell; a cell that takes longer is reported as failed, not timed


def notebooks(names: list[str]) -> list[Path]:
    """The lecture notebooks (``NN_name.ipynb``), all or those named (with or without ``.ipynb``)."""
    every = sorted(NB_DIR.glob("[0-9][0-9]_*.ipynb"))
    if not names:
        return every
    by_stem = {p.stem: p for p in every}
    unknown = [n for n in names if n.removesuffix(".ipynb") not in by_stem]
    if unknown:
        raise SystemExit(f"unknown notebook(s) {unknown}: choose from {sorted(by_stem)}")
    return [by_stem[n.removesuffix(".ipynb")] for n in names]


def execute(path: Path, smoke: bool, store: str | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) to execute ``path`` once with a fresh kernel and an empty run store (or the run
    store ``store``, e.g. the one `fedala-lab lecture prepare --notebooks notebooks/` filled). CPU seconds: the
    kernel's and the processes it started (getrusage of the children waited for), which a load inflates far less
    than the wall time."""
    import resource

    from fedala_lab.webapp.lecture import execute_notebook

    with tempfile.TemporaryDirectory(prefix="notebook-runs-") as fresh:
        env = {"FEDALA_LAB_RUNS": store or fresh, "FEDALA_LAB_SMOKE": "1" if smoke else None}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        tic = time.perf_counter()
        execute_notebook(path, env, timeout=CELL_TIMEOUT)
        wall = time.perf_counter() - tic
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def load() -> str:
    return f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "n/a"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="notebooks to time (default: all), e.g. 01_fedavg")
    ap.add_argument("--repeats", type=int, default=3, help="executions per notebook (default 3)")
    ap.add_argument("--full", action="store_true", help="the notebooks' full settings, not smoke mode")
    ap.add_argument("--store", default=None,
                    help="run store the notebooks read (default: a fresh empty one per execution); e.g. one that "
                         "`fedala-lab lecture prepare --notebooks --store DIR` filled, to time them in class")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds: mark the notebooks whose median is over it and exit 1 (the test's old "
                         "smoke-mode budget was 180)")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error(f"--repeats={args.repeats} is not allowed: an integer >= 1")
    if args.budget is not None and not args.budget > 0:
        ap.error(f"--budget={args.budget} is not allowed: seconds > 0")
    paths = notebooks(args.names)
    import torch

    mode = "full settings" if args.full else "smoke mode (FEDALA_LAB_SMOKE=1)"
    print(f"{platform.system()} {platform.machine()} · {os.cpu_count()} CPUs · Python {platform.python_version()} · "
          f"torch {torch.__version__} · {mode} · {args.repeats} execution(s) each, "
          + (f"run store {args.store}\n" if args.store else "fresh store each time\n"))
    print("| notebook | median s | min s | max s | CPU s (median) | 1-min load before → after |" +
          (" over budget |" if args.budget else ""))
    print("|---|---:|---:|---:|---:|---|" + ("---|" if args.budget else ""))
    over = []
    for path in paths:
        before = load()
        done = [execute(path, smoke=not args.full, store=args.store) for _ in range(args.repeats)]
        times = [wall for wall, _ in done]
        med = statistics.median(times)
        cpu = statistics.median(c for _, c in done)
        row = (f"| `{path.stem}` | {med:.1f} | {min(times):.1f} | {max(times):.1f} | {cpu:.0f} | {before} → "
               f"{load()} |")
        if args.budget:
            row += " yes |" if med > args.budget else " no |"
            if med > args.budget:
                over.append(path.stem)
        print(row, flush=True)
    if over:
        print(f"\nover the {args.budget:g} s budget: {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
