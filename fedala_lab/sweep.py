"""Sweeps: one base config, a grid of values, every combination run once and aggregated over seeds.

The paper reports mean ± std over 5 runs and grids over p, s, β and client counts. A sweep is

    base config  ×  grid {axis: values}   →   one RunConfig per grid point   →   runs   →   table

    fedala-lab sweep --preset teach --algos fedavg,fedala --grid p=1,2 --seeds 0,1,2
    fedala-lab sweep --spec my_sweep.yaml --workers 2
    fedala-lab sweep --sweep table7-mnist-dir0.1 --ray-address auto        # a Ray cluster
    fedala-lab sweep --spec my_sweep.yaml --ray --out results/my_sweep     # a local Ray

A spec file (YAML or JSON)::

    name: p-ablation
    preset: teach                 # optional base preset
    config: {rounds: 30}          # optional overrides of the base (flat or with a "data" mapping)
    grid:                         # axis -> values; any RunConfig/DataConfig field, or data_seed
      algo: [fedavg, fedala]
      p: [1, 2]
      seed: [0, 1, 2]
    by: [algo, p]                 # optional: the table's rows (default: every axis but the seeds)

How runs are executed (all three give the same numbers, tested; the results land in the run store):

- **sequential** (``workers=1``): in this process, one run after the other;
- **a process pool** (``workers=n`` or ``"auto"``: one worker per CPU core on CPU, sequential on a GPU),
  spawned processes with one torch thread each (PERFORMANCE.md: one thread per worker is robust and
  2 workers × 1 thread is the fastest use of a 2-core machine);
- **Ray** (``ray=True`` for a Ray started here, ``ray_address="auto"|"ray://host:10001"`` for a cluster),
  an optional dependency imported only then. With a local Ray the workers write into the run store
  directly; on a cluster (whose nodes may not see this disk) the finished runs travel back through Ray
  and are saved here, unless ``shared_store=True`` says the store is on a shared filesystem.

A sweep is resumable: runs already in the store are skipped (same config hash ⇒ same result), and a run
that was interrupted resumes from its checkpoint (``RunStore.get_or_run``). Grid points whose configs
share a key (``p`` does not change a FedAvg run) run once and are counted at every point.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .config import SETTING_NAMES, RunConfig, merge_settings, parse_value, read_config_file
from .errors import ConfigError, FedalaError, TrainingDiverged
from .presets import mnist_pathological_dataset  # re-exported: where MNIST pathological comes from

# spellings accepted for grid axes, besides the config field names themselves
AXIS_ALIASES = {"algos": "algo", "algorithm": "algo", "seeds": "seed", "clients": "num_clients",
                "data-seed": "data_seed", "partition_seed": "data_seed"}
# axes that make repetitions, not settings: left out of a table's rows by default
SEED_AXES = ("seed", "data_seed")
_SPEC_KEYS = ("name", "preset", "config", "grid", "by")


# ------------------------------------------------------------------------------------------------ spec


def _axis_name(name: str) -> str:
    """Normalise an axis name (``--grid num-clients=…``, ``seeds: […]``) and check it is a config field."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError("grid", name, "an axis named after a config field, e.g. p, s, beta, num_clients")
    key = AXIS_ALIASES.get(name.strip(), name.strip())
    key = AXIS_ALIASES.get(key.replace("-", "_"), key.replace("-", "_"))
    if key not in SETTING_NAMES:
        raise ConfigError("grid", name, "a RunConfig or DataConfig field (e.g. algo, seed, p, s, eta, beta, "
                          "num_clients, data_seed)")
    if key in ("data", "device", "checkpoint_every", "root", "download", "threads"):
        raise ConfigError("grid", name, "a field that can change a result (not data/device/root/download/"
                          "checkpoint_every/threads)")
    return key


def _values(axis: str, values) -> tuple:
    if isinstance(values, (str, int, float, bool)) or values is None:
        values = [values]
    values = tuple(values)
    if not values:
        raise ConfigError(f"grid.{axis}", [], "at least one value")
    if len(set(map(repr, values))) != len(values):
        raise ConfigError(f"grid.{axis}", list(values), "distinct values")
    return values


