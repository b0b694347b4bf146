"""How many cores a run may use, and forward passes spread over Python threads on a CPU, bit for bit as in
one thread.

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

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

import torch

ENV_WORKERS = "FEDALA_LAB_WORKERS"
ENV_FORWARD_THREADS = "FEDALA_LAB_FORWARD_THREADS"


def available_cpus() -> int:
    """CPU cores this process may use (its affinity mask, not the machine's total), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def default_workers() -> int:
    """``$FEDALA_LAB_WORKERS`` if set (a sweep running k runs at once sets cores ÷ k), else one per core."""
    env = os.environ.get(ENV_WORKERS, "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            pass
    return available_cpus()


def forward_threads(device: torch.device | str = "cpu") -> int:
    """How many threads a forward pass may use here: one per worker (cores, or ``$FEDALA_LAB_WORKERS``) on a
    CPU when torch runs one thread per process, else 1. ``$FEDALA_LAB_FORWARD_THREADS=1`` turns them off
    (benchmarks compare with and without; results are the same either way)."""
    if torch.device(device).type != "cpu" or torch.get_num_threads() != 1:
        return 1
    if os.environ.get(ENV_FORWARD_THREADS, "").strip() == "1":
        return 1
    return default_workers()


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


__all__ = ["ENV_FORWARD_THREADS", "ENV_WORKERS", "available_cpus", "default_workers", "forward_threads", "thread_map"]
