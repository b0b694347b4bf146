"""The processes that compute runs side by side (experiments/execute.py's pool), and what each run is there.

- :func:`run_in_worker`: one run, in whichever process computes it (this one, a pool process, a Ray task).
- :class:`RunPool`: processes that stay up between calls (the app keeps one for its clicks; a sweep or
  :func:`~fedala_lab.experiments.execute.get_or_run_many` makes one for the call).
- :func:`processes_setting`, :func:`most_processes`, :func:`default_processes`: how many, at most, by default.

A click asks for a few independent runs (FedAvg, FedALA and Local by default). On the lecture's small models
each run is bound by Python's per-step overhead on one core, so threads of one process gain little (they share
the interpreter), while processes run them at once: on a 2-core laptop a click of three teach runs takes about
the time of the longest pair instead of the sum (docs/design.md#performance). Starting a process costs seconds
(importing torch), so the processes are spawned once, warmed (imports, data, the engine's first steps) before
the first click, and kept.

Each run goes through :func:`run_in_worker` and :func:`~fedala_lab.experiments.runs.get_or_run` into the
caller's run store: the store's lock, checkpoints, a run folder written under a temporary name and renamed. Every process runs one torch thread, as the caller's simulations do
on a CPU, so a run computed here is the run computed in the caller's process, bit for bit (tested).

    pool = RunPool(2, store_root)
    pool.start([warm_cfg])                       # returns at once; the processes warm up meanwhile
    results = pool.compute(cfgs, stop=event, on_round=lambda key, t, acc: ...)
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from ..algorithms.plugins import load_plugins, plugin_modules, run_specs
from ..compute.parallel import available_cpus, main_not_rerun
from ..config import RunConfig
from ..environ import PROCESSES, env_count
from ..errors import ConfigError, FedalaError, RunCancelled, TrainingDiverged
from .runs import get_or_run, run_unsaved

# How long a warming process waits for the others to take their own warm-up (so that each process takes one).
WARM_WAIT_S = 60.0
POLL_S = 0.05  # how often compute() looks at the rounds reported and at the stop flag
PARENT_POLL_S = 1.0  # how often a pool process checks that the app is still there
SLOTS = 64  # compute() calls in flight at once (the app serves --concurrency clicks at a time)


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
    A run refused on purpose (a FedalaError: a split that cannot be drawn) comes back "failed" with its
    ``error`` besides its ``message``.
    """
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    try:
        for module, folder in plugins:  # each from the folder the caller imported it from
            load_plugins([module], paths=[folder])
        cfg = RunConfig.from_dict(cfg_dict)
    except FedalaError as err:
        return {"key": "", "status": "failed", "message": failure(err), "error": err}
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
            try:
                return run_unsaved(cfg, progress=False, callback=callback, workers=train_workers)
            except TrainingDiverged as err:
                return err.run
        run = get_or_run(cfg, store_root, progress=False, force=force, callback=callback, workers=train_workers,
                         trackers=trackers)
    except TrainingDiverged as err:  # saved with status "diverged"; the sweep goes on
        return {"key": key, "status": "diverged", "message": str(err)}
    except RunCancelled as err:  # its checkpoint is kept: asking again resumes it
        return {"key": key, "status": "stopped", "message": str(err), "run": err.run}
    except FedalaError as err:  # the error itself too: it pickles whole, and the caller may raise it
        return {"key": key, "status": "failed", "message": failure(err), "error": err}
    except Exception as err:  # noqa: BLE001 - its message comes back as text, whatever it is (and pickles)
        return {"key": key, "status": "failed", "message": failure(err)}
    return {"key": key, "status": run.status, "message": ""}


def failure(err: BaseException) -> str:
    """A failed run's one-line reason: a FedalaError's own message, else the error's type and message."""
    text = " ".join(str(err).split())
    return text if isinstance(err, FedalaError) else f"{type(err).__name__}: {text}"


# What every pool process is given when it starts (_init): where it reports rounds, the calls' stop flags,
# the warm-up's barrier. Module globals there, set once per process.
_SHARED: dict = {}


def _init(parent: int, rounds, flags, barrier) -> None:
    """A pool process's start: keep what it shares with the caller, and exit as soon as the caller is gone
    (killed, say, by a signal that runs no exit handler) instead of waiting forever for work."""
    _SHARED.update(rounds=rounds, flags=flags, barrier=barrier)

    def follow():
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=follow, name="follow-parent", daemon=True).start()