@dataclass(frozen=True)
class SweepSpec:
    """A base config and a grid of axes; :meth:`expand` makes one :class:`RunConfig` per grid point.

    ``grid`` is an ordered tuple of ``(axis, values)``; the last axis varies fastest. ``by`` names the
    table's rows (default: every axis except the seeds).
    """

    base: RunConfig = field(default_factory=RunConfig)
    grid: tuple[tuple[str, tuple], ...] = ()
    by: tuple[str, ...] | None = None
    name: str = "sweep"

    def __post_init__(self):
        grid = tuple((_axis_name(a), _values(a, v)) for a, v in
                     (self.grid.items() if isinstance(self.grid, Mapping) else self.grid))
        axes = [a for a, _ in grid]
        dup = sorted({a for a in axes if axes.count(a) > 1})
        if dup:
            raise ConfigError("grid", dup[0], "each axis once")
        object.__setattr__(self, "grid", grid)
        if self.by is not None:
            by = (self.by,) if isinstance(self.by, str) else tuple(self.by)
            object.__setattr__(self, "by", tuple(_axis_name(b) for b in by))
        if not isinstance(self.base, RunConfig):
            raise ConfigError("base", self.base, "a RunConfig")

    # -- construction ------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, d: Mapping, *, base: RunConfig | None = None) -> SweepSpec:
        """From a spec mapping (see the module docstring); ``base`` replaces the spec's preset."""
        if not isinstance(d, Mapping):
            raise ConfigError("spec", type(d).__name__, "a mapping with keys " + ", ".join(_SPEC_KEYS))
        unknown = sorted(set(d) - set(_SPEC_KEYS))
        if unknown:
            raise ConfigError(f"spec.{unknown[0]}", d[unknown[0]], "one of the keys " + ", ".join(_SPEC_KEYS))
        if base is None:
            from .presets import preset

            base = preset(d["preset"]) if d.get("preset") else RunConfig()
        overrides = d.get("config") or {}
        if not isinstance(overrides, Mapping):
            raise ConfigError("spec.config", overrides, "a mapping of config fields")
        if overrides:
            # from_dict routes top-level data fields and data_seed into "data" (they win over it)
            base = RunConfig.from_dict(merge_settings(base.to_dict(), overrides))
        grid = d.get("grid") or {}
        if not isinstance(grid, Mapping):
            raise ConfigError("spec.grid", grid, "a mapping axis -> list of values")
        return cls(base=base, grid=tuple(grid.items()), by=d.get("by"), name=str(d.get("name") or "sweep"))

    @classmethod
    def from_file(cls, path: str | os.PathLike, *, base: RunConfig | None = None) -> SweepSpec:
        """Read a YAML (``.yaml``/``.yml``) or JSON spec file."""
        path = Path(path)
        spec = cls.from_dict(read_config_file(path), base=base)
        return spec if spec.name != "sweep" else dataclasses.replace(spec, name=path.stem)

    def with_axes(self, **axes) -> SweepSpec:
        """A copy with axes replaced or added (``spec.with_axes(seed=range(5))``)."""
        grid = dict(self.grid)
        for a, v in axes.items():
            grid[_axis_name(a)] = v  # canonical name, so an alias replaces its axis; values: __post_init__
        return dataclasses.replace(self, grid=tuple(grid.items()))

    # -- expansion ---------------------------------------------------------------------------------

    @property
    def axes(self) -> list[str]:
        return [a for a, _ in self.grid]

    def points(self) -> list[dict]:
        """Every grid point as {axis: value}, in product order (last axis fastest)."""
        names = self.axes
        return [dict(zip(names, combo)) for combo in itertools.product(*(v for _, v in self.grid))]

    def expand(self) -> list[tuple[dict, RunConfig]]:
        """(point, config) for every grid point; a bad value raises the ConfigError naming its field."""
        out = []
        for point in self.points():
            try:
                cfg = self.base.replace(**point) if point else self.base
            except ConfigError as err:
                err.add_note(f"at grid point {point}")
                raise
            out.append((point, cfg))
        return out

    def table_by(self) -> tuple[str, ...]:
        """The table's row keys: ``by``, else every axis except the seeds, else the algorithm."""
        if self.by:
            return self.by
        rows = tuple(a for a in self.axes if a not in SEED_AXES)
        return rows or ("algo",)


# ----------------------------------------------------------------------------- named reproduction sweeps


