"""Sweeps: one base config, a grid of values (a :class:`~fedala_lab.experiments.plans.SweepSpec`), every
combination run once; the tables over seeds are analysis's (:func:`fedala_lab.analysis.tables.sweep_table`).

The paper reports mean ± std over 5 runs and grids over p, s, β and client counts. A sweep is

    base config  ×  grid {axis: values}   →   one RunConfig per grid point   →   runs   →   table

    fedala-lab sweep --preset teach --algos fedavg,fedala --grid p=1,2 --seeds 0,1,2
    fedala-lab sweep --spec my_sweep.yaml --workers 2
    fedala-lab sweep --sweep table7-mnist-dir0.1 --ray-address auto        # a Ray cluster
    fedala-lab sweep --spec my_sweep.yaml --ray --out results/my_sweep     # a local Ray

How runs are executed (all three give the same numbers, tested; the results land in the run store):

- **sequential** (``workers=1``): in this process, one run after the other;
- **a process pool** (``workers=n`` or ``"auto"``: one worker per CPU core on CPU, sequential on a GPU),
  spawned processes with one torch thread each (docs/design.md#performance: one thread per worker is
  robust and 2 workers × 1 thread is the fastest use of a 2-core machine);
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
import math
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import pandas as pd

from ..algorithms.plugins import check_importable, load_plugins, plugin_modules
from ..algorithms.registry import specs
from ..compute.parallel import available_cpus, main_not_rerun
from ..config import RunConfig
from ..errors import ConfigError, FedalaError, RunCancelled, SweepFailed, TrainingDiverged
from ..record.run import run_row
from ..record.store import open_store
from .plans import SEED_AXES, SweepSpec
from .presets import check_partition
from .runs import get_or_run
from .trackers import Tracker, log_run

# ------------------------------------------------------------------------------------------- execution


def _set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(int(threads))


def run_in_worker(cfg_dict: dict, store_root: str | None, force: bool, threads: int | None,
          rounds_queue=None, train_workers: int | None = None, trackers=(), plugins=(),
          expect: str | None = None, stop=None) -> dict | object:
    """Run one config in a worker (process pool or Ray task).

    With ``store_root`` the run goes through :func:`get_or_run` there (checkpoints, resume, atomic
    folder) and a small status dict comes back; without, the :class:`Run` itself is returned.
    ``rounds_queue`` (pool only) receives (key, round, accuracy) after every round, for the progress bar.
    ``train_workers``: processes per run for local training on a CPU (the "workers" backend): a pool of
    n runs at once gives each cores ÷ n, so that runs and their training processes fit the cores.
    ``trackers`` log the run as it goes (with ``store_root`` only; the sweep logs the others afterwards).
    ``plugins``: (module, folder) pairs to import first (:func:`~fedala_lab.algorithms.plugins.plugin_modules`:
    the caller's registered algorithms). ``expect``: the run key the caller computed; a worker whose code
    gives another (fedala_lab or a plugin edited while the sweep runs) computes nothing and says so.
    ``stop`` (an event, experiments/pool.py): once set, the run stops after its current round (its checkpoint
    kept) and comes back as {"status": "stopped", "run": what it recorded}; set before it starts, nothing runs.
    """
    _set_threads(threads)
    try:
        load_plugins([m for m, _ in plugins], paths=[p for _, p in plugins])
        cfg = RunConfig.from_dict(cfg_dict)
    except FedalaError as err:
        return {"key": "", "status": "failed", "message": failure(err)}
    key = cfg.key()
    if expect is not None and key != expect:
        return {"key": expect, "status": "failed", "message": (
            f"this worker's code is not the caller's: it keys the run {key}, the caller {expect} (fedala_lab or a "
            "plugin was edited while the sweep ran, or the worker imports another installation); nothing was "
            "computed: run the sweep again")}

    def report(sim, row):
        if rounds_queue is not None:
            rounds_queue.put((key, int(row["round"]), float(row["acc"])))
        return stop is None or not stop.is_set()

    callback = report if rounds_queue is not None or stop is not None else None
    if stop is not None and stop.is_set():
        return {"key": key, "status": "not started", "message": ""}
    try:
        if store_root is None:
            from ..engine.simulate import simulate

            try:
                return simulate(cfg, progress=False, callback=callback, workers=train_workers)
            except TrainingDiverged as err:
                return err.run
        run = get_or_run(cfg, store_root, progress=False, force=force, callback=callback, workers=train_workers,
                         trackers=trackers)
    except TrainingDiverged as err:  # saved with status "diverged"; the sweep goes on
        return {"key": key, "status": "diverged", "message": str(err)}
    except RunCancelled as err:  # its checkpoint is kept: asking again resumes it
        return {"key": key, "status": "stopped", "message": str(err), "run": err.run}
    except Exception as err:  # noqa: BLE001 - its message comes back as text, whatever it is (and pickles)
        return {"key": key, "status": "failed", "message": failure(err)}
    return {"key": key, "status": run.status, "message": ""}


def failure(err: BaseException) -> str:
    """A failed run's one-line reason: a FedalaError's own message, else the error's type and message."""
    text = " ".join(str(err).split())
    return text if isinstance(err, FedalaError) else f"{type(err).__name__}: {text}"


def machine_cpus() -> int:
    """CPU cores this process may use (the affinity mask, not the machine's total)."""
    return available_cpus()


def _auto_workers(cfg: RunConfig, n_runs: int) -> int:
    """One worker per CPU core on a CPU; one process on a GPU (the vectorised backend fills it)."""
    from ..compute.device import resolve_device

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

    def runs_where(self, **values) -> list:
        """Runs of the grid points whose axes/config fields equal ``values`` (e.g. ``algo="fedala"``)."""
        out = []
        for (_, row), run in zip(self.frame.iterrows(), self.runs):
            if all(row.get(k) == v for k, v in values.items()):
                out.append(run)
        return out

    @property
    def diverged(self) -> dict[str, str]:
        """The grid points' runs that diverged: {config key: the divergence message} (each config once)."""
        return {r.config.key(): r.message for r in self.runs if r.status == "diverged"}

    def complete_runs(self) -> list:
        """The completed runs, each config once (grid points sharing a key share a run)."""
        seen, out = set(), []
        for r in self.runs:
            if r.status == "complete" and r.config.key() not in seen:
                seen.add(r.config.key())
                out.append(r)
        return out


def run_sweep(spec: SweepSpec, *, store=None, workers: int | str = "auto", ray: bool = False,
              ray_address: str | None = None, shared_store: bool | None = None, threads: int | None = 1,
              gpus_per_run: float = 0.0, force: bool = False, progress: bool = True,
              trackers: Iterable[Tracker] = ()) -> SweepResult:
    """Run every grid point of ``spec`` not yet in ``store`` and aggregate the results.

    ``workers``: 1 = sequential in this process; n > 1 = a pool of n spawned processes; "auto" = one per
    CPU core (sequential when the runs go to a GPU). ``ray``/``ray_address``: run the grid as Ray tasks
    instead (a Ray already initialised in this process is used as is; else a local one with ``workers``
    CPUs is started, or the cluster at ``ray_address`` joined, and shut down afterwards). ``threads``:
    torch threads per run, 1 by default on every path (docs/design.md#performance: with torch's default
    threads a busy neighbour process can make a CPU step 6–37× slower; one thread per worker is robust, and
    every path then computes the same floats); None leaves torch's setting alone.
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
    from ..progress import bar as tqdm  # a notebook keeps how it ended

    local_ray = ray and not ray_address
    check_execution(workers=workers, threads=threads, gpus_per_run=gpus_per_run, ray=bool(ray or ray_address),
                    local_ray=local_ray)
    if ray_address:
        check_ray_address(ray_address)
    t0 = time.perf_counter()
    store = open_store(store)
    pairs = spec.expand()
    unique: dict[str, RunConfig] = {}
    for _, cfg in pairs:
        unique.setdefault(cfg.key(), cfg)
    # stored: finished, or diverged (the same config diverges the same way; listed from the store)
    done = {k for k, c in unique.items() if not force and store.status(c).state in ("complete", "diverged")}
    todo = [c for k, c in unique.items() if k not in done]
    for cfg in todo:
        check_partition(cfg)
    store.root.mkdir(parents=True, exist_ok=True)  # only now: a refusal above leaves nothing behind
    root = str(store.root.resolve())
    failed: dict[str, str] = {}
    loaded: dict = {}  # key -> Run, filled by the paths that have the run in this process

    bar = tqdm(total=len(unique), initial=len(done), desc=f"sweep {spec.name}", unit="run", disable=not progress,
               dynamic_ncols=True)
    n = _auto_workers(todo[0], len(todo)) if todo and workers == "auto" else workers
    if todo and (ray or ray_address or n != 1):
        check_importable({c.algorithm.base.name: c.algorithm.base for c in todo}.values(),
                         "a sweep on Ray" if ray or ray_address else f"a sweep with {min(n, len(todo))} worker processes")
    try:
        if todo and (ray or ray_address):
            _run_ray(todo, root, force, threads, gpus_per_run, workers, ray_address,
                     shared_store if shared_store is not None else ray_address is None, store, bar, failed,
                     loaded, trackers=() if ray_address else trackers)  # a cluster's nodes may not see DIR
        elif todo:
            if n == 1:
                _run_sequential(todo, store, force, threads, bar, failed, loaded, trackers)
            else:
                _run_pool(todo, root, force, threads, min(n, len(todo)), bar, failed, trackers)
    finally:
        bar.close()

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


def _describe(cfg: RunConfig) -> str:
    return f"{cfg.algo} s{cfg.seed}"


def _finish(bar, cfg: RunConfig, result, failed: dict) -> None:
    # a diverged run is in the store with its message (the result lists it); nothing is printed here, so
    # that a caller's stdout (JSON lines) stays its own
    if isinstance(result, BaseException):
        failed[cfg.key()] = failure(result)
    elif isinstance(result, dict) and result.get("status") == "failed":
        failed[cfg.key()] = result["message"]
    bar.set_postfix_str(f"last: {_describe(cfg)}", refresh=False)
    bar.update(1)


def _run_sequential(todo, store, force, threads, bar, failed, runs, trackers) -> None:
    from ..compute.device import cpu_threads

    with cpu_threads(int(threads) if threads else None):
        for cfg in todo:
            def show(sim, row, cfg=cfg):  # round-level progress inside the grid bar
                bar.set_postfix_str(f"{_describe(cfg)} round {row['round']}/{cfg.rounds}")

            try:
                runs[cfg.key()] = get_or_run(cfg, store, progress=False, force=force, callback=show,
                                             trackers=trackers)
                result = {"status": "complete"}
            except TrainingDiverged as err:
                if err.run is not None:  # saved by the store with status "diverged"
                    runs[cfg.key()] = err.run
                result = {"status": "diverged", "message": str(err)}
            except Exception as err:  # noqa: BLE001 - a failed run (a bug in a hook too) must not stop the others
                result = err
            _finish(bar, cfg, result, failed)


def _run_pool(todo, root, force, threads, n, bar, failed, trackers) -> None:
    import multiprocessing as mp
    import queue as queue_mod
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    # spawn, not fork: a forked copy of a process that already runs torch threads can deadlock
    ctx = mp.get_context("spawn")
    # no initializer: run_in_worker sets each task's threads before any torch work
    with contextlib.ExitStack() as stack:
        # the manager's and the pool's processes start here (a spawn pool starts one per submit, up to n):
        # none re-runs the caller's script, so a script without a __main__ guard works too
        with main_not_rerun():
            manager = stack.enter_context(ctx.Manager())
            pool = stack.enter_context(ProcessPoolExecutor(max_workers=n, mp_context=ctx))
            rounds = manager.Queue()  # workers report each finished round; the bar shows the runs in flight
            per_run = max(1, machine_cpus() // n)  # training processes per run (compute/workers.py)
            plugins = plugin_modules(specs())
            futures = {pool.submit(run_in_worker, c.to_dict(), root, force, threads, rounds, per_run, trackers,
                                   plugins, c.key()): c for c in todo}
        by_key = {c.key(): c for c in todo}
        in_flight: dict[str, int] = {}
        pending = set(futures)
        while pending:
            finished, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            with contextlib.suppress(queue_mod.Empty, OSError, EOFError):
                while True:
                    k, t, _ = rounds.get_nowait()
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


def check_execution(*, workers="auto", threads=1, gpus_per_run=0.0, ray: bool = False,
                    local_ray: bool = False) -> None:
    """Refuse bad execution settings of a sweep before anything starts, each with one line naming it.

    A GPU request is checked against the GPUs there are (a Ray started here: this machine's), because Ray
    would keep a task that asks for more waiting forever; a cluster's are checked once joined (:func:`_run_ray`).
    """
    if workers != "auto" and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise ConfigError("workers", workers, "a whole number >= 1 (processes) or auto (one per CPU core)")
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise ConfigError("threads", threads, "a whole number >= 1 (torch threads per run)")
    g = gpus_per_run
    if not isinstance(g, (int, float)) or isinstance(g, bool) or not math.isfinite(g) or g < 0 or (
            g > 1 and not float(g).is_integer()):
        raise ConfigError("gpus_per_run", g, "a number >= 0: a share of one GPU (e.g. 0.5) or a whole number of GPUs")
    if g and not ray:
        raise ConfigError("gpus_per_run", g, "0 without Ray (GPUs are reserved per Ray task: add --ray or "
                          "--ray-address)")
    if g and local_ray:
        import torch

        have = torch.cuda.device_count()
        if g > have:
            raise ConfigError("gpus_per_run", g, f"at most the {have} GPU(s) of this machine (a Ray task asking "
                              "for more would wait forever)")


def check_ray_address(address: str) -> None:
    """``auto`` or ``[ray://]host:port`` where something answers (checked with a short TCP connection: Ray
    itself retries an address where nothing listens for minutes)."""
    import re
    import socket

    if address == "auto":
        return
    m = re.fullmatch(r"(?:ray://)?(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d{1,5})", address or "")
    allowed = "auto, host:port or ray://host:port of a running Ray cluster"
    if m is None or not 1 <= int(m[2]) <= 65535:
        raise ConfigError("ray_address", address, allowed)
    try:
        socket.create_connection((m[1].strip("[]"), int(m[2])), timeout=3).close()
    except OSError as err:
        raise ConfigError("ray_address", address, allowed,
                          f"nothing answers there: {err.strerror or err}") from None


def ray_module():
    """Import Ray, or say how to install it (an optional dependency)."""
    try:
        import ray
    except ImportError:
        raise FedalaError("running a sweep on Ray needs Ray, an optional dependency: "
                          "pip install 'fedala_lab[ray]' (or pip install ray)") from None
    return ray


def _run_ray(todo, root, force, threads, gpus, workers, address, shared, store, bar, failed, runs,
             trackers=()) -> None:
    ray = ray_module()
    started = False
    if not ray.is_initialized():
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # nothing leaves the machine unasked
        try:
            if address:
                ray.init(address=address)
            else:
                n = machine_cpus() if workers in ("auto", 1, None) else int(workers)
                ray.init(num_cpus=n, include_dashboard=False)
        except Exception as err:  # noqa: BLE001 - Ray's errors at connection time are of many kinds
            raise FedalaError(f"cannot start Ray{f' at {address}' if address else ''}: {failure(err)}") from None
        started = True
    try:
        have = ray.cluster_resources().get("GPU", 0)
        if gpus > have:  # a task asking for more would wait forever
            raise ConfigError("gpus_per_run", gpus, f"at most the {have:g} GPU(s) of the Ray cluster")
        task = ray.remote(num_cpus=threads or 1, num_gpus=gpus, max_retries=0)(run_in_worker)
        plugins = plugin_modules(specs())
        refs = {task.remote(c.to_dict(), root if shared else None, force, threads, None, None, trackers, plugins,
                            c.key()): c for c in todo}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                cfg = refs[ref]
                try:
                    result = ray.get(ref)
                    if result is not None and not isinstance(result, dict):  # a Run from a worker without the store
                        store.save(result, replace=force)
                        runs[cfg.key()] = result
                        result = {"status": result.status}
                except Exception as err:  # noqa: BLE001 - a failed task (RayTaskError wraps its cause)
                    result = err
                _finish(bar, cfg, result, failed)
    finally:
        if started:
            ray.shutdown()


