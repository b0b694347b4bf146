"""The run store: one folder per run, named by a readable prefix and the config's hash.

    runs/
      fedala-digits-dir0.1-n20-r50-s0-3f9c2a1b7d40/   config.json, clients.csv, rounds.csv, ala.csv,
                                                      arrays.npz, meta.json, state.pt (the last round's engine
                                                      state), state-r<t>.pt (kept earlier rounds),
                                                      manifest.json (written last)
      .checkpoints/<name>.pt                          resumable state of unfinished runs
      .checkpoints/<name>.state-r<t>.pt               earlier rounds' states of an unfinished run, kept for it
      .locks/<name>.lock                              one writer per config at a time

A run is written into a temporary folder and renamed into place, so a half-written folder is never taken
for a finished one; ``manifest.json`` (written last) is what marks a folder finished, and it records
every file's size and SHA-256. Only a folder whose manifest says "complete" and whose files all match
is a finished run: a diverged run is kept (status "diverged") but never served as a result, and a
damaged folder (a file missing, truncated or changed) is reported and replaced by the next computation.
Temporary folders left by writers that died are swept on the next write. Two processes asking for the
same config serialise on a lock file (:meth:`RunStore.lock`): the second waits and then loads the first
one's run. A killed run leaves its last checkpoint; asking for the same config again resumes from it,
giving the same result as an uninterrupted run.

Kept states. With a finished run the store keeps the engine state (models, buffers, the algorithm's state:
the checkpoint format without the records, which the run's tables hold) of its last round and of the rounds
its config's ``keep_states`` names, listed in the manifest with their sizes and hashes. A later run that
equals this one through such a round starts there instead of from round 1 (experiments/prefix.py says
which runs may). A state is an optional extra: a missing or damaged one only means no branching from it.

The store keeps runs; it never makes them: :func:`fedala_lab.experiments.runs.get_or_run` simulates
what the store lacks (docs/design.md#run-store).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..config import RunConfig
from ..environ import RUNS, env_folder
from ..errors import ConfigError, DataError, TrainingDiverged
from .run import Run, check_files, read_manifest, sha256, torch_save

_KEPT_STATE = re.compile(r"\.state-r\d+\.pt$")
# A temporary folder or file of a writer on another machine (a shared store) is swept only this old.
STALE_SECONDS = 24 * 3600
_HOST = "".join(c if c.isalnum() else "_" for c in socket.gethostname())[:40] or "host"


def default_root() -> Path:
    """``$FEDALA_LAB_RUNS`` or ``./runs`` (an empty ``$FEDALA_LAB_RUNS`` is refused: it would be this folder)."""
    return env_folder(RUNS) or Path("runs")


@dataclass
class Stored:
    """What the store holds for a config: ``state`` is "absent", "complete", "diverged", "partial" or
    "damaged" (``reason`` says why); ``message`` is a diverged run's divergence message."""

    state: str
    path: Path
    reason: str = ""
    message: str = ""