def _table7() -> SweepSpec:
    # Table 7 of the paper: MNIST Dir(0.1), 20 clients, ρ = 1, batch 10, lr 0.005, 2000 rounds, 5 runs,
    # on the FedALA repository's own partition (preset "mnist-dir0.1"). Ditto is not implemented here.
    from .presets import preset

    return SweepSpec(preset("mnist-dir0.1"), (("algo", ("fedavg", "fedprox", "fedavg-c", "fedala")),
                                              ("seed", (0, 1, 2, 3, 4))), name="table7-mnist-dir0.1")


def _table2() -> SweepSpec:
    # Table 2 of the paper, MNIST column: pathological, 2 labels per client, 20 clients, reference
    # settings (preset "mnist-pat", whose data source is chosen by presets.mnist_pathological_dataset), 5 runs.
    from .presets import preset

    base = preset("mnist-pat")
    return SweepSpec(base, (("algo", ("fedavg", "fedprox", "fedala")), ("seed", (0, 1, 2, 3, 4))),
                     name="table2-mnist-pat")


SWEEPS = {
    "table7-mnist-dir0.1": (_table7, "Table 7: MNIST Dir(0.1), FedAvg/FedProx/FedAvg-C/FedALA × 5 seeds, 2000 rounds"),
    "table2-mnist-pat": (_table2, "Table 2 (MNIST): pathological, FedAvg/FedProx/FedALA × 5 seeds, 2000 rounds"),
}


def sweep_preset(name: str) -> SweepSpec:
    """A named reproduction sweep (see :data:`SWEEPS`)."""
    if name not in SWEEPS:
        raise ConfigError("sweep", name, "one of " + ", ".join(SWEEPS))
    return SWEEPS[name][0]()


# ------------------------------------------------------------------------------------------- execution


def _set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(int(threads))


def _work(cfg_dict: dict, store_root: str | None, force: bool, threads: int | None,
          rounds_queue=None) -> dict | object:
    """Run one config in a worker (process pool or Ray task).

    With ``store_root`` the run goes through ``RunStore.get_or_run`` there (checkpoints, resume, atomic
    folder) and a small status dict comes back; without, the :class:`Run` itself is returned.
    ``rounds_queue`` (pool only) receives (key, round) after every round, for the progress bar.
    """
    _set_threads(threads)
    cfg = RunConfig.from_dict(cfg_dict)
    key = cfg.key()

    def report(sim, row):
        rounds_queue.put((key, int(row["round"])))

    callback = report if rounds_queue is not None else None
    if store_root is None:
        from .engine.simulate import simulate

        try:
            return simulate(cfg, progress=False, callback=callback)
        except TrainingDiverged as err:
            return err.run
    from .record.store import RunStore

    try:
        run = RunStore(store_root).get_or_run(cfg, progress=False, force=force, callback=callback)
    except TrainingDiverged as err:  # saved with status "diverged"; the sweep goes on
        return {"key": cfg.key(), "status": "diverged", "message": str(err)}
    return {"key": cfg.key(), "status": run.status, "message": ""}


