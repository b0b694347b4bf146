"""One way to compute the runs a store lacks (docs/design.md#computing-missing-runs).

    statuses = compute(cfgs, store, processes="auto", stop=event, on_round=lambda key, t, acc: ..., trackers=[...])

Every face gets its missing runs here — :func:`get_or_run_many`, :func:`~fedala_lab.experiments.sweeps.run_sweep`
(a grid's distinct runs), the app's clicks (its pool kept between clicks), ``fedala-lab run --algos a,b,c`` — with
one filter of what is still to do (:func:`still_to_do`), one rule for how many processes
(:func:`process_count`), one pool (:class:`~fedala_lab.experiments.pool.RunPool`) and one entry point per run
(:func:`~fedala_lab.experiments.pool.run_in_worker`, which goes through
:func:`~fedala_lab.experiments.runs.get_or_run`: the store's lock, checkpoints, a folder written under a
temporary name). Whatever the path — this process, the pool's processes, Ray — a run comes back as the same
status dict, Stop and the per-round report work the same, and so do trackers and failures: a run that fails
never stops the others.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterable
from types import SimpleNamespace

from ..algorithms.plugins import check_importable, plugin_modules, run_specs
from ..compute.parallel import available_cpus
from ..config import RunConfig
from ..environ import PROCESSES
from ..errors import ConfigError, FedalaError
from ..record.store import open_store
from .pool import RunPool, failure, is_auto, processes_setting, run_in_worker
from .presets import check_partition
from .trackers import Tracker, check_trackers

# the statuses a run comes back with: run_in_worker's, and "stored" for one the store held already
STATUSES = ("stored", "complete", "diverged", "failed", "stopped", "not started")


def still_to_do(cfgs: Iterable[RunConfig], store, *, force: bool = False) -> list[RunConfig]:
    """The configs of ``cfgs`` (each key once, in order) whose run ``store`` lacks: no finished or diverged run
    of it (the same config diverges the same way), read from the manifests without loading a run. ``force``:
    every one."""
    unique = {c.key(): c for c in cfgs}
    return [c for c in unique.values() if force or store.status(c).state not in ("complete", "diverged")]


def process_count(processes, todo: list[RunConfig], *, warm: bool = False) -> int:
    """How many processes compute ``todo``: ``processes`` (a number, or "auto": ``$FEDALA_LAB_PROCESSES``, else
    one per CPU core this process may use, at most 4 — pool.processes_setting, which also bounds it by the
    machine), never more than the runs, and 1 — this process — when a run goes to a GPU (its runs are the GPU's,
    not the cores'). "auto" without ``warm`` processes (a pool already started, the app's) and without
    ``$FEDALA_LAB_PROCESSES`` also stays in this process for up to two runs a process: starting a process (its
    own torch, its data) costs more than it saves on so few (``make run``'s three runs: benchmarks/results.md)."""
    n = processes_setting(processes)
    if any(c.platform().startswith(("cuda", "mps")) for c in todo):
        return 1
    chosen = not is_auto(processes) or PROCESSES in os.environ
    if not warm and not chosen and len(todo) <= 2 * n:
        return 1
    return max(1, min(n, len(todo)))


def compute(cfgs: Iterable[RunConfig], store=None, *, processes: int | str = "auto", stop=None,
            on_round: Callable[[str, int, float], None] | None = None, trackers: Iterable[Tracker] = (),
            force: bool = False, pool: RunPool | None = None, threads: int | None = None, ray: bool = False,
            ray_address: str | None = None, shared_store: bool | None = None,
            gpus_per_run: float = 0.0, who: str = "runs computed") -> dict[str, dict]:
    """Compute the runs of ``cfgs`` that ``store`` lacks, into it; {config key: status} for each distinct config.

    A status is a dict with ``status`` (one of :data:`STATUSES`: "stored" for a run the store held), ``message``
    (a failure's or a divergence's reason), ``error`` (a failure's FedalaError, to raise as the caller sees fit)
    and, for a run Stop interrupted, ``run`` (what it recorded; its checkpoint is kept).

    ``processes``: see :func:`process_count`; 1 computes in this process, one run after the other. ``pool``: a
    :class:`RunPool` kept by the caller (the app's), used instead of a pool made for this call. ``stop``: an
    event; once set, running runs stop after their current round and waiting ones do not start.
    ``on_round(key, round, accuracy)``: called in this process for every round computed, whatever computes it.
    ``trackers``: every run computed is logged as it goes (the caller logs the stored ones as it hands them
    out: get_or_run does). ``force``: recompute stored runs too. ``threads``: torch threads in this process
    while it computes (None: as they are; the pool's processes use one each). ``ray``/``ray_address``/
    ``shared_store``/``gpus_per_run``: compute on Ray instead (:func:`run_on_ray`). ``who``: what the caller is
    in a refusal ("a sweep with 2 worker processes cannot run …").
    """
    cfgs = list(cfgs)
    trackers = check_trackers(trackers)
    store = open_store(store)
    todo = still_to_do(cfgs, store, force=force)
    statuses = {c.key(): {"key": c.key(), "status": "stored", "message": ""} for c in cfgs}
    for cfg in todo:
        check_partition(cfg)  # the paper's MNIST partition, when missing: where it comes from, before any work
    if not todo:
        return statuses
    root = str(store.root.resolve())  # created by the first run stored: a refusal leaves nothing behind
    if ray or ray_address:
        statuses.update(run_on_ray(todo, store, force=force, threads=threads, gpus_per_run=gpus_per_run,
                                   processes=processes, address=ray_address, trackers=trackers, who=who,
                                   shared=shared_store if shared_store is not None else ray_address is None))
        return statuses
    n = process_count(pool.processes if pool is not None else processes, todo, warm=pool is not None)
    if n == 1:
        from ..compute.device import cpu_threads

        # in this process, run_in_worker's queue hands what a pool process would report to on_round directly
        report = None if on_round is None else SimpleNamespace(put=lambda item: on_round(*item))
        with cpu_threads(threads):
            for cfg in todo:
                statuses[cfg.key()] = run_in_worker(cfg.to_dict(), root, force, None, rounds_queue=report,
                                                    trackers=trackers, expect=cfg.key(), stop=stop)
        return statuses
    check_importable(run_specs(todo), f"{who} with {n} worker processes")
    # a pool made for this call is closed after it; the caller's is kept
    with contextlib.closing(RunPool(n, root)) if pool is None else contextlib.nullcontext(pool) as used:
        statuses.update(used.compute(todo, stop=stop, on_round=on_round, force=force, trackers=trackers))
    return statuses


@contextlib.contextmanager
def rounds_bar(todo_rounds: int, *, desc: str, progress: bool):
    """A progress bar over ``todo_rounds`` rounds, shown from the first round computed (a config refused before
    any round prints its one line, no bar); yields the ``on_round`` that advances it. At the end it is filled
    (a resumed or branched run computes fewer rounds than it counts)."""
    from ..progress import bar as tqdm  # a notebook keeps how it ended

    bars = []

    def on_round(key, t, acc):
        if not bars:
            bars.append(tqdm(total=todo_rounds, desc=desc, unit="round", disable=not progress, dynamic_ncols=True))
        bars[0].update(1)

    try:
        yield on_round
        if bars:
            bars[0].update(max(0, todo_rounds - bars[0].n))
    finally:
        for bar in bars:
            bar.close()


def get_or_run_many(cfgs: Iterable[RunConfig], store=None, *, processes: int | str = "auto", progress: bool = True,
                    desc: str = "runs") -> list:
    """The finished runs of ``cfgs``, in their order, as :func:`~fedala_lab.experiments.runs.get_or_run` gives each
    (from ``store``, else computed and saved there), the ones the store lacks computed by :func:`compute`: side by
    side in processes (``processes``: see :func:`process_count`), bit for bit the runs this process would compute.
    ``progress``: one bar over the rounds computed. A run refused there (a FedalaError: a split that cannot be
    drawn, a plugin's hook that raised) raises its error here once the others are done and stored, without being
    tried again; one that diverged or failed otherwise is asked for again here, which raises its error as
    :func:`get_or_run` would.

        runs = get_or_run_many([preset("teach", algo=a, seed=s) for a in ("fedavg", "fedala") for s in (0, 1, 2)])
    """
    from . import runs as runs_module  # looked up at the call: get_or_run as the module holds it

    cfgs = _configs(cfgs)
    store = open_store(store)
    todo = still_to_do(cfgs, store)
    with rounds_bar(sum(c.rounds for c in todo), desc=desc, progress=progress and bool(todo)) as on_round:
        statuses = compute(cfgs, store, processes=processes, on_round=on_round) if todo else {}
    out = []
    for c in cfgs:
        err = statuses.get(c.key(), {}).get("error")
        if isinstance(err, FedalaError):
            raise err  # as get_or_run would raise it, not drawn or computed a second time
        out.append(runs_module.get_or_run(c, store, progress=False))
    return out


def _configs(cfgs) -> list[RunConfig]:
    """``cfgs`` as a list of RunConfigs, or a ConfigError naming what is not one."""
    if isinstance(cfgs, (RunConfig, str, bytes, dict)) or not isinstance(cfgs, Iterable):
        raise ConfigError("cfgs", cfgs, "a list of RunConfigs (for one config: get_or_run(cfg))")
    cfgs = list(cfgs)
    for c in cfgs:
        if not isinstance(c, RunConfig):
            raise ConfigError("cfgs", c, "RunConfigs only, e.g. preset('teach', algo='fedavg') (an algorithm's "
                              "name alone is not a config)")
    return cfgs


# ------------------------------------------------------------------------------------------------ Ray


def check_execution(*, workers="auto", threads=1, gpus_per_run=0.0, ray: bool = False,
                    local_ray: bool = False) -> None:
    """Refuse bad execution settings before anything starts, each with one line naming it.

    A GPU request is checked against the GPUs there are (a Ray started here: this machine's), because Ray
    would keep a task that asks for more waiting forever; a cluster's are checked once joined (:func:`run_on_ray`).
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


def run_on_ray(todo: list[RunConfig], store, *, force: bool, threads: int | None, gpus_per_run: float, processes,
               address: str | None, shared: bool, trackers=(), who: str = "runs computed") -> dict[str, dict]:
    """:func:`compute`'s runs as Ray tasks: a Ray already initialised in this process is used as is; else a local
    one with ``processes`` CPUs is started (every core for "auto"), or the cluster at ``address`` joined, and shut
    down afterwards. With ``shared`` the tasks write into the store themselves; otherwise (a cluster whose nodes
    may not see this disk) the finished runs travel back through Ray and are saved here. ``trackers`` log as the
    runs go only where the tasks see the store's disk."""
    try:
        import ray
    except ImportError:  # an optional dependency
        raise FedalaError("running a sweep on Ray needs Ray, an optional dependency: "
                          "pip install 'fedala_lab[ray]' (or pip install ray)") from None
    started = False
    if not ray.is_initialized():
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # nothing leaves the machine unasked
        try:
            if address:
                ray.init(address=address)
            else:
                n = available_cpus() if processes in ("auto", 1, None) else int(processes)
                ray.init(num_cpus=n, include_dashboard=False)
        except Exception as err:  # noqa: BLE001 - Ray's errors at connection time are of many kinds
            raise FedalaError(f"cannot start Ray{f' at {address}' if address else ''}: {failure(err)}") from None
        started = True
    check_importable(run_specs(todo), f"{who} on Ray")
    statuses: dict[str, dict] = {}
    root = str(store.root.resolve())
    try:
        have = ray.cluster_resources().get("GPU", 0)
        if gpus_per_run > have:  # a task asking for more would wait forever
            raise ConfigError("gpus_per_run", gpus_per_run, f"at most the {have:g} GPU(s) of the Ray cluster")
        task = ray.remote(num_cpus=threads or 1, num_gpus=gpus_per_run, max_retries=0)(run_in_worker)
        plugins = plugin_modules(run_specs(todo))
        refs = {task.remote(c.to_dict(), root if shared else None, force, threads, None, None,
                            trackers if shared else (), plugins, c.key()): c for c in todo}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                cfg = refs[ref]
                try:
                    result = ray.get(ref)
                    if result is not None and not isinstance(result, dict):  # a Run from a worker without the store
                        store.save(result, replace=force)
                        result = {"key": cfg.key(), "status": result.status, "message": result.message}
                except Exception as err:  # noqa: BLE001 - a failed task (RayTaskError wraps its cause)
                    result = {"key": cfg.key(), "status": "failed", "message": failure(err)}
                statuses[cfg.key()] = result
    finally:
        if started:
            ray.shutdown()
    return statuses


__all__ = ["STATUSES", "check_execution", "check_ray_address", "compute", "get_or_run_many", "process_count",
           "rounds_bar", "run_on_ray", "still_to_do"]