class RunStore:
    def __init__(self, root: str | Path | None = None):
        if isinstance(root, str) and not root.strip():  # Path("") is ".": the runs would land in this folder
            raise ConfigError("store", root, "a folder path (the run store; unset: $FEDALA_LAB_RUNS or ./runs)")
        self.root = Path(root) if root is not None else default_root()
        if self.root.exists() and not self.root.is_dir():
            raise DataError(f"run store {self.root} is a file, not a folder: give a folder (it is created "
                            "if missing)")

    # -- names -------------------------------------------------------------------------------------

    def name_for(self, cfg: RunConfig) -> str:
        return f"{cfg.slug()}-{cfg.key()}"

    def dir_for(self, cfg: RunConfig) -> Path:
        """The folder of ``cfg``'s run: ``<slug>-<key>``, or a finished folder of the same key under another
        slug — the same computation named otherwise (custom data, or a ``pfllib:`` folder, of identical content
        under another name) is stored once."""
        d = self.root / self.name_for(cfg)
        if d.exists() or not self.root.is_dir():
            return d
        same = sorted(p for p in self.root.glob(f"*-{cfg.key()}") if (p / "manifest.json").is_file())
        return same[0] if same else d

    def checkpoint_for(self, cfg: RunConfig) -> Path:
        return self.root / ".checkpoints" / f"{self.name_for(cfg)}.pt"

    def kept_state_for(self, cfg: RunConfig, t: int) -> Path:
        """Where an unfinished run of ``cfg`` keeps its engine state of round ``t`` until the run is saved."""
        return self.root / ".checkpoints" / f"{self.name_for(cfg)}.state-r{t}.pt"

    # -- reading -----------------------------------------------------------------------------------

    def status(self, cfg: RunConfig) -> Stored:
        """What the store holds for ``cfg``, checked without reading the big files: the manifest, the
        stored config's key and every listed file's size (hashes are checked when a run is loaded)."""
        d = self.dir_for(cfg)
        if not (d / "manifest.json").is_file():
            return Stored("absent", d)
        try:
            manifest = read_manifest(d)
            stored = RunConfig.from_dict(json.loads((d / "config.json").read_text()))
        except (OSError, ValueError) as err:  # DataError and ConfigError are ValueErrors
            return Stored("damaged", d, f"{type(err).__name__}: {err}")
        key = cfg.key()
        if stored.key() != key or manifest.get("key") != key:
            return Stored("damaged", d, "config.json or the manifest holds another configuration or code")
        problem = check_files(d, manifest, hashes=False)
        if problem:
            return Stored("damaged", d, problem)
        state = manifest.get("status", "complete")
        return Stored(state if state in ("complete", "diverged", "partial") else "damaged", d,
                      message=str(manifest.get("message", "")))

    def has(self, cfg: RunConfig) -> bool:
        """Whether the store holds the finished, intact run of this config (diverged runs do not count)."""
        return self.status(cfg).state == "complete"

    def find(self, cfg: RunConfig, *, diverged: bool = False) -> Run | None:
        """The finished run of this config, or None (also for a damaged one, with a warning: the next
        computation replaces it). A diverged run is returned only when ``diverged`` is true."""
        st = self.status(cfg)
        if st.state == "damaged":
            warnings.warn(f"run folder {st.path} is damaged ({st.reason}); it will be recomputed", stacklevel=2)
        if st.state != "complete" and not (diverged and st.state == "diverged"):
            return None
        try:
            run = Run.load(st.path)
        except DataError as err:
            warnings.warn(f"{err}; it will be recomputed", stacklevel=2)
            return None
        run.served = True
        return run

    def outcome(self, cfg: RunConfig) -> tuple[Run | None, Stored]:
        """What asking for ``cfg`` gets from the store: (the finished run or None, its :meth:`status`).

        A diverged run raises :class:`TrainingDiverged` with its message (the same config diverges the same
        way); a damaged folder is reported with a warning (its run is None: to be replaced).
        """
        st = self.status(cfg)
        if st.state == "diverged":
            raise TrainingDiverged(st.message or f"the stored run {st.path.name} diverged", _quiet_load(st.path))
        if st.state == "damaged":
            warnings.warn(f"run folder {st.path} is damaged ({st.reason}); recomputing it", stacklevel=3)
        return self.find(cfg) if st.state == "complete" else None, st

    def states(self, path: Path) -> dict[int, Path]:
        """The engine states kept with the finished run in folder ``path``: {round: file} (unchecked)."""
        try:
            manifest = read_manifest(path)
        except DataError:
            return {}
        states = manifest.get("states") or {}
        return {int(t): path / rec["file"] for t, rec in states.items()
                if isinstance(rec, dict) and _plain_name(rec.get("file"))}

    def load_state(self, path: Path, t: int) -> dict:
        """The engine state of round ``t`` kept with the run in folder ``path``, its size and SHA-256 checked
        against the manifest, read with ``torch.load(weights_only=True)``. DataError when missing or damaged."""
        import torch

        rec = (read_manifest(path).get("states") or {}).get(str(t))
        if not isinstance(rec, dict) or not _plain_name(rec.get("file")):
            raise DataError(f"run folder {path} keeps no engine state of round {t}")
        f = path / rec["file"]
        if not f.is_file() or f.stat().st_size != rec.get("bytes") or sha256(f) != rec.get("sha256"):
            raise DataError(f"the engine state {f} is missing or damaged (size or SHA-256 differs from the manifest)")
        try:
            return torch.load(f, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - a torn file of any kind
            raise DataError(f"the engine state {f} cannot be read: {type(err).__name__}: {err}") from None

    def with_states(self):
        """(folder, config, {round: state file}, reads_horizon) of every finished run that keeps engine states:
        the runs a new run may branch from (``reads_horizon``: its algorithm read the run's total rounds, so
        only a run of its length may). Unreadable folders are skipped."""
        if not self.root.is_dir():
            return
        for d in sorted(self.root.iterdir()):
            if d.name.startswith(".") or not (d / "manifest.json").is_file():
                continue
            try:
                manifest = read_manifest(d)
                if manifest.get("status", "complete") != "complete" or not manifest.get("states"):
                    continue
                cfg = RunConfig.from_dict(json.loads((d / "config.json").read_text()))
            except (OSError, ValueError):
                continue
            if cfg.key() == manifest.get("key"):
                yield d, cfg, self.states(d), bool(manifest.get("reads_horizon", True))

    def load(self, name: str) -> Run:
        """Load a run by folder name. Only folders directly inside the store can be reached."""
        if not name or "/" in name or "\\" in name or name.startswith(".") or name in ("..", "."):
            raise DataError(f"{name!r} is not a run name in {self.root}")
        return Run.load(self.root / name)

    def checkpoints(self) -> dict[str, Path]:
        """The checkpoints of stopped (or killed) runs: {the name their folder will have: checkpoint file}.
        The engine states an unfinished run keeps beside its checkpoint (``<name>.state-r<t>.pt``) are not
        checkpoints: they hold no records."""
        ckpts = self.root / ".checkpoints"
        if not ckpts.is_dir():
            return {}
        return {f.name[:-3]: f for f in sorted(ckpts.glob("*.pt"))
                if not f.name.startswith(".") and not _KEPT_STATE.search(f.name)}

    def list(self) -> pd.DataFrame:
        """One row per stored run (finished or diverged): name, algo, dataset, rounds, seed, best/final
        accuracy (%), status, modified, and its ``config`` as stored (a dict)."""
        rows = []
        if self.root.is_dir():
            for d in sorted(self.root.iterdir()):
                man = d / "manifest.json"
                if d.name.startswith(".") or not man.is_file():
                    continue
                try:
                    m = json.loads(man.read_text())
                    cfg = json.loads((d / "config.json").read_text())
                except (OSError, ValueError):
                    continue
                if not isinstance(m, dict) or not isinstance(cfg, dict):
                    continue  # not a run's files (tampered, or written by something else): not listed
                s = m.get("summary") if isinstance(m.get("summary"), dict) else {}
                data = cfg.get("data") if isinstance(cfg.get("data"), dict) else {}
                rows.append({
                    "name": d.name, "algo": cfg.get("algo"), "dataset": data.get("dataset"),
                    "clients": data.get("num_clients"), "rounds": cfg.get("rounds"),
                    "seed": cfg.get("seed"), "best_acc": s.get("best_acc"), "final_acc": s.get("final_acc"),
                    "seconds": s.get("seconds"), "status": m.get("status"),
                    "modified": pd.Timestamp(man.stat().st_mtime, unit="s"), "config": cfg,
                })
        cols = ["name", "algo", "dataset", "clients", "rounds", "seed", "best_acc", "final_acc", "seconds",
                "status", "modified", "config"]
        return pd.DataFrame(rows, columns=cols)

    # -- writing -----------------------------------------------------------------------------------

    def save(self, run: Run, *, replace: bool = False, states: dict | None = None) -> Path:
        """Write ``run`` atomically (temporary folder, then rename). An existing finished run wins, unless
        ``replace`` (then it is removed first); a damaged or unfinished folder is always replaced.

        ``states``: {round: engine state} kept with the run as branch points, each a state dict (written
        with ``torch.save``) or the path of a file holding one (hard-linked, else copied); the last round's
        is ``state.pt``, the others ``state-r<t>.pt``. They are written before the manifest, which lists them."""
        final = self.dir_for(run.config)
        with _writing(self.root):
            self.root.mkdir(parents=True, exist_ok=True)
            self.sweep()
            tmp = self.root / f".tmp-{final.name}.{_HOST}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
            tmp.mkdir()
            try:
                names = {}
                last = max(states or {}, default=None)
                for t, src in sorted((states or {}).items()):
                    names[t] = "state.pt" if t == last else f"state-r{t}.pt"
                    _place(src, tmp / names[t])
                run.save(tmp, states=names)
                if replace or (final.exists() and self.status(run.config).state != "complete"):
                    shutil.rmtree(final, ignore_errors=True)
                try:
                    os.rename(tmp, final)
                except OSError:
                    if self.status(run.config).state == "complete":
                        pass  # another writer finished the same run first: theirs stands
                    else:
                        shutil.rmtree(final, ignore_errors=True)
                        os.rename(tmp, final)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
        run.path = final
        return final

    def sweep(self) -> list[Path]:
        """Remove temporary folders and checkpoint files of writers that died (or, on another machine,
        that are over a day old). Returns what was removed."""
        removed = []
        candidates = [d for d in self.root.glob(".tmp-*")] if self.root.is_dir() else []
        ckpts = self.root / ".checkpoints"
        if ckpts.is_dir():
            candidates += [f for f in ckpts.glob(".*.tmp")]
        for path in candidates:
            if _is_stale(path):
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        path.unlink()
                removed.append(path)
        return removed

    @contextlib.contextmanager
    def lock(self, cfg: RunConfig):
        """Hold the writer's lock of ``cfg``: one process computes and saves a config at a time."""
        locks = self.root / ".locks"
        with _writing(self.root):
            locks.mkdir(parents=True, exist_ok=True)
            fh = open(locks / f"{self.name_for(cfg)}.lock", "w")  # noqa: SIM115 - held for the block
        with fh:
            try:
                import fcntl

                fcntl.flock(fh, fcntl.LOCK_EX)
            except ImportError:  # Windows: the atomic rename still keeps runs whole
                pass
            yield


def _place(src, dest: Path) -> None:
    """A state dict written to ``dest``, or the file ``src`` hard-linked there (copied across devices)."""
    if isinstance(src, dict):
        torch_save(src, dest)  # a full disk: an OSError, which save() reports as one line
        return
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)