def machine_cpus() -> int:
    """CPU cores this process may use (the affinity mask, not the machine's total)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def _auto_workers(cfg: RunConfig, n_runs: int) -> int:
    """One worker per CPU core on a CPU; one process on a GPU (the vectorised backend fills it)."""
    from .engine.simulate import resolve_device

    if resolve_device(cfg.device).type != "cpu":
        return 1
    return max(1, min(machine_cpus(), n_runs))


@dataclass
class SweepResult:
    """What a sweep produced: one row per grid point (``frame``), the runs, and the failures."""

    spec: SweepSpec
    frame: pd.DataFrame  # one row per grid point: the axes, run_row() columns, key, run_dir
    runs: list  # one Run per grid point (grid order), its config the point's own (same key)
    failed: dict[str, str] = field(default_factory=dict)  # config key -> error message
    computed: int = 0  # runs computed by this call (the others came from the store)
    seconds: float = 0.0  # wall time of this call

    def table(self, by: Iterable[str] | None = None) -> pd.DataFrame:
        """Mean ± std over seeds of best and final accuracy (%) per row of ``by`` (default: the spec's
        :meth:`~SweepSpec.table_by`), from completed runs only (diverged ones are listed in ``frame``)."""
        from .analysis.tables import accuracy_table

        by = list(by or self.spec.table_by())
        ok = self.frame[self.frame["status"] == "complete"] if len(self.frame) else self.frame
        return accuracy_table(ok, by=by)

    def to_markdown(self, by: Iterable[str] | None = None, digits: int = 2) -> str:
        """The table as GitHub Markdown: mean ± std (std left out for one seed)."""
        return table_markdown(self.table(by), list(by or self.spec.table_by()), digits)

    def runs_where(self, **values) -> list:
        """Runs of the grid points whose axes/config fields equal ``values`` (e.g. ``algo="fedala"``)."""
        out = []
        for (_, row), run in zip(self.frame.iterrows(), self.runs):
            if all(row.get(k) == v for k, v in values.items()):
                out.append(run)
        return out

    def accuracy_display(self, by: Iterable[str] | None = None, **kw):
        """:class:`fedala_lab.figures.tables.AccuracyTable` of the completed runs (one per config key)."""
        from .figures.tables import AccuracyTable

        return AccuracyTable.from_runs(self._unique_complete(), by=tuple(by or ("algo",)), **kw)

    def ablation_display(self, param: str = "p", algo: str | None = None, **kw):
        """:class:`fedala_lab.figures.ablation.AblationDisplay` of the ALA runs over ``param``."""
        from .figures.ablation import AblationDisplay

        runs = [r for r in self._unique_complete() if r.config.uses_ala and (algo is None or r.config.algo == algo)]
        return AblationDisplay.from_runs(runs, param=param, **kw)

    def _unique_complete(self) -> list:
        seen, out = set(), []
        for r in self.runs:
            if r.status == "complete" and r.config.key() not in seen:
                seen.add(r.config.key())
                out.append(r)
        return out

    def save(self, out: str | os.PathLike, by: Iterable[str] | None = None) -> list[Path]:
        """Write ``runs.csv`` (per grid point), ``table.csv`` and ``table.md`` into folder ``out``."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        paths = [out / "runs.csv", out / "table.csv", out / "table.md"]
        self.frame.to_csv(paths[0], index=False)
        self.table(by).to_csv(paths[1], index=False)
        head = (f"Sweep `{self.spec.name}`: test accuracy (%), pooled over clients, mean ± std over seeds, "
                f"best and final round.\n\n")
        paths[2].write_text(head + self.to_markdown(by) + "\n")
        return paths


