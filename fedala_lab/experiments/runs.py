"""How runs are got: from the run store, else simulated now and saved there (docs/design.md#run-store).

    >>> from fedala_lab.experiments.runs import get_or_run
    >>> run = get_or_run(preset("teach", algo="fedala"))          # ./runs, or $FEDALA_LAB_RUNS

- :func:`get_or_run`: one config. The store (record/store.py) keeps runs; this is what makes the ones it
  lacks, resuming a checkpoint, and saves them.
- :class:`RunCache`: the store as one driver call uses it (each run read once, runs counted).
- :func:`fig4_runs`, :func:`comparison_runs`: the runs of the plans of plans.py that are more than a list;
  :func:`tracked_run`: a run with one client's ALA weights recorded (Fig. 2 and 3).
- :func:`stored_runs`, :func:`load_stored`: what a store holds, finished or stopped (checkpoints).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path

import pandas as pd

from ..config import RunConfig
from ..errors import ConfigError, DataError, TrainingDiverged
from ..record.run import Run
from ..record.store import RunStore, open_store
from .plans import comparison_configs, fig4_configs


def get_or_run(cfg: RunConfig, store: RunStore | RunCache | str | Path | None = None, *, data=None,
               progress: bool = True, callback: Callable | None = None, resume: bool = True,
               force: bool = False, needs: Callable[[Run], bool] | None = None) -> Run:
    """The finished run of ``cfg`` from ``store``, or simulate it (resuming a checkpoint) and save it there.

    ``store``: a RunStore, a :class:`RunCache`, a folder, or None (``$FEDALA_LAB_RUNS`` or ``./runs``).
    ``force`` recomputes and replaces a stored run. ``needs(run)`` says whether a stored run holds what
    the caller needs: what is recorded (tracked clients, snapshots) is not part of a config's key, so
    the store may hold the same run recorded without it; such a run is recomputed (the same result)
    with ``cfg``'s recording settings and replaces the stored one.

    A run that diverged is saved too (status "diverged") and :class:`TrainingDiverged` raised; asking
    again raises it again from the store (the same config diverges the same way) unless ``force``.
    A damaged folder is reported and replaced. The config (and the data it names) is checked before
    anything is written: a bad value leaves the store untouched.
    """
    if isinstance(store, RunCache):
        return store.get_or_run(cfg, data=data, progress=progress, callback=callback, resume=resume,
                                force=force, needs=needs)
    from ..engine.simulate import Simulation  # here: the engine loads torch

    store = open_store(store)

    def usable(hit):
        return hit is not None and (needs is None or needs(hit))

    if not force:
        hit, _ = store.outcome(cfg)
        if usable(hit):
            return hit
    sim = Simulation(cfg, data)  # every check of the config against its data, before any write
    with store.lock(cfg):
        st = None
        if not force:
            hit, st = store.outcome(cfg)  # another process may have finished it while we waited
            if usable(hit):
                return hit
        replace = force or (st is not None and st.state != "absent")
        ckpt = store.checkpoint_for(cfg)
        if resume and not replace:
            sim.load_checkpoint(ckpt)
        try:
            run = sim.run(progress=progress, callback=callback, checkpoint=ckpt)
        except TrainingDiverged as err:
            if err.run is not None:
                store.save(err.run, replace=True)
            with contextlib.suppress(FileNotFoundError):
                ckpt.unlink()
            raise
        store.save(run, replace=True)
        with contextlib.suppress(FileNotFoundError):
            ckpt.unlink()
        return run


class RunCache:
    """A run store as one driver call uses it: each run is read from disk once (figures share runs), and the
    runs handed out and computed are counted (``used``, ``computed``; :meth:`start_counting` resets them)
    for the figures' "runs computed / used". Pass it wherever a ``store`` is taken."""

    def __init__(self, store: RunStore | str | Path | None = None):
        self.store = open_store(store)
        self._runs: dict[str, Run] = {}  # config key -> Run
        self.used: list[Run] = []  # runs handed out since start_counting (repeats included)
        self.computed = 0  # of which computed now (not from the store)

    def start_counting(self) -> None:
        self.used, self.computed = [], 0

    def get_or_run(self, cfg: RunConfig, *, force: bool = False, needs: Callable[[Run], bool] | None = None,
                   **kwargs) -> Run:
        """:func:`get_or_run` through the memo; ``kwargs`` as there."""
        key = cfg.key()
        hit = None if force else self._runs.get(key)
        if hit is None and not force:
            hit = self.store.find(cfg)
        if hit is None or (needs is not None and not needs(hit)):
            # absent, forced, or without what this caller needs: the store re-reads under its lock or
            # recomputes, never from the memo
            self._runs.pop(key, None)
            hit = get_or_run(cfg, self.store, force=force, needs=needs, **kwargs)
            self.computed += 1
        self._runs[key] = hit
        self.used.append(hit)
        return hit


def fig4_runs(base_cfg: RunConfig, *, K: int, window: tuple[int, int], client: int, store=None,
              progress: bool = False, callback: Callable | None = None) -> tuple[Run, Run]:
    """The runs of the paper's Fig. 4 protocol (:func:`~fedala_lab.experiments.plans.fig4_configs`):
    (FedAvg run, FedALA run) sharing their first K rounds, both with ``client``'s snapshots over ``window``.
    A stored run recorded without those snapshots is recomputed with them."""
    cfgs = fig4_configs(base_cfg, K=K, window=window, client=client)
    first = cfgs[0].snapshot_from
    return tuple(get_or_run(c, store, progress=progress, callback=callback,
                            needs=lambda run: _has_snapshots(run, client, first)) for c in cfgs)