def _plain_name(name) -> bool:
    """A file name inside the folder itself (a manifest names no path elsewhere)."""
    return isinstance(name, str) and bool(name) and "/" not in name and "\\" not in name and not name.startswith(".")


def open_store(store: RunStore | str | Path | None = None) -> RunStore:
    """``store`` itself, or the store in that folder (None: :func:`default_root`)."""
    return store if isinstance(store, RunStore) else RunStore(store)


def _quiet_load(path: Path) -> Run | None:
    """A stored (diverged) run for the error it comes with, or None if it cannot be read."""
    try:
        return Run.load(path)
    except DataError:
        return None


def _is_stale(path: Path) -> bool:
    """A temporary folder/file of a dead writer: ``….{host}.{pid}.{hex}`` of this host whose process is
    gone, or anything older than :data:`STALE_SECONDS`."""
    try:
        age = time.time() - path.stat().st_mtime
    except OSError:
        return False
    if age > STALE_SECONDS:
        return True
    parts = path.name.rsplit(".", 3)
    if path.is_dir() and len(parts) == 4 and parts[1] == _HOST and parts[2].isdigit():
        return not _alive(int(parts[2]))
    if not path.is_dir() and path.name.endswith(".tmp"):  # checkpoints: .{name}.{pid}.tmp (this host)
        pid = path.name[:-4].rsplit(".", 1)[-1]
        return pid.isdigit() and not _alive(int(pid))
    return False


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # someone else's process, or a platform without signals: leave it be
    return True


@contextlib.contextmanager
def _writing(root: Path):
    """Turn an OS refusal to write the store (permissions, a full disk) into one clear DataError."""
    try:
        yield
    except OSError as err:
        raise DataError(f"cannot write the run store {root}: {err.strerror or err}"
                        + (f" ({err.filename})" if err.filename else "")) from None
