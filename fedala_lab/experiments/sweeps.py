"""Sweeps: one base config, a grid of values (a :class:`~fedala_lab.experiments.plans.SweepSpec`), every
combination run once; the tables over seeds are analysis's (:func:`fedala_lab.analysis.tables.sweep_table`).

The paper reports mean ± std over 5 runs and grids over p, s, β and client counts. A sweep is

    base config  ×  grid {axis: values}   →   one RunConfig per grid point   →   runs   →   table

    fedala-lab sweep --preset teach --algos fedavg,fedala --grid p=1,2 --seeds 0,1,2
    fedala-lab sweep --spec my_sweep.yaml --workers 2
    fedala-lab sweep --sweep table7-mnist-dir0.1 --ray-address auto        # a Ray cluster
    fedala-lab sweep --spec my_sweep.yaml --ray --out results/my_sweep     # a local Ray

The grid's distinct runs are computed by experiments/execute.py's :func:`~fedala_lab.experiments.execute.compute`,
as every face's runs are (all paths give the same numbers, tested; the results land in the run store):

- **in this process** (``workers=1``), one run after the other;
- **side by side** (``workers=n`` or ``"auto"``: execute.process_count's rule), in spawned processes with one
  torch thread each;
- **Ray** (``ray=True`` for a Ray started here, ``ray_address="auto"|"ray://host:10001"`` for a cluster),
  an optional dependency imported only then. With a local Ray the workers write into the run store
  directly; on a cluster (whose nodes may not see this disk) the finished runs travel back through Ray
  and are saved here, unless ``shared_store=True`` says the store is on a shared filesystem.

A sweep is resumable: runs already in the store are skipped (same config hash ⇒ same result), and a run
that was interrupted resumes from its checkpoint (:func:`~fedala_lab.experiments.runs.get_or_run`). Grid
points whose configs share a key (``p`` does not change a FedAvg run) run once and are counted at every
point.

Nothing is lost or left hanging: a diverged run is a grid point with status "diverged" (in the table too,
without accuracy), a run that fails comes back with its own message from whichever process ran it, and
settings that cannot work (a GPU per run where there is none, an address where no Ray answers) are refused
before anything starts. The pool's processes start without re-running the caller's script, so a script
or notebook cell without ``if __name__ == "__main__":`` can run a sweep; they import the modules that
registered the caller's algorithms (a method defined in ``__main__`` itself is refused in one line).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import pandas as pd

from ..config import RunConfig
from ..errors import SweepFailed
from ..record.run import run_row
from ..record.store import open_store
from .execute import check_execution, check_ray_address, compute, still_to_do
from .plans import SEED_AXES, SweepSpec
from .trackers import Tracker, check_trackers, log_run


@dataclass
class SweepResult:
    """What a sweep produced: one row per grid point (``frame``), the runs, and the failures."""

    spec: SweepSpec
    frame: pd.DataFrame  # one row per grid point: the axes, run_row() columns, key, run_dir
    runs: list  # one Run per grid point (grid order), its config the point's own (same key)
    failed: dict[str, str] = field(default_factory=dict)  # config key -> error message
    computed: int = 0  # runs computed by this call (the others came from the store)
    seconds: float = 0.0  # wall time of this call

    def runs_where(self, **values) -> list:
        """Runs of the grid points whose axes/config fields equal ``values`` (e.g. ``algo="fedala"``)."""
        return [run for (_, row), run in zip(self.frame.iterrows(), self.runs)
                if all(row.get(k) == v for k, v in values.items())]

    @property
    def diverged(self) -> dict[str, str]:
        """The grid points' runs that diverged: {config key: the divergence message} (each config once)."""
        return {r.config.key(): r.message for r in self.runs if r.status == "diverged"}

    def complete_runs(self) -> list:
        """The completed runs, each config once (grid points sharing a key share a run)."""
        first: dict = {}
        for r in self.runs:
            if r.status == "complete":
                first.setdefault(r.config.key(), r)
        return list(first.values())


