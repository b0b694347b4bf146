"""Runs computed side by side in processes that stay up between calls: the lecture app's clicks.

A click asks for a few independent runs (FedAvg, FedALA and Local by default). On the lecture's small models
each run is bound by Python's per-step overhead on one core, so threads of one process gain little (they share
the interpreter), while processes run them at once: on a 2-core laptop a click of three teach runs takes about
the time of the longest pair instead of the sum (docs/design.md#performance). Starting a process costs seconds
(importing torch), so the processes are spawned once, warmed (imports, data, the engine's first steps) before
the first click, and kept.

Each run goes through :func:`~fedala_lab.experiments.runs.get_or_run` into the caller's run store, exactly as
a sweep's worker does (:func:`~fedala_lab.experiments.sweeps.run_in_worker`): the store's lock, checkpoints, a
run folder written under a temporary name and renamed. Every process runs one torch thread, as the caller's simulations do
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

from ..algorithms.plugins import plugin_modules
from ..algorithms.registry import specs
from ..compute.parallel import available_cpus, main_not_rerun
from ..config import RunConfig
from ..environ import PROCESSES, env_count
from .sweeps import failure, run_in_worker

# How long a warming process waits for the others to take their own warm-up (so that each process takes one).
WARM_WAIT_S = 60.0
POLL_S = 0.05  # how often compute() looks at the rounds reported and at the stop flag
PARENT_POLL_S = 1.0  # how often a pool process checks that the app is still there
SLOTS = 64  # compute() calls in flight at once (the app serves --concurrency clicks at a time)


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
    flag (what :func:`~fedala_lab.experiments.sweeps.run_in_worker` takes as its queue and its stop event)."""

    slot: int

    def put(self, item) -> None:
        _SHARED["rounds"].put((self.slot, *item))  # written to the pipe before put returns (a SimpleQueue)

    def is_set(self) -> bool:
        return bool(_SHARED["flags"][self.slot])


def _run(call: _Call, cfg_dict: dict, store_root: str, train_workers: int, plugins, expect: str) -> dict:
    """In a pool process: one run into the store, one torch thread, its rounds reported and its stop flag read
    through ``call``."""
    return run_in_worker(cfg_dict, store_root, False, 1, rounds_queue=call, train_workers=train_workers,
                         plugins=plugins, expect=expect, stop=call)


def _warm(cfg_dicts: list[dict]) -> None:
    """In a pool process: import the engine and run each config for its rounds without saving anything (the
    data built, the step functions traced), then wait for the other processes so that each takes one warm-up."""
    import torch

    torch.set_num_threads(1)
    with contextlib.suppress(Exception):  # a warm-up must never break the pool: the real run reports problems
        from .runs import run_unsaved

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
            from ..errors import ConfigError

            raise ConfigError("processes", processes, "an integer >= 2 (1: compute in the caller's process)")
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
                on_round: Callable[[str, int, float], None] | None = None) -> dict[str, dict]:
        """Compute ``cfgs`` (into the store; a stored run is served from it) in the processes, at most
        ``processes`` at once, in the order given. ``on_round(key, round, accuracy)`` is called here, in the
        caller's thread, for every round a process finishes; once ``stop`` is set, running runs stop after
        their current round (their checkpoints kept) and waiting ones do not start.

        Returns, by config key, what :func:`~fedala_lab.experiments.sweeps.run_in_worker` returned: ``status``
        ("complete", "diverged", "failed" with its ``message``, "stopped" with ``run``: what it recorded, or
        "not started"). A process that died fails its runs ("failed"); the pool is then rebuilt at the next call.
        """
        cfgs = list(cfgs)
        plugins = plugin_modules(specs())
        per_run = max(1, available_cpus() // self.processes)  # training processes per run (compute/workers.py)
        with self._lock:
            if not self._free:
                raise RuntimeError(f"more than {SLOTS} calls at once")
            slot = self._free.pop()
            self._flags[slot], self._inbox[slot] = 0, []
            with main_not_rerun():  # a process that died is replaced at a submit
                pool = self._ensure()
                futures = {pool.submit(_run, _Call(slot), c.to_dict(), self.store_root, per_run, plugins,
                                       c.key()): c.key() for c in cfgs}
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


def get_or_run_many(cfgs: Iterable[RunConfig], store=None, *, processes: int | str = "auto", progress: bool = True,
                    desc: str = "runs") -> list:
    """The finished runs of ``cfgs``, in their order, as :func:`~fedala_lab.experiments.runs.get_or_run` gives each
    (from ``store``, else computed and saved there), the ones the store lacks computed side by side.

    ``processes``: "auto" (one per CPU core this process may use, at most 4, and 1 with a GPU), or a number; with
    more than one and at least two runs to compute, they run in that many spawned processes at one torch thread
    each (bit for bit the runs this process would compute), the processes ended on return. ``progress``: one bar
    over the rounds of the runs computed. A run that fails or diverges there is asked for again here, which raises
    its error as :func:`get_or_run` would.

        runs = get_or_run_many([preset("teach", algo=a, seed=s) for a in ("fedavg", "fedala") for s in (0, 1, 2)])
    """
    from ..progress import bar as tqdm  # a notebook keeps how it ended
    from ..record.store import open_store
    from .runs import get_or_run

    cfgs = list(cfgs)
    store = open_store(store)
    n = processes_setting(processes)
    todo = to_compute(cfgs, store)
    if n > 1 and len(todo) > 1:
        pool = RunPool(min(n, len(todo)), store.root)
        total = sum(c.rounds for c in todo)
        with tqdm(total=total, desc=desc, unit="round", disable=not progress, dynamic_ncols=True) as bar:
            try:
                pool.compute(todo, on_round=lambda key, t, acc: bar.update(1))
            finally:
                pool.close()
            bar.update(total - bar.n)  # rounds a resumed or branched run did not compute
    return [get_or_run(c, store, progress=False) for c in cfgs]


def to_compute(cfgs: Iterable[RunConfig], store) -> list[RunConfig]:
    """The configs of ``cfgs`` (each once) that ``store`` holds no finished or diverged run of and that run on a
    CPU: what processes can compute side by side (a GPU's runs are the GPU's, not the cores'). Checked from the
    store's manifests (``status``), without loading a run."""
    return list({c.key(): c for c in cfgs if not str(c.device).startswith("cuda")
                 and store.status(c).state not in ("complete", "diverged")}.values())


def processes_setting(value) -> int:
    """``processes`` as a number (see :func:`get_or_run_many`); anything else is a ConfigError naming it."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return env_count(PROCESSES) or default_processes()
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if isinstance(value, bool) or n < 1 or str(n) != str(value).strip():
        from ..errors import ConfigError

        raise ConfigError("processes", value, "a whole number >= 1, or auto")
    return n


def default_processes() -> int:
    """Processes for several runs at once when ``$FEDALA_LAB_PROCESSES`` is unset: one per core this process may
    use, at most 4 (a click asks for 3 runs by default; each process holds its own torch: ≈ 0.34 GB of its own
    memory after a teach run), and 1 where a GPU is present (its runs are the GPU's, not the cores'); 1: none,
    the runs are computed in the caller's process."""
    import torch

    return 1 if torch.cuda.is_available() else max(1, min(4, available_cpus()))


__all__ = ["RunPool", "default_processes", "get_or_run_many", "processes_setting", "to_compute"]
