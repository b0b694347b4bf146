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
import dataclasses
import functools
import json
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import pandas as pd

from ..config import RunConfig
from ..errors import ConfigError, DataError, TrainingDiverged, short_repr
from ..fingerprint import hashed_once_per_call
from ..record.run import Run, served_note
from ..record.store import RunStore, open_store
from .plans import comparison_configs, fig4_configs
from .prefix import extends, find_prefix, state_carry
from .presets import check_partition
from .trackers import RunLog, Tracker, check_trackers, log_run

CACHE_MODES = ("use", "refresh", "off")


def cache_mode(cache: str, force: bool = False) -> str:
    """``cache`` checked (one of :data:`CACHE_MODES`), with the older ``force=True`` meaning "refresh"."""
    if cache not in CACHE_MODES:
        raise ConfigError("cache", cache, "use (serve the stored run of the identical config and code), refresh "
                          "(recompute and replace it) or off (compute without reading or writing the store)")
    return "refresh" if force and cache == "use" else cache


def _hashed_once(fn):
    """``fn`` with its data's and model's content hashed once per call however many layers bind them."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        with hashed_once_per_call():
            return fn(*args, **kwargs)

    return call


@_hashed_once
def get_or_run(cfg: RunConfig, store: RunStore | RunCache | str | Path | None = None, *, data=None, model=None,
               progress: bool = True, callback: Callable | None = None, resume: bool = True,
               force: bool = False, needs: Callable[[Run], bool] | None = None, branch: bool = True,
               workers=None, cache: str = "use", trackers: Iterable[Tracker] = ()) -> Run:
    """The finished run of ``cfg`` from ``store``, or simulate it (resuming a checkpoint, or branching from a
    stored run) and save it there.

    A stored run is served, resumed or continued only when its key equals ``cfg``'s: the same settings, the
    same data content, the same custom model (code and weights) and the same code — fedala_lab's computing
    modules and a registered algorithm's own class (docs/design.md#run-identity). ``cache``: "use" (the
    default), "refresh" (recompute from round 1 and replace the stored run; ``force=True`` says the same) or
    "off" (compute now, neither reading nor writing the store).

    ``store``: a RunStore, a :class:`RunCache`, a folder, or None (``$FEDALA_LAB_RUNS`` or ``./runs``).
    ``data``, ``model``: the clients' data and an ``nn.Module`` of your own (see ``simulate``); the run is then
    stored under a key that names them by content (``custom:``), never under the built-in data's or model's.
    ``workers``: training processes on a CPU (None: one per core).
    ``callback(sim, row)``: called after each round simulated now, with the :class:`Simulation` and the round's
    row of ``run.rounds`` as a dict; returning False stops the run (its checkpoint is kept). Not called for a
    run served from the store, nor for the rounds a run resumes or branches from: there is no simulation
    then. ``trackers`` (:mod:`~fedala_lab.experiments.trackers`: TensorBoard, MLflow) see every run asked
    for: logged as it goes when simulated now, from its records when served from the store (docs/trackers.md).
    ``force`` recomputes and replaces a stored run, from round 1. ``needs(run)`` says whether a stored run
    holds what the caller needs: what is recorded (tracked clients, snapshots, train-split losses) is not
    part of a config's key, so the store may hold the same run recorded without it; such a run is
    recomputed (the same result) with ``cfg``'s recording settings and replaces the stored one.

    Branching (``branch``, docs/design.md#run-store): a run the store lacks starts from the latest round
    through which a stored run equals it (:func:`~fedala_lab.experiments.prefix.find_prefix`: a shorter run
    of the same config, FedAvg for FedALA before ALA starts…), or from its own checkpoint if that is later.
    The saved run keeps the engine states ``cfg.keep_states`` names (default: the last round's).

    A run that diverged is saved too (status "diverged") and :class:`TrainingDiverged` raised; asking
    again raises it again from the store (the same config diverges the same way) unless ``force``.
    A damaged folder is reported and replaced. The config (and the data it names) is checked before
    anything is written: a bad value leaves the store untouched.
    """
    cache = cache_mode(cache, force)
    if isinstance(store, RunCache) and cache != "off":
        return store.get_or_run(cfg, data=data, model=model, progress=progress, callback=callback, resume=resume,
                                force=cache == "refresh", needs=needs, branch=branch, workers=workers,
                                trackers=trackers)
    if trackers:  # the same call, its rounds logged as they come and the rest from the run it returns
        with RunLog(trackers, store.store if isinstance(store, RunCache) else store) as log:
            return log.finish(get_or_run(cfg, store, data=data, model=model, progress=progress,
                                         callback=log.callback(callback), resume=resume, needs=needs,
                                         branch=branch, workers=workers, cache=cache))
    if cache == "off":
        return run_unsaved(cfg, data=data, model=model, progress=progress, callback=callback, workers=workers)
    force = cache == "refresh"
    from ..engine.simulate import Simulation, bind  # here: the engine loads torch

    cfg = bind(cfg, data, model)  # custom data or model: keyed by their content
    store = open_store(store)

    def usable(hit):
        return hit is not None and (needs is None or needs(hit))

    if not force:
        hit, _ = store.outcome(cfg)
        if usable(hit):
            return _served(hit, cfg, progress)
    if data is None:
        check_partition(cfg)  # the paper's MNIST partition, when missing: where it comes from, in one line
    sim = Simulation(cfg, data, model=model, workers=workers)  # every check of the config, before any write
    with store.lock(cfg):
        st = None
        if not force:
            hit, st = store.outcome(cfg)  # another process may have finished it while we waited
            if usable(hit):
                return _served(hit, cfg, progress)
        replace = force or (st is not None and st.state != "absent")
        ckpt = store.checkpoint_for(cfg)
        if resume and not replace:
            sim.load_checkpoint(ckpt)
        if branch and not force:
            found = find_prefix(cfg, store, after=sim.round)
            if found is not None:
                prefix, prefix_run, state = found
                try:
                    sim.start_from(state, prefix_run, algo_state=state_carry(prefix.config, cfg))
                except (ValueError, KeyError, TypeError) as err:
                    # a state that does not fit, or lacks a part (tampered): start without it; start_from reads
                    # every part before it changes anything
                    why = f"its engine state lacks {err}" if isinstance(err, KeyError) else err
                    warnings.warn(f"cannot branch from {prefix.name}: {why}; computing without it",
                                  stacklevel=2)
                del state, prefix_run
        kept = [t for t in cfg.kept_rounds() if t < cfg.rounds]

        def keep(sim_, row):  # the states of earlier rounds the config keeps, next to the checkpoint until saved
            if row["round"] in kept:
                sim_.save_checkpoint(store.kept_state_for(cfg, row["round"]), recorder=False)
            return None if callback is None else callback(sim_, row)

        try:
            run = sim.run(progress=progress, callback=keep if kept else callback, checkpoint=ckpt)
        except TrainingDiverged as err:
            if err.run is not None:
                store.save(err.run, replace=True)
            clean_checkpoints(store, cfg, ckpt)
            raise
        states, inherited = {}, _inherited_states(store, sim, cfg)
        for t in kept:
            f = store.kept_state_for(cfg, t)
            if f.is_file():
                states[t] = f
            elif t in inherited:
                states[t] = inherited[t]
        if cfg.kept_rounds():
            states[cfg.rounds] = sim.state_dict(recorder=False)
        store.save(run, replace=True, states=states)
        clean_checkpoints(store, cfg, ckpt)
        return run


def _served(run: Run, cfg: RunConfig, progress: bool) -> Run:
    """``run``, served from the store for ``cfg``: said on stderr where a progress bar would have shown (never
    silent); with ``cfg``'s own settings where the stored run names the same computation otherwise (custom data
    under another name: same key, same result)."""
    if progress:
        print(f"fedala_lab: {served_note(run)}", file=sys.stderr, flush=True)
    return run if run.config == cfg else dataclasses.replace(run, config=cfg)


def run_unsaved(cfg: RunConfig, *, data=None, model=None, progress: bool = False, callback: Callable | None = None,
                workers=None) -> Run:
    """Simulate ``cfg`` now and return its run without storing it (a scratch run: the app's warm-up, a quick
    look); ``data``, ``model``, ``workers`` as for :func:`get_or_run`."""
    from ..engine.simulate import simulate  # here: the engine loads torch

    return simulate(cfg, data, model=model, progress=progress, callback=callback, workers=workers)


def _inherited_states(store: RunStore, sim, cfg: RunConfig) -> dict:
    """The kept states of the run a branched run extends (same config, fewer rounds), up to the branch round:
    they are this run's states of those rounds too (shared as hard links)."""
    src = sim.branched_from
    if not src:
        return {}
    path = store.root / src["run"]
    try:
        stored = RunConfig.from_dict(json.loads((path / "config.json").read_text()))
    except (OSError, ValueError):
        return {}
    if not extends(stored, cfg):
        return {}
    return {t: f for t, f in store.states(path).items() if t <= src["round"]}


def clean_checkpoints(store: RunStore, cfg: RunConfig, ckpt: Path) -> None:
    """Remove a finished (or diverged) run's checkpoint and the states it kept for itself."""
    for f in [ckpt, *(store.kept_state_for(cfg, t) for t in cfg.kept_rounds())]:
        with contextlib.suppress(FileNotFoundError):
            f.unlink()


class RunCache:
    """A run store as one driver call uses it: each run is read from disk once (figures share runs), and the
    runs handed out and computed are counted (``used``, ``computed``; :meth:`start_counting` resets them)
    for the figures' "runs computed / used". Pass it wherever a ``store`` is taken.

    ``on_round(n)`` is called with 1 after every round simulated through this cache (an overall progress bar).
    ``trackers``: every run handed out is logged there too (see :func:`get_or_run`)."""

    def __init__(self, store: RunStore | str | Path | None = None, *, on_round: Callable[[int], None] | None = None,
                 trackers: Iterable[Tracker] = ()):
        self.store = open_store(store)
        self.on_round = on_round
        self.trackers = check_trackers(trackers)
        self._runs: dict[str, Run] = {}  # config key -> Run
        self.used: list[Run] = []  # runs handed out since start_counting (repeats included)
        self.computed = 0  # of which computed now (not from the store)

    def start_counting(self) -> None:
        self.used, self.computed = [], 0

    @_hashed_once
    def get_or_run(self, cfg: RunConfig, *, force: bool = False, needs: Callable[[Run], bool] | None = None,
                   callback: Callable | None = None, data=None, model=None, trackers: Iterable[Tracker] = (),
                   **kwargs) -> Run:
        """:func:`get_or_run` through the memo; ``kwargs`` as there; ``trackers`` besides the cache's own."""
        from ..engine.simulate import bind

        cfg = bind(cfg, data, model)
        trackers = [*self.trackers, *check_trackers(trackers)]
        key = cfg.key()
        hit = None if force else self._runs.get(key) or self.store.find(cfg)
        if hit is None or (needs is not None and not needs(hit)):
            # absent, forced, or without what this caller needs: the store re-reads under its lock or
            # recomputes, never from the memo
            self._runs.pop(key, None)
            if self.on_round is not None:
                inner = callback

                def callback(sim, row):
                    self.on_round(1)
                    return None if inner is None else inner(sim, row)

            hit = get_or_run(cfg, self.store, force=force, needs=needs, callback=callback, data=data, model=model,
                             trackers=trackers, **kwargs)
            self.computed += 1
        elif trackers:
            log_run(hit, trackers, self.store)
        self._runs[key] = hit
        self.used.append(hit)
        return hit


def has_train_loss(run: Run) -> bool:
    """Whether ``run`` recorded the train-split losses of the initialised and trained models (Fig. 5) in
    every evaluated round (``record_train_loss``): a ``needs=`` for :func:`get_or_run`."""
    r = run.rounds.dropna(subset=["acc"])
    return len(r) > 0 and bool(r["init_loss"].notna().all() and r["trained_loss"].notna().all())


def holds_recording(cfg: RunConfig) -> Callable[[Run], bool]:
    """A ``needs=`` for :func:`get_or_run`: whether a stored run holds what ``cfg`` records besides its result,
    its train-split losses (``record_train_loss``) and its snapshot clients' models from ``snapshot_from``."""
    snap = cfg.clients_to("snapshot_clients", cfg.data.num_clients)

    def check(run: Run) -> bool:
        if cfg.record_train_loss and not has_train_loss(run):
            return False
        return all(_has_snapshots(run, c, cfg.snapshot_from) for c in snap)

    return check


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
    from ..compute.device import resolve_device
    from ..data.federated import FederatedData

    cfgs = comparison_configs(base, tau0=tau0, phi=phi, with_ala=with_ala)
    have = dict(have or {})
    if data is None:
        data = FederatedData.from_config(base.data, resolve_device(base.device))
    cache = "off" if store is None else "use"
    return {k: have[k] if k in have else get_or_run(c, store, data=data, progress=progress, callback=callback,
                                                    cache=cache) for k, c in cfgs.items()}


# ------------------------------------------------------------------------------------ a store's contents

STORED_COLUMNS = ["name", "modified", "status", "rounds_done", "config", "best_acc", "final_acc"]


def stored_runs(store=None) -> pd.DataFrame:
    """Every run of ``store``, newest first: the finished ones (status "complete" or "diverged") and the
    stopped ones, whose checkpoint waits to be resumed (status "stopped", with what they recorded so far).

    Columns: name (the run's folder, or the one it will have), modified, status, rounds_done, config (a
    RunConfig, or None for a checkpoint that cannot be read), best_acc and final_acc (%).
    """
    store = open_store(store)
    rows = []
    listed = store.list()
    finished = set(listed["name"])
    for r in listed.itertuples(index=False):
        try:
            cfg = RunConfig.from_dict(r.config)
        except (ValueError, TypeError):  # ConfigError is a ValueError; listed all the same, without settings
            cfg = None
        done = r.rounds if r.status == "complete" else None
        rows.append({"name": r.name, "modified": r.modified, "status": r.status, "rounds_done": done,
                     "config": cfg, "best_acc": r.best_acc, "final_acc": r.final_acc})
    for name, path in store.checkpoints().items():
        if name in finished:
            continue  # finished after all: its folder is the run
        run = _read_checkpoint(path)
        s = run.summary() if run is not None else {}
        rows.append({"name": name, "modified": pd.Timestamp(path.stat().st_mtime, unit="s"), "status": "stopped",
                     "rounds_done": s.get("rounds"), "config": run.config if run is not None else None,
                     "best_acc": s.get("best_acc"), "final_acc": s.get("final_acc")})
    frame = pd.DataFrame(rows, columns=STORED_COLUMNS)
    return frame.sort_values("modified", ascending=False, kind="stable").reset_index(drop=True)


def _read_checkpoint(path: Path) -> Run | None:
    """What a stopped run recorded, or None for a checkpoint that cannot be read as one (torn, tampered, or
    of another format): one bad file must not hide the store's other runs."""
    from ..engine.simulate import read_checkpoint  # here: the engine loads torch

    try:
        return read_checkpoint(path)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def load_stored(store, name: str) -> Run:
    """The run named ``name`` in ``store`` (see :func:`stored_runs`): the finished run in its folder, or
    what a stopped run recorded before its checkpoint (status "partial"). Only names the store lists are
    reached (no paths)."""
    store = open_store(store)
    if isinstance(name, str) and name in set(store.list()["name"]):
        return store.load(name)
    ckpt = store.checkpoints().get(name) if isinstance(name, str) else None
    run = _read_checkpoint(ckpt) if ckpt is not None else None
    if run is None:
        raise DataError(f"{short_repr(name)} is not a run name in the run store {store.root} (no finished run "
                        "and no readable checkpoint of that name)")
    return run