def run_sweep(spec: SweepSpec, *, store=None, workers: int | str = "auto", ray: bool = False,
              ray_address: str | None = None, shared_store: bool | None = None, threads: int | None = 1,
              gpus_per_run: float = 0.0, force: bool = False, progress: bool = True,
              trackers: Iterable[Tracker] = ()) -> SweepResult:
    """Run every grid point of ``spec`` not yet in ``store`` and aggregate the results.

    ``workers``: 1 = sequential in this process; n > 1 = n spawned processes side by side; "auto" = as
    execute.process_count says (one per CPU core, at most 4; in this process when the runs go to a GPU). ``ray``/``ray_address``: run the grid as Ray tasks
    instead (a Ray already initialised in this process is used as is; else a local one with ``workers``
    CPUs is started, or the cluster at ``ray_address`` joined, and shut down afterwards). ``threads``:
    torch threads per run, 1 by default on every path (one thread per process is robust against a busy
    neighbour, docs/design.md#performance, and every path then computes the same floats); None leaves torch's
    setting alone.
    ``gpus_per_run``: Ray's ``num_gpus`` per task. ``force``: recompute runs even if stored.

    Runs that diverge are kept with status "diverged" (their grid points stay in the frame, and in
    :attr:`SweepResult.diverged`). A run that fails does not stop the others, but the sweep then raises
    :class:`~fedala_lab.errors.SweepFailed` (its ``result`` holds what did finish, ``result.failed`` every
    reason): a table with holes is never returned as if it were complete. A registered algorithm runs in
    worker processes when its module is importable (plugins.py); one defined in ``__main__`` is refused there.
    Bad settings (``workers``, ``threads``, ``gpus_per_run`` beyond the GPUs there are,
    ``ray_address``, the paper's MNIST partition missing) are refused before anything starts. Progress: one
    bar over the grid's distinct runs. ``trackers`` (experiments/trackers.py) log every distinct run: as it
    goes in whichever process computes it (sequential, pool, a local Ray), from the store afterwards for
    the runs that were stored already or came back from a Ray cluster; a run is logged once per tracker.
    """
    local_ray = ray and not ray_address
    check_execution(workers=workers, threads=threads, gpus_per_run=gpus_per_run, ray=bool(ray or ray_address),
                    local_ray=local_ray)
    if ray_address:
        check_ray_address(ray_address)
    trackers = check_trackers(trackers)
    t0 = time.perf_counter()
    store = open_store(store)
    pairs = spec.expand()
    unique: dict[str, RunConfig] = {}
    for _, cfg in pairs:
        unique.setdefault(cfg.key(), cfg)
    todo = still_to_do(unique.values(), store, force=force)
    with _grid_bar(spec, unique, todo, progress) as on_round:
        statuses = compute(unique.values(), store, processes=workers, on_round=on_round, trackers=trackers,
                           force=force, threads=threads, ray=ray, ray_address=ray_address, shared_store=shared_store,
                           gpus_per_run=gpus_per_run, who="a sweep")
    failed = {k: st["message"] for k, st in statuses.items() if st["status"] in ("failed", "not started")}
    loaded: dict = {}  # key -> Run
    runs, rows, logged = [], [], set()
    for point, cfg in pairs:
        k = cfg.key()
        if k in failed:
            continue
        if k not in loaded:
            loaded[k] = store.find(cfg, diverged=True)  # diverged runs are listed, not tabled
        run = loaded[k]
        if run is None:  # neither stored nor reported failed: say so rather than drop it silently
            failed[k] = "no finished run in the store after the sweep"
            continue
        if trackers and k not in logged:  # those not logged where they were computed (idempotent)
            logged.add(k)
            log_run(run, trackers, store)
        run = dataclasses.replace(run, config=cfg)  # the point's own config (same key, same result)
        runs.append(run)
        rows.append(_row(run, point, k))
    frame = pd.DataFrame(rows)
    result = SweepResult(spec, frame, runs, failed, computed=len(todo) - len(failed),
                         seconds=time.perf_counter() - t0)
    if failed:
        names = {c.key(): store.name_for(c) for c in unique.values()}
        raise SweepFailed(f"{len(failed)} of {len(unique)} runs of sweep {spec.name} failed; the first, "
                          f"{names.get(next(iter(failed)), '?')}: {next(iter(failed.values()))}", result)
    return result


def _row(run, point: dict, key: str) -> dict:
    row = run_row(run)
    # the point's values; seed axes last, so data_seed stays the last column of runs.csv
    row.update(sorted(point.items(), key=lambda kv: kv[0] in SEED_AXES))
    row["key"] = key
    row["run_dir"] = str(run.path) if run.path else ""
    return row


@contextlib.contextmanager
def _grid_bar(spec: SweepSpec, unique: dict, todo: list, progress: bool):
    """One bar over the grid's distinct runs (those stored counted at once); yields compute's ``on_round``,
    which shows the runs in flight beside it."""
    from ..progress import bar as tqdm  # a notebook keeps how it ended

    by_key = {c.key(): c for c in todo}
    in_flight: dict[str, int] = {}
    bar = tqdm(total=len(unique), initial=len(unique) - len(todo), desc=f"sweep {spec.name}", unit="run",
               disable=not progress, dynamic_ncols=True)

    def on_round(key, t, acc):
        cfg = by_key.get(key)
        if cfg is None:
            return
        in_flight[key] = t
        if t >= cfg.rounds:
            in_flight.pop(key)
            bar.update(1)
        bar.set_postfix_str(" | ".join(f"{by_key[k].algo} s{by_key[k].seed} round {r}/{by_key[k].rounds}"
                                       for k, r in in_flight.items()), refresh=False)

    try:
        yield on_round
        bar.update(bar.total - bar.n)  # runs that ended early (failed, diverged) or resumed past their rounds
    finally:
        bar.close()