def table_markdown(table: pd.DataFrame, by: list[str], digits: int = 2) -> str:
    """An accuracy table (from :func:`~fedala_lab.analysis.tables.accuracy_table`) as Markdown."""
    from .analysis.tables import format_mean_std

    head = [*by, "best acc %", "final acc %", "seeds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * len(by) + ["---:"] * 3) + "|"]
    for _, r in table.iterrows():
        cells = [str(r[b]) for b in by] + [format_mean_std(r["best_mean"], r["best_std"], digits),
                                           format_mean_std(r["final_mean"], r["final_std"], digits),
                                           str(int(r["n_seeds"]))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_sweep(spec: SweepSpec, *, store=None, workers: int | str = "auto", ray: bool = False,
              ray_address: str | None = None, shared_store: bool | None = None, threads: int | None = 1,
              gpus_per_run: float = 0.0, force: bool = False, progress: bool = True) -> SweepResult:
    """Run every grid point of ``spec`` not yet in ``store`` and aggregate the results.

    ``workers``: 1 = sequential in this process; n > 1 = a pool of n spawned processes; "auto" = one per
    CPU core (sequential when the runs go to a GPU). ``ray``/``ray_address``: run the grid as Ray tasks
    instead (a Ray already initialised in this process is used as is; else a local one with ``workers``
    CPUs is started, or the cluster at ``ray_address`` joined, and shut down afterwards). ``threads``:
    torch threads per run, 1 by default on every path (PERFORMANCE.md: with torch's default threads a
    busy neighbour process can make a CPU step 6–37× slower; one thread per worker is robust, and every
    path then computes the same floats); None leaves torch's setting alone.
    ``gpus_per_run``: Ray's ``num_gpus`` per task. ``force``: recompute runs even if stored.

    Runs that diverge are kept with status "diverged"; runs that fail are listed in ``failed`` — the
    sweep goes on either way. Progress: one bar over the grid's distinct runs.
    """
    from tqdm.auto import tqdm

    from .record.store import RunStore

    t0 = time.perf_counter()
    store = store if isinstance(store, RunStore) else RunStore(store)
    store.root.mkdir(parents=True, exist_ok=True)
    root = str(store.root.resolve())
    pairs = spec.expand()
    unique: dict[str, RunConfig] = {}
    for _, cfg in pairs:
        unique.setdefault(cfg.key(), cfg)
    done = {k for k, c in unique.items() if not force and store.has(c)}
    todo = [c for k, c in unique.items() if k not in done]
    failed: dict[str, str] = {}
    loaded: dict = {}  # key -> Run, filled by the paths that have the run in this process

    bar = tqdm(total=len(unique), initial=len(done), desc=f"sweep {spec.name}", unit="run", disable=not progress,
               dynamic_ncols=True)
    try:
        if todo and (ray or ray_address):
            _run_ray(todo, root, force, threads, gpus_per_run, workers, ray_address,
                     shared_store if shared_store is not None else ray_address is None, store, bar, failed,
                     loaded)
        elif todo:
            n = _auto_workers(todo[0], len(todo)) if workers == "auto" else int(workers)
            if n < 1:
                raise ConfigError("workers", workers, "a positive integer or 'auto'")
            if n == 1:
                _run_sequential(todo, store, force, threads, bar, failed, loaded)
            else:
                _run_pool(todo, root, force, threads, min(n, len(todo)), bar, failed)
    finally:
        bar.close()

    runs, rows = [], []
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
        run = dataclasses.replace(run, config=cfg)  # the point's own config (same key, same result)
        runs.append(run)
        rows.append(_row(run, point, k))
    frame = pd.DataFrame(rows)
    return SweepResult(spec, frame, runs, failed, computed=len(todo) - len(failed),
                       seconds=time.perf_counter() - t0)


def _row(run, point: dict, key: str) -> dict:
    from .analysis.tables import run_row

    row = run_row(run)
    # the point's values; seed axes last, so data_seed stays the last column of runs.csv
    row.update(sorted(point.items(), key=lambda kv: kv[0] in SEED_AXES))
    row["key"] = key
    row["run_dir"] = str(run.path) if run.path else ""
    return row


def _describe(cfg: RunConfig) -> str:
    return f"{cfg.algo} s{cfg.seed}"


def _finish(bar, cfg: RunConfig, result, failed: dict) -> None:
    if isinstance(result, BaseException):
        failed[cfg.key()] = f"{type(result).__name__}: {result}"
    elif isinstance(result, dict) and result.get("status") == "diverged":
        bar.write(f"diverged: {cfg.slug()} ({result.get('message', '')[:200]})")
    bar.set_postfix_str(f"last: {_describe(cfg)}", refresh=False)
    bar.update(1)


def _run_sequential(todo, store, force, threads, bar, failed, runs) -> None:
    from .engine.simulate import cpu_threads

    with cpu_threads(int(threads) if threads else None):
        for cfg in todo:
            def show(sim, row, cfg=cfg):  # round-level progress inside the grid bar
                bar.set_postfix_str(f"{_describe(cfg)} round {row['round']}/{cfg.rounds}")

            try:
                runs[cfg.key()] = store.get_or_run(cfg, progress=False, force=force, callback=show)
                result = {"status": "complete"}
            except TrainingDiverged as err:
                if err.run is not None:  # saved by the store with status "diverged"
                    runs[cfg.key()] = err.run
                result = {"status": "diverged", "message": str(err)}
            except FedalaError as err:
                result = err
            _finish(bar, cfg, result, failed)


def _run_pool(todo, root, force, threads, n, bar, failed) -> None:
    import multiprocessing as mp
    import queue as queue_mod
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    # spawn, not fork: a forked copy of a process that already runs torch threads can deadlock
    ctx = mp.get_context("spawn")
    # no initializer: _work sets each task's threads before any torch work
    with ctx.Manager() as manager, ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
        rounds = manager.Queue()  # workers report each finished round; the bar shows the runs in flight
        futures = {pool.submit(_work, c.to_dict(), root, force, threads, rounds): c for c in todo}
        by_key = {c.key(): c for c in todo}
        in_flight: dict[str, int] = {}
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            with contextlib.suppress(queue_mod.Empty, OSError, EOFError):
                while True:
                    k, t = rounds.get_nowait()
                    in_flight[k] = t
            for fut in finished:
                cfg = futures[fut]
                in_flight.pop(cfg.key(), None)
                try:
                    result = fut.result()
                except Exception as err:  # noqa: BLE001 - one failed run must not stop the others
                    result = err
                _finish(bar, cfg, result, failed)
            if in_flight and not finished:
                bar.set_postfix_str(" | ".join(f"{_describe(by_key[k])} round {t}/{by_key[k].rounds}"
                                               for k, t in in_flight.items()))


def ray_module():
    """Import Ray, or say how to install it (an optional dependency)."""
    try:
        import ray
    except ImportError:
        raise FedalaError("running a sweep on Ray needs Ray, an optional dependency: "
                          "pip install 'fedala_lab[ray]' (or pip install ray)") from None
    return ray


def _run_ray(todo, root, force, threads, gpus, workers, address, shared, store, bar, failed, runs) -> None:
    ray = ray_module()
    started = False
    if not ray.is_initialized():
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # nothing leaves the machine unasked
        if address:
            ray.init(address=address)
        else:
            n = machine_cpus() if workers in ("auto", 1, None) else int(workers)
            ray.init(num_cpus=n, include_dashboard=False)
        started = True
    try:
        task = ray.remote(num_cpus=threads or 1, num_gpus=gpus, max_retries=0)(_work)
        refs = {task.remote(c.to_dict(), root if shared else None, force, threads): c for c in todo}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                cfg = refs[ref]
                try:
                    result = ray.get(ref)
                    if not isinstance(result, dict):  # a Run from a worker that cannot see the store
                        store.save(result, replace=force)
                        runs[cfg.key()] = result
                        result = {"status": result.status}
                except Exception as err:  # noqa: BLE001 - a failed task (RayTaskError wraps its cause)
                    result = err
                _finish(bar, cfg, result, failed)
    finally:
        if started:
            ray.shutdown()


# ----------------------------------------------------------------------------------------------- CLI


def _parse_list(text: str, axis: str) -> list:
    """``"0,1,2"`` or ``"0-4"`` (an integer range, both ends included) → values."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    out: list = []
    for t in items:
        lo, sep, hi = t.partition("-")
        if sep and lo.isdigit() and hi.isdigit():
            if int(hi) < int(lo):
                raise ConfigError(axis, t, "a range low-high with low <= high")
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(parse_value(t))
    if not out:
        raise ConfigError(axis, text, "a comma-separated list of values")
    return out


def spec_from_args(args) -> SweepSpec:
    """The sweep the command line asks for: a spec file or named sweep, then flags on top."""
    from .cli import config_and_changes

    if args.spec and args.sweep:
        raise FedalaError("give either --spec FILE or --sweep NAME, not both")
    base = None
    if args.preset:
        from .presets import preset

        base = preset(args.preset)
    if args.spec:
        spec = SweepSpec.from_file(args.spec, base=base)
    elif args.sweep:
        spec = sweep_preset(args.sweep)
        if base is not None:
            spec = dataclasses.replace(spec, base=base)
    else:
        spec = SweepSpec(base=base or RunConfig(), name=args.name or "sweep")
    if args.name:
        spec = dataclasses.replace(spec, name=args.name)

    cfg, changes = config_and_changes(args, spec.base)  # applied after the clash check below

    axes = {}
    if args.algos:
        axes["algo"] = [a.strip() for a in args.algos.split(",") if a.strip()]
    for item in args.grid:
        if "=" not in item:
            raise FedalaError(f"--grid {item!r}: expected AXIS=V1,V2,… (e.g. --grid p=1,2,3)")
        a, v = item.split("=", 1)
        axes[_axis_name(a)] = _parse_list(v, a.strip())
    if args.seeds:  # last, so that seeds vary fastest: a half-finished sweep has whole settings
        axes["seed"] = _parse_list(args.seeds, "seeds")
    grid_axes = set(spec.axes) | set(axes)
    clash = sorted(k for k in changes if k in grid_axes)
    if clash:
        raise FedalaError(f"--{clash[0].replace('_', '-')} sets a field that is also a grid axis; "
                          f"change its values with --grid {clash[0]}=… instead")
    if changes:
        cfg = cfg.replace(**changes)
    spec = dataclasses.replace(spec, base=cfg)
    if axes:
        spec = spec.with_axes(**axes)
    if args.by:
        spec = dataclasses.replace(spec, by=tuple(b.strip() for b in args.by.split(",") if b.strip()))
    spec.expand()  # every grid point validated before anything runs
    return spec


def cmd_sweep(args) -> int:
    from .record.store import RunStore

    if args.list:
        for name, (_, text) in SWEEPS.items():
            print(f"{name:<22} {text}")
        return 0
    spec = spec_from_args(args)
    store = RunStore(args.store)
    pairs = spec.expand()
    n_unique = len({c.key() for _, c in pairs})
    if args.dry_run:
        print(f"sweep {spec.name}: {len(pairs)} grid points, {n_unique} distinct runs; axes "
              + ", ".join(f"{a}={list(v)}" for a, v in spec.grid))
        seen = set()
        for point, cfg in pairs:
            k = cfg.key()
            state = "stored" if store.has(cfg) else (
                "same run as above" if k in seen else "to run")
            seen.add(k)
            print(f"  {json.dumps(point)}  {store.name_for(cfg)}  [{state}]")
        return 0
    workers = args.workers
    if workers != "auto":
        try:
            workers = int(workers)
        except ValueError:
            raise ConfigError("workers", workers, "a positive integer or auto") from None
    result = run_sweep(spec, store=store, workers=workers, ray=args.ray, ray_address=args.ray_address,
                       shared_store=True if args.shared_store else None, threads=args.threads,
                       gpus_per_run=args.gpus_per_run, force=args.force,
                       progress=not args.no_progress and not args.json)
    by = list(spec.table_by())
    if args.json:
        for rec in result.table(by).to_dict(orient="records"):
            print(json.dumps({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in rec.items()}))
    else:
        print(f"sweep {spec.name}: {len(pairs)} grid points, {n_unique} distinct runs "
              f"({result.computed} computed, {n_unique - result.computed - len(result.failed)} from the store), "
              f"{result.seconds:.1f} s")
        print(result.to_markdown(by))
    if args.out:
        for p in result.save(args.out, by):
            if not args.json:
                print(f"wrote {p}")
    for k, msg in result.failed.items():
        import sys

        sys.stderr.write(f"fedala-lab: run {k} failed: {msg}\n")
    return 1 if result.failed else 0


def add_subcommand(sub) -> None:
    """Register ``fedala-lab sweep`` (called by :func:`fedala_lab.cli.build_parser`)."""
    from .cli import _add_run_flags

    p = sub.add_parser("sweep", help="run a grid (algorithms × seeds × p × s × β × clients …) and print "
                                     "mean ± std tables",
                       description="Run every point of a grid of configs (skipping those already in the run "
                                   "store) and aggregate best/final accuracy over seeds.")
    p.add_argument("--spec", type=Path, help="sweep file (YAML/JSON): name, preset, config, grid, by")
    p.add_argument("--sweep", help="a named reproduction sweep: " + ", ".join(SWEEPS))
    p.add_argument("--list", action="store_true", help="list the named sweeps and exit")
    p.add_argument("--name", help="name of the sweep (progress bar, table heading)")
    _add_run_flags(p)  # --preset, --config, --algos (an axis), every run flag (the base), --set
    p.add_argument("--seeds", help="seed axis: 0,1,2 or 0-4")
    p.add_argument("--grid", action="append", default=[], metavar="AXIS=V1,V2",
                   help="another axis, e.g. --grid p=1,2,3 --grid beta=0.1,0.5 (repeatable)")
    p.add_argument("--by", help="table rows, comma-separated (default: every axis but the seeds)")
    p.add_argument("--workers", default="auto", help="auto (default) = one process per CPU core, sequential "
                                                     "on a GPU; 1 = sequential in this process; n = n processes")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1: robust on a "
                                                          "shared CPU, see PERFORMANCE.md)")
    p.add_argument("--ray", action="store_true", help="run on a Ray started here (pip install ray)")
    p.add_argument("--ray-address", default=None, help="run on this Ray cluster (auto, ray://host:10001)")
    p.add_argument("--shared-store", action="store_true",
                   help="with --ray-address: the store is on a filesystem every node sees (workers write it)")
    p.add_argument("--gpus-per-run", type=float, default=0.0, help="Ray: GPUs reserved per run (e.g. 0.5)")
    p.add_argument("--store", default=None, help="run store folder (default: $FEDALA_LAB_RUNS or ./runs)")
    p.add_argument("--out", default=None, help="folder for runs.csv, table.csv and table.md")
    p.add_argument("--dry-run", action="store_true", help="list the grid points and what is stored; run nothing")
    p.add_argument("--json", action="store_true", help="the table as one JSON object per row")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--force", action="store_true", help="recompute runs even if the store has them")
    p.set_defaults(func=cmd_sweep)


__all__ = ["SWEEPS", "SweepResult", "SweepSpec", "add_subcommand", "mnist_pathological_dataset", "run_sweep",
           "spec_from_args", "sweep_preset", "table_markdown"]
