"""How runs are got: from the run store, else simulated now and saved there (docs/design.md#run-store).

    >>> from fedala_lab.experiments.runs import get_or_run
    >>> run = get_or_run(preset("teach", algo="fedala"))          # ./runs, or $FEDALA_LAB_RUNS

- :func:`get_or_run`: one config. The store (record/store.py) keeps runs; this is what makes the ones it
  lacks, resuming a checkpoint, and saves them.
- :class:`RunCache`: the store as one driver call uses it (each run read once, runs counted).
- :func:`fig4_runs`, :func:`comparison_runs`: the runs of the plans of plans.py that are more than a list.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path

from ..config import RunConfig
from ..errors import TrainingDiverged
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


def _has_snapshots(run: Run, client: int, first: int) -> bool:
    r = run.arrays.get(f"snap_rounds/{client}")
    return r is not None and len(r) > 0 and int(r[0]) <= first


def comparison_runs(base: RunConfig, *, tau0: int | None = None, phi: int | None = None, with_ala: bool = False,
                    store=None, progress: bool = False, data=None,
                    have: Mapping[str, Run] | None = None) -> dict[str, Run]:
    """Run (or load from ``store``) FedLAMA's comparison (:func:`~fedala_lab.experiments.plans.
    comparison_configs`); {label: Run}.

    ``store``: a RunStore, a :class:`RunCache`, a folder, or None (simulate without saving). ``have``: runs
    already at hand, by label (e.g. the plain comparison before asking ``with_ala``): reused, not loaded or
    run again. ``data``: the clients' data (default: loaded once for all of them).
    """
    from ..data.federated import FederatedData
    from ..engine.simulate import resolve_device, simulate

    cfgs = comparison_configs(base, tau0=tau0, phi=phi, with_ala=with_ala)
    have = dict(have or {})
    if data is None:
        data = FederatedData.from_config(base.data, resolve_device(base.device))

    def get(c):
        if store is None:
            return simulate(c, data, progress=progress)
        return get_or_run(c, store, data=data, progress=progress)

    return {k: have[k] if k in have else get(c) for k, c in cfgs.items()}