def tracked_run(cfg: RunConfig, client: int, store=None, *, data=None, progress: bool = False,
                callback: Callable | None = None) -> Run:
    """The run of ``cfg`` with ``client``'s ALA weights and weight-learning passes recorded (Fig. 2, 3).

    ``track_clients="auto"`` keeps the first clients only: another client is tracked too, with those a
    stored run of ``cfg`` tracks (so looking at clients in turn recomputes once per new client). A stored
    run without the client is recomputed (the same result) and replaces it; widened so, a checkpoint is
    not resumed (it may come from a run that did not track the client: its weights would lack rounds).
    ``store``, ``data`` as for :func:`get_or_run`.
    """
    n = cfg.data.num_clients
    if not isinstance(client, int) or isinstance(client, bool) or not 0 <= client < n:
        raise ConfigError("client", client, f"a client id from 0 to {n - 1}")
    tracked = cfg.clients_to("track_clients", n)
    widened = client not in tracked
    if widened:
        stored = (store.store if isinstance(store, RunCache) else open_store(store)).find(cfg)
        keep = stored.tracked_clients() if stored is not None else tracked
        cfg = cfg.replace(track_clients=",".join(map(str, sorted({*keep, client}))))
    return get_or_run(cfg, store, data=data, progress=progress, callback=callback, resume=not widened,
                      needs=lambda run: client in run.tracked_clients())


def _has_snapshots(run: Run, client: int, first: int) -> bool:
    r = run.arrays.get(f"snap_rounds/{client}")
    return r is not None and len(r) > 0 and int(r[0]) <= first


def comparison_runs(base: RunConfig, *, tau0: int | None = None, phi: int | None = None, with_ala: bool = False,
                    store=None, progress: bool = False, data=None, have: Mapping[str, Run] | None = None,
                    callback: Callable | None = None) -> dict[str, Run]:
    """Run (or load from ``store``) FedLAMA's comparison (:func:`~fedala_lab.experiments.plans.
    comparison_configs`); {label: Run}.

    ``store``: a RunStore, a :class:`RunCache`, a folder, or None (simulate without saving). ``have``: runs
    already at hand, by label (e.g. the plain comparison before asking ``with_ala``): reused, not loaded or
    run again. ``data``: the clients' data (default: loaded once for all of them). ``callback``: each
    simulation's per-round callback (see :func:`get_or_run`).
    """
    from ..data.federated import FederatedData
    from ..engine.simulate import resolve_device, simulate

    cfgs = comparison_configs(base, tau0=tau0, phi=phi, with_ala=with_ala)
    have = dict(have or {})
    if data is None:
        data = FederatedData.from_config(base.data, resolve_device(base.device))

    def get(c):
        if store is None:
            return simulate(c, data, progress=progress, callback=callback)
        return get_or_run(c, store, data=data, progress=progress, callback=callback)

    return {k: have[k] if k in have else get(c) for k, c in cfgs.items()}


# ------------------------------------------------------------------------------------ a store's contents

STORED_COLUMNS = ["name", "modified", "status", "rounds_done", "config", "best_acc", "final_acc"]


def stored_runs(store=None) -> pd.DataFrame:
    """Every run of ``store``, newest first: the finished ones (status "complete" or "diverged") and the
    stopped ones, whose checkpoint waits to be resumed (status "stopped", with what they recorded so far).

    Columns: name (the run's folder, or the one it will have), modified, status, rounds_done, config (a
    RunConfig, or None for a checkpoint that cannot be read), best_acc and final_acc (%).
    """
    from ..engine.simulate import read_checkpoint  # here: the engine loads torch

    store = open_store(store)
    rows = []
    listed = store.list()
    finished = set(listed["name"])
    for r in listed.itertuples(index=False):
        try:
            cfg = RunConfig.from_dict(r.config)
        except ConfigError:
            cfg = None
        done = r.rounds if r.status == "complete" else None
        rows.append({"name": r.name, "modified": r.modified, "status": r.status, "rounds_done": done,
                     "config": cfg, "best_acc": r.best_acc, "final_acc": r.final_acc})
    for name, path in store.checkpoints().items():
        if name in finished:
            continue  # finished after all: its folder is the run
        run = read_checkpoint(path)
        s = run.summary() if run is not None else {}
        rows.append({"name": name, "modified": pd.Timestamp(path.stat().st_mtime, unit="s"), "status": "stopped",
                     "rounds_done": s.get("rounds"), "config": run.config if run is not None else None,
                     "best_acc": s.get("best_acc"), "final_acc": s.get("final_acc")})
    frame = pd.DataFrame(rows, columns=STORED_COLUMNS)
    return frame.sort_values("modified", ascending=False, kind="stable").reset_index(drop=True)


def load_stored(store, name: str) -> Run:
    """The run named ``name`` in ``store`` (see :func:`stored_runs`): the finished run in its folder, or
    what a stopped run recorded before its checkpoint (status "partial"). Only names the store lists are
    reached (no paths)."""
    from ..engine.simulate import read_checkpoint

    store = open_store(store)
    if isinstance(name, str) and name in set(store.list()["name"]):
        return store.load(name)
    ckpt = store.checkpoints().get(name) if isinstance(name, str) else None
    run = read_checkpoint(ckpt) if ckpt is not None else None
    if run is None:
        raise DataError(f"{name!r} is not a run name in the run store {store.root} (no finished run and no "
                        "readable checkpoint of that name)")
    return run
