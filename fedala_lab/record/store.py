"""The run store: one folder per run, named by a readable prefix and the config's hash.

    runs/
      fedala-digits-dir0.1-n20-r50-s0-3f9c2a1b7d40/   config.json, clients.csv, rounds.csv, ala.csv,
                                                      arrays.npz, meta.json, manifest.json (written last)
      .checkpoints/<name>.pt                          resumable state of unfinished runs
      .locks/<name>.lock                              one writer per config at a time

A run is written into a temporary folder and renamed into place, so a half-written folder is never taken
for a finished one; ``manifest.json`` (written last) is what marks a folder finished. Two processes
asking for the same config serialise on a lock file: the second waits and then loads the first one's run.
A killed run leaves its last checkpoint; asking for the same config again resumes from it, giving the
same result as an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from ..config import RunConfig
from ..errors import DataError, TrainingDiverged
from .run import Run


def default_root() -> Path:
    """``$FEDALA_LAB_RUNS`` or ``./runs``."""
    return Path(os.environ.get("FEDALA_LAB_RUNS", "runs"))


class RunStore:
    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else default_root()

    # -- names -------------------------------------------------------------------------------------

    def name_for(self, cfg: RunConfig) -> str:
        return f"{cfg.slug()}-{cfg.key()}"

    def dir_for(self, cfg: RunConfig) -> Path:
        return self.root / self.name_for(cfg)

    def checkpoint_for(self, cfg: RunConfig) -> Path:
        return self.root / ".checkpoints" / f"{self.name_for(cfg)}.pt"

    # -- reading -----------------------------------------------------------------------------------

    def has(self, cfg: RunConfig) -> bool:
        """Whether the store holds the finished run of this config (reads its config, not its arrays)."""
        d = self.dir_for(cfg)
        if not (d / "manifest.json").is_file():
            return False
        try:
            stored = RunConfig.from_dict(json.loads((d / "config.json").read_text()))
        except (OSError, ValueError):
            return False
        return stored.key() == cfg.key()

    def find(self, cfg: RunConfig) -> Run | None:
        """The finished run of this config, or None."""
        return Run.load(self.dir_for(cfg)) if self.has(cfg) else None

    def load(self, name: str) -> Run:
        """Load a run by folder name. Only folders directly inside the store can be reached."""
        if not name or "/" in name or "\\" in name or name.startswith(".") or name in ("..", "."):
            raise DataError(f"{name!r} is not a run name in {self.root}")
        return Run.load(self.root / name)

    def list(self) -> pd.DataFrame:
        """One row per finished run: name, algo, dataset, rounds, seed, best/final accuracy (%), status."""
        rows = []
        if self.root.is_dir():
            for d in sorted(self.root.iterdir()):
                man = d / "manifest.json"
                if d.name.startswith(".") or not man.is_file():
                    continue
                try:
                    m = json.loads(man.read_text())
                    cfg = json.loads((d / "config.json").read_text())
                except (OSError, json.JSONDecodeError):
                    continue
                s = m.get("summary", {})
                rows.append({
                    "name": d.name, "algo": cfg.get("algo"), "dataset": cfg.get("data", {}).get("dataset"),
                    "clients": cfg.get("data", {}).get("num_clients"), "rounds": cfg.get("rounds"),
                    "seed": cfg.get("seed"), "best_acc": s.get("best_acc"), "final_acc": s.get("final_acc"),
                    "seconds": s.get("seconds"), "status": m.get("status"),
                    "modified": pd.Timestamp(man.stat().st_mtime, unit="s"),
                })
        cols = ["name", "algo", "dataset", "clients", "rounds", "seed", "best_acc", "final_acc", "seconds",
                "status", "modified"]
        return pd.DataFrame(rows, columns=cols)

    # -- writing -----------------------------------------------------------------------------------

    def save(self, run: Run, *, replace: bool = False) -> Path:
        """Write ``run`` atomically (temporary folder, then rename). An existing finished run wins, unless
        ``replace`` (then it is removed first)."""
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.dir_for(run.config)
        tmp = self.root / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            run.save(tmp)
            if replace:
                shutil.rmtree(final, ignore_errors=True)
            try:
                os.rename(tmp, final)
            except OSError:
                if not (final / "manifest.json").is_file():
                    # a stale, unfinished folder (e.g. from an older version) — replace it
                    shutil.rmtree(final, ignore_errors=True)
                    os.rename(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        run.path = final
        return final

    @contextlib.contextmanager
    def _lock(self, cfg: RunConfig):
        locks = self.root / ".locks"
        locks.mkdir(parents=True, exist_ok=True)
        with open(locks / f"{self.name_for(cfg)}.lock", "w") as fh:
            try:
                import fcntl

                fcntl.flock(fh, fcntl.LOCK_EX)
            except ImportError:  # Windows: the atomic rename still keeps runs whole
                pass
            yield

    def get_or_run(self, cfg: RunConfig, *, data=None, progress: bool = True, callback: Callable | None = None,
                   resume: bool = True, force: bool = False, needs: Callable[[Run], bool] | None = None) -> Run:
        """The finished run of ``cfg`` from the store, or simulate it (resuming a checkpoint) and save it.

        ``force`` recomputes and replaces a stored run. ``needs(run)`` says whether a stored run holds what
        the caller needs: what is recorded (tracked clients, snapshots) is not part of a config's key, so
        the store may hold the same run recorded without it; such a run is recomputed (the same result)
        with ``cfg``'s recording settings and replaces the stored one.
        A run that diverged is saved too (status "diverged") and the :class:`TrainingDiverged` re-raised.
        """
        from ..engine.simulate import simulate

        def usable(hit):
            return hit is not None and (needs is None or needs(hit))

        hit = None if force else self.find(cfg)
        if usable(hit):
            return hit
        with self._lock(cfg):
            if not force:
                hit = self.find(cfg)  # another process may have finished it while we waited
                if usable(hit):
                    return hit
            replace = force or hit is not None
            ckpt = self.checkpoint_for(cfg)
            try:
                run = simulate(cfg, data, progress=progress, callback=callback, checkpoint=ckpt,
                               resume=resume and not replace)
            except TrainingDiverged as err:
                if err.run is not None:
                    self.save(err.run, replace=replace)
                with contextlib.suppress(FileNotFoundError):
                    ckpt.unlink()
                raise
            self.save(run, replace=replace)
            with contextlib.suppress(FileNotFoundError):
                ckpt.unlink()
            return run


def get_or_run(cfg: RunConfig, store: RunStore | str | Path | None = None, **kwargs) -> Run:
    """Module-level shortcut: ``RunStore(store).get_or_run(cfg, **kwargs)``."""
    if not isinstance(store, RunStore):
        store = RunStore(store)
    return store.get_or_run(cfg, **kwargs)


def load_run(path: str | Path) -> Run:
    return Run.load(path)