@dataclass(frozen=True)
class _Call:
    """One :meth:`RunPool.compute` call as its runs see it: ``put`` reports a round, ``is_set`` reads its stop
    flag (what :func:`run_in_worker` takes as its queue and its stop event)."""

    slot: int

    def put(self, item) -> None:
        _SHARED["rounds"].put((self.slot, *item))  # written to the pipe before put returns (a SimpleQueue)

    def is_set(self) -> bool:
        return bool(_SHARED["flags"][self.slot])


def _warm(cfg_dicts: list[dict]) -> None:
    """In a pool process: import the engine and run each config for its rounds without saving anything (the
    data built, the step functions traced), then wait for the other processes so that each takes one warm-up."""
    import torch

    torch.set_num_threads(1)
    with contextlib.suppress(Exception):  # a warm-up must never break the pool: the real run reports problems
        for d in cfg_dicts:
            run_unsaved(RunConfig.from_dict(d))
    with contextlib.suppress(Exception):
        _SHARED["barrier"].wait(WARM_WAIT_S)


class RunPool:
    """``processes`` spawned worker processes (one torch thread each) that compute runs into the run store at
    ``store_root``, several at once. Thread-safe: calls of :meth:`compute` from several threads share the
    processes (their runs queue)."""

    def __init__(self, processes: int, store_root):
        if not isinstance(processes, int) or isinstance(processes, bool) or processes < 2:
            raise ConfigError("processes", processes, "an integer >= 2 (1: compute in the caller's process)")
        _within_machine("processes", processes, processes)
        self.processes = processes
        self.store_root = str(store_root)
        # spawn, not fork: a forked copy of a process that already runs torch threads can deadlock
        self._ctx = mp.get_context("spawn")
        self._rounds = self._ctx.SimpleQueue()  # (slot, key, round, accuracy) from every process
        self._flags = self._ctx.RawArray("b", SLOTS)  # a stop flag per compute() call in flight
        self._barrier = self._ctx.Barrier(processes)
        self._lock = threading.Lock()
        self._free = list(range(SLOTS))
        self._inbox: dict[int, list] = {}  # slot → rounds reported, not yet handed to that call
        self._pool: ProcessPoolExecutor | None = None

    def start(self, warm: Iterable[RunConfig] = ()) -> None:
        """Spawn the processes (if not yet running) and have each run ``warm`` once, unsaved; returns at once."""
        cfgs = [c.to_dict() for c in warm]
        with self._lock, main_not_rerun():  # the processes start now: none re-runs the caller's script
            pool = self._ensure()
            for _ in range(self.processes):
                pool.submit(_warm, cfgs)

    def _ensure(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.processes, mp_context=self._ctx, initializer=_init,
                                             initargs=(os.getpid(), self._rounds, self._flags, self._barrier))
        return self._pool

    def compute(self, cfgs: Iterable[RunConfig], *, stop: threading.Event | None = None,
                on_round: Callable[[str, int, float], None] | None = None, force: bool = False,
                trackers=()) -> dict[str, dict]:
        """Compute ``cfgs`` (into the store; a stored run is served from it) in the processes, at most
        ``processes`` at once, in the order given. ``on_round(key, round, accuracy)`` is called here, in the
        caller's thread, for every round a process finishes; once ``stop`` is set, running runs stop after
        their current round (their checkpoints kept) and waiting ones do not start. ``force``: recompute stored
        runs; ``trackers`` log each run as it goes. (experiments/execute.py's compute is the way in.)

        Returns, by config key, what :func:`run_in_worker` returned: ``status``
        ("complete", "diverged", "failed" with its ``message``, "stopped" with ``run``: what it recorded, or
        "not started"). A process that died fails its runs ("failed"); the pool is then rebuilt at the next call.
        """
        cfgs = list(cfgs)
        plugins = plugin_modules(run_specs(cfgs))
        per_run = max(1, available_cpus() // self.processes)  # training processes per run (compute/workers.py)
        with self._lock:
            if not self._free:
                raise RuntimeError(f"more than {SLOTS} calls at once")
            slot = self._free.pop()
            self._flags[slot], self._inbox[slot] = 0, []
            with main_not_rerun():  # a process that died is replaced at a submit
                pool = self._ensure()
                # one run into the store, one torch thread; its rounds reported and its stop flag read through
                # the call's _Call
                call = _Call(slot)
                futures = {pool.submit(run_in_worker, c.to_dict(), self.store_root, force, 1, call, per_run,
                                       trackers, plugins, c.key(), call): c.key() for c in cfgs}
        results: dict[str, dict] = {}
        pending = set(futures)

        def drain():
            with self._lock:
                with contextlib.suppress(OSError, EOFError):
                    while not self._rounds.empty():
                        s, *item = self._rounds.get()
                        if s in self._inbox:
                            self._inbox[s].append(item)
                mine, self._inbox[slot] = self._inbox[slot], []
            for key, t, acc in mine:
                if on_round is not None:
                    on_round(key, t, acc)

        try:
            while pending:
                done, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
                if stop is not None and stop.is_set():
                    self._flags[slot] = 1
                drain()
                for fut in done:
                    try:
                        results[futures[fut]] = fut.result()
                    except BrokenProcessPool as err:
                        results[futures[fut]] = {"key": futures[fut], "status": "failed", "message": failure(err)}
                        self._broken(pool)
                    except Exception as err:  # noqa: BLE001 - one failed run must not stop the others
                        results[futures[fut]] = {"key": futures[fut], "status": "failed", "message": failure(err)}
            drain()  # a round's report is in the pipe before its run returns
        finally:
            with self._lock:
                del self._inbox[slot]
                self._free.append(slot)
        return results

    def _broken(self, pool: ProcessPoolExecutor) -> None:
        """A process died (killed, out of memory): drop its pool; the next call spawns a new one."""
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Stop the processes (after the runs they are computing)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def is_auto(value) -> bool:
    """Whether a ``processes`` setting is "auto" (any case, spaces around)."""
    return isinstance(value, str) and value.strip().lower() == "auto"


def processes_setting(value) -> int:
    """``processes`` as a number (see :func:`get_or_run_many`), at most :func:`most_processes`; anything else is a
    ConfigError naming it (or ``$FEDALA_LAB_PROCESSES``, which "auto" reads) and the numbers allowed."""
    field = "processes"
    if is_auto(value):
        n = env_count(PROCESSES)
        if n is None:
            return default_processes()
        field, value = PROCESSES, os.environ[PROCESSES]
    else:
        try:
            n = int(value)
        except (TypeError, ValueError):
            n = 0
        if isinstance(value, bool) or n < 1 or str(n) != str(value).strip():
            raise ConfigError("processes", value, "a whole number >= 1, or auto")
    return _within_machine(field, value, n)


def _within_machine(field: str, value, n: int) -> int:
    """``n`` processes, or a ConfigError naming ``field`` (given as ``value``) when the machine holds fewer."""
    most, why = most_processes()
    if n > most:
        raise ConfigError(field, value, f"a whole number from 1 to {most} ({why}), or auto")
    return n


# Memory budgeted per pool process: each holds its own torch, its data and its runs' models, so a machine's
# memory bounds how many it can hold (a teach run's process holds less; a larger model, more).
PROCESS_MEMORY = 512 * 2**20


def most_processes() -> tuple[int, str]:
    """The most processes this machine runs side by side, and why: one per CPU core this process may use, no more
    than its memory holds at :data:`PROCESS_MEMORY` each, two at least (side by side is worth a try anywhere)."""
    cpus, memory = available_cpus(), _memory()
    most = cpus if memory is None else min(cpus, memory // PROCESS_MEMORY)
    held = "" if memory is None else f", {memory / 2**30:.1f} GiB of memory at {PROCESS_MEMORY // 2**20} MiB a process"
    return max(2, most), f"this machine: {cpus} CPU core(s) for this process{held}"


def _memory() -> int | None:
    """This machine's memory in bytes (None where the system does not say: Windows)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def default_processes() -> int:
    """Processes for several runs at once when ``$FEDALA_LAB_PROCESSES`` is unset: one per core this process may
    use, at most 4 (a click asks for 3 runs by default; each process holds its own torch and data: its memory is
    measured in benchmarks/results.md), and 1 where a GPU is present (its runs are the GPU's, not the cores'); 1: none,
    the runs are computed in the caller's process."""
    import torch

    return 1 if torch.cuda.is_available() else max(1, min(4, available_cpus()))


__all__ = ["RunPool", "default_processes", "failure", "most_processes", "processes_setting", "run_in_worker"]
