"""How many cores a run may use, forward passes spread over Python threads on a CPU, bit for bit as in one
thread, and starting processes without re-running the caller's script (:func:`main_not_rerun`).

Why (docs/design.md#performance): a run on a CPU uses one torch thread per process, and the workers
backend trains in worker processes; evaluation and ALA's feature pass run in the main process, which would
then use one core while the others idle. Forward-only work splits into independent pieces (a client, a
chunk of rows) whose results do not depend on one another, so Python threads, each running whole pieces
at torch's one thread, use every core: torch releases the GIL inside its kernels. A piece is computed by
exactly the same kernels, with the same shapes, as in one thread, so results are identical whatever the
number of threads (tested). A busy neighbour only slows the thread it shares a core with, and the queue of
pieces lets the other thread take the rest (no thread ever waits on another mid-piece, unlike torch's own
intra-op threads, which synchronise at every operation).

Two rules keep this exact and safe:

- Only when torch runs one thread per process (the simulation's default on a CPU); with more torch
  threads, or on a GPU, pieces run one after another here.
- A module is never shared between threads: ``torch.func.functional_call`` swaps a module's parameters
  while it runs, so each thread works on its own copy (:func:`thread_map`'s ``per_thread``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

import torch

from ..environ import FORWARD_THREADS as ENV_FORWARD_THREADS
from ..environ import WORKERS as ENV_WORKERS
from ..environ import env_count


def available_cpus() -> int:
    """CPU cores this process may use (its affinity mask, not the machine's total), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def default_workers() -> int:
    """``$FEDALA_LAB_WORKERS`` if set (a sweep running k runs at once sets cores ÷ k), else one per core. A
    value other than a whole number >= 1 is refused (ConfigError naming the variable), never ignored."""
    return env_count(ENV_WORKERS) or available_cpus()


# Below this much work (rows × parameters, about multiply-adds) a forward pass is done before threads would have
# started: the lecture's MLP on ALA's windows (≈ 2,000 rows × 34k parameters) spent longer in the thread pool's
# locks than in its arithmetic.
THREADED_WORK = 200_000_000


def forward_threads(device: torch.device | str = "cpu", work: float | None = None) -> int:
    """How many threads a forward pass may use here: one per worker (cores, or ``$FEDALA_LAB_WORKERS``) on a
    CPU when torch runs one thread per process, else 1; 1 too when its ``work`` (rows × parameters) is below
    :data:`THREADED_WORK`. ``$FEDALA_LAB_FORWARD_THREADS=n`` allows at most n (1 turns them off: benchmarks
    compare with and without; results are the same either way)."""
    cap = env_count(ENV_FORWARD_THREADS)  # read first, so that a bad value is refused on every device
    if torch.device(device).type != "cpu" or torch.get_num_threads() != 1:
        return 1
    if work is not None and work < THREADED_WORK:
        return 1
    return min(cap or default_workers(), default_workers())


@contextlib.contextmanager
def main_not_rerun():
    """Start processes (spawned) without re-running the caller's script in them.

    A spawned process imports the parent's ``__main__`` (by path or module name) before its target runs: a
    script without ``if __name__ == "__main__":`` would start its work again in every process, and
    multiprocessing stops that with a RuntimeError ("… bootstrapping phase"). Processes whose target and
    arguments are fedala_lab's need nothing of ``__main__``, so its file and spec are hidden while they
    start, and restored at once.
    """
    main = sys.modules.get("__main__")
    with _MAIN_LOCK:
        saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
        try:
            for k in saved:
                setattr(main, k, None) if k == "__spec__" else delattr(main, k)
            yield
        finally:
            for k, v in saved.items():
                setattr(main, k, v)


_MAIN_LOCK = threading.Lock()


def thread_map(fn: Callable, items: Iterable, *, threads: int, per_thread: Callable, ctx=None) -> list:
    """``[fn(item, ctx) for item in items]``, the items shared out among ``threads`` threads as each becomes
    free, results in the items' order. In one thread ``ctx`` is used as given; with more, each thread makes
    its own with ``per_thread()`` (once: a model copy, a step built on it). Grad mode is off in every
    thread (it is thread-local in torch): this is for forward passes."""
    items = list(items)
    if threads <= 1 or len(items) <= 1:
        with torch.no_grad():
            return [fn(item, ctx) for item in items]
    local = threading.local()

    def run(item):
        if not hasattr(local, "ctx"):
            local.ctx = per_thread()
            torch.set_grad_enabled(False)  # this thread's own grad mode
        return fn(item, local.ctx)

    with ThreadPoolExecutor(max_workers=min(threads, len(items)), thread_name_prefix="fedala-forward") as pool:
        return list(pool.map(run, items))


__all__ = ["ENV_FORWARD_THREADS", "ENV_WORKERS", "available_cpus", "default_workers", "forward_threads", "main_not_rerun",
           "thread_map"]
