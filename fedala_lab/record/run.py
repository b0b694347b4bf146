"""Run: everything a simulation recorded, as tidy tables and plain arrays.

    run = get_or_run(preset("teach", algo="fedala"))
    run.summary()                  # best/final pooled accuracy (%), rounds, seconds, bytes up/down
    run.rounds, run.clients        # the tables below (pandas)
    run.ala, run.ala_weights(3)    # ALA's weight-learning passes and weights (Fig. 2, 3)
    run.tables["lama_layers"]      # any algorithm's own tables
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..algorithms.ala import ALA_COLUMNS
from ..config import RunConfig

# 2: every algorithm table as table_<name>.csv (ALA's passes were ala.csv); 3: accuracies in percent (were fractions)
FORMAT_VERSION = 3
# the accuracy columns that format 3 turned from fractions into percent: (frame, columns)
_PERCENT_SINCE_3 = (("rounds", ("acc", "acc_std", "best_acc")), ("clients", ("test_acc",)))
# pandas < 3 needs asking for exact float parsing; pandas 3 does it by default (and deprecates the flag)
_ROUND_TRIP = {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}


@dataclass(eq=False)
class Run:
    """What one simulated run recorded. Accuracies are in percent everywhere (0–100: ``acc``, ``best_acc``,
    ``test_acc``, :attr:`best_acc`, :meth:`summary`, the trackers, the CLI's JSON), and so is the test AUC
    (``auc``, ``test_auc``); ``acc_std`` is in percentage points.

    ``config``: the RunConfig that made it (``custom:`` data or model when they were given, by content hash).

    ``rounds`` — one row per round: ``round``; ``acc`` (pooled test accuracy Σ correct / Σ test samples of
    every client's model *before* local training, as the paper evaluates; NaN in rounds not evaluated,
    ``eval_every``); ``acc_std`` (unweighted std of the clients' accuracies); ``test_loss``; ``train_loss``
    (mean loss of the local SGD steps, weighted by train samples); ``init_loss`` / ``trained_loss`` (loss over
    the whole train split of the initialised and of the trained local models, Fig. 5; NaN unless
    ``record_train_loss``); ``best_acc`` so far; ``num_selected``; ``stragglers`` and ``dropped`` (clients);
    ``bytes_up`` / ``bytes_down`` (what was sent each way, parameters × clients); ``seconds`` and the phases'
    ``init_seconds`` (local initialisation: ALA's time), ``eval_seconds``, ``train_seconds``,
    ``aggregate_seconds``; ``auc`` (pooled test AUC in percent, 0–100: each client's micro-averaged AUC over
    its (row, class) pairs, weighted by its test samples, as the FedALA reference code computes it;
    compute/metrics.py; NaN in rounds not evaluated).

    ``clients`` — one row per (evaluated round, client): ``round``, ``client``, ``selected``, ``test_acc``,
    ``test_loss``, ``test_correct``, ``test_num`` (its model before local training, or the model its
    algorithm evaluates: a personal model, a fine-tuned copy), ``train_loss`` (mean loss of its local steps),
    ``init_loss`` / ``trained_loss`` (as above, per client), ``seconds`` (its local training; on the
    vectorised backend its share of the batched calls, by the rows it processed; 0 when it did not train),
    ``straggler`` (drawn as one this round), ``local_steps`` (SGD steps it did: its full work, a straggler's
    part, 0 when dropped or not selected), ``bytes_up`` / ``bytes_down`` (what it sent and received; the
    round's are their sums), ``test_auc`` (its micro-averaged test AUC in percent, 0–100, of the model its
    test numbers are of; NaN for a client without test rows).

    ``tables`` — each algorithm's own tidy tables by name (saved as ``table_<name>.csv``): ``ala`` (ALA's
    weight-learning passes of the tracked clients, Fig. 3: ``round``, ``client``, ``epoch``, ``loss`` — the
    pass's last batch, the reference's convergence signal —, ``loss_mean``, ``start_phase``, ``capped``),
    FedLAMA's ``lama_layers`` and ``lama_adjust`` (algorithms/fedlama.py), and those of your own algorithms.

    ``arrays`` — per-client series stacked over rounds: ``ala_w/<client>/<param>`` (ALA's weights W after
    learning, Fig. 2) with ``ala_w_rounds/<client>``; ``snap_start/<client>``, ``snap_end/<client>``
    (flattened local models after initialisation and after training, Fig. 4) with ``snap_rounds/<client>``.

    ``meta``: environment (versions, device, backend, threads), parameter names and shapes, the algorithm's
    entries (ALA: ``ala_params``, ``capped_clients``), clients without a local batch, seconds, sizes.
    ``status``: complete, diverged or partial (``message`` says why it diverged).
    """

    config: RunConfig
    clients: pd.DataFrame
    rounds: pd.DataFrame
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)  # env, param names/shapes, capped clients, timings
    status: str = "complete"  # complete | diverged | partial
    message: str = ""
    path: Path | None = None
    # the algorithms' tidy tables (Round.record): name -> DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    # handed out from a run store rather than computed by this call (never saved; see served_note)
    served: bool = False

    @property
    def ala(self) -> pd.DataFrame:
        """ALA's weight-learning passes of the tracked clients (``tables["ala"]``; empty for a run without ALA)."""
        return self.tables.get("ala", pd.DataFrame(columns=ALA_COLUMNS))

    # -- headline numbers -------------------------------------------------------------------------

    @property
    def algo(self) -> str:
        return self.config.algo

    @property
    def acc(self) -> pd.Series:
        """Pooled test accuracy per evaluated round (%), indexed by round."""
        r = self.rounds.dropna(subset=["acc"])
        return pd.Series(r["acc"].to_numpy(), index=r["round"].to_numpy(), name=self.algo)

    @property
    def best_acc(self) -> float:
        """The best pooled test accuracy over the evaluated rounds (%)."""
        return float(self.acc.max()) if len(self.acc) else float("nan")

    @property
    def final_acc(self) -> float:
        """The pooled test accuracy of the last evaluated round (%)."""
        return float(self.acc.iloc[-1]) if len(self.acc) else float("nan")

    @property
    def capped_clients(self) -> list[int]:
        """Clients whose ALA start phase hit ``max_start_epochs`` without converging."""
        return list(self.meta.get("capped_clients", []))

    @property
    def untrained_clients(self) -> list[int]:
        """Clients holding less than one batch of train data: with ``drop_last`` they never train locally."""
        return list(self.meta.get("untrained_clients", []))

    def summary(self) -> dict:
        """Best and final pooled accuracy (percent), rounds, simulation seconds, bytes each way."""
        acc = self.acc
        return {
            "algo": self.algo,
            "best_acc": round(self.best_acc, 4),
            "best_round": int(acc.idxmax()) if len(acc) else None,
            "final_acc": round(self.final_acc, 4),
            "rounds": int(self.rounds["round"].max()) if len(self.rounds) else 0,
            "seconds": round(float(self.meta.get("seconds", self.rounds["seconds"].sum())), 3),
            "bytes_up": int(self.rounds["bytes_up"].sum()),
            "bytes_down": int(self.rounds["bytes_down"].sum()),
            "capped_clients": self.capped_clients,
            "untrained_clients": self.untrained_clients,
            "status": self.status,
        }

    # -- recorded trajectories ---------------------------------------------------------------------

    def ala_weights(self, client: int, round_: int | None = None) -> tuple[int, dict[str, np.ndarray]]:
        """ALA weights W of ``client`` after learning in ``round_`` (latest recorded ≤ round_ if None/absent).

        Returns (round, {param name: array}). Raises KeyError if the client was not tracked.
        """
        key = f"ala_w_rounds/{client}"
        if key not in self.arrays:
            raise KeyError(f"no ALA weights recorded for client {client} (tracked: {self.tracked_clients()})")
        rounds = self.arrays[key]
        if round_ is None:
            i = len(rounds) - 1
        else:
            i = int(np.searchsorted(rounds, round_, side="right")) - 1
            if i < 0:
                raise KeyError(f"client {client} has no ALA weights at or before round {round_} "
                               f"(first: {int(rounds[0])})")
        names = self.meta["ala_params"]
        return int(rounds[i]), {n: self.arrays[f"ala_w/{client}/{n}"][i] for n in names}

    def tracked_clients(self) -> list[int]:
        return sorted(int(k.split("/")[1]) for k in self.arrays if k.startswith("ala_w_rounds/"))

    def snapshots(self, client: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rounds, start (R, P), end (R, P)): flattened local models of ``client`` per round (Fig. 4)."""
        key = f"snap_rounds/{client}"
        if key not in self.arrays:
            have = sorted(int(k.split("/")[1]) for k in self.arrays if k.startswith("snap_rounds/"))
            raise KeyError(f"no parameter snapshots for client {client} (snapshot clients: {have}); "
                           "set snapshot_clients in the config")
        return self.arrays[key], self.arrays[f"snap_start/{client}"], self.arrays[f"snap_end/{client}"]

    # -- persistence -------------------------------------------------------------------------------

    def save(self, directory: str | Path, *, states: dict[int, str] | None = None) -> Path:
        """Write the run into ``directory`` (which must exist and be empty but for ``states``); ``manifest.json``
        goes last and records every file's size and SHA-256, so a damaged folder is never read as a finished run.

        ``states``: {round: file name in ``directory``} of engine states kept with the run (branch points, see
        record/store.py), listed in the manifest under "states" with their sizes and hashes. They are optional
        extras: loading the run neither needs nor checks them; whoever reads one checks it."""
        d = Path(directory)
        self.meta.setdefault("saved_at", _utc_now())
        (d / "config.json").write_text(json.dumps(self.config.to_dict(), indent=2, sort_keys=True))
        self.clients.to_csv(d / "clients.csv", index=False)
        self.rounds.to_csv(d / "rounds.csv", index=False)
        np.savez(d / "arrays.npz", **self.arrays)
        (d / "meta.json").write_text(json.dumps(self.meta, indent=2, sort_keys=True, default=str))
        tables = sorted(self.tables)
        for name in tables:
            self.tables[name].to_csv(d / f"table_{name}.csv", index=False)
        names = ["config.json", "clients.csv", "rounds.csv", "arrays.npz", "meta.json",
                 *(f"table_{name}.csv" for name in tables)]
        manifest = {
            "format": FORMAT_VERSION, "key": self.config.key(), "status": self.status,
            "message": self.message, "summary": self.summary(),
            # whether its algorithm read the run's total rounds: then no other length branches from it
            "reads_horizon": bool(self.meta.get("reads_horizon", True)),
            "files": {n: {"bytes": (d / n).stat().st_size, "sha256": _sha256(d / n)} for n in names},
            "tables": tables,
        }
        if states:
            manifest["states"] = {str(t): {"file": f, "bytes": (d / f).stat().st_size, "sha256": _sha256(d / f)}
                                  for t, f in sorted(states.items())}
        (d / "manifest.json").write_text(json.dumps(json_safe(manifest), indent=2, default=str))
        return d

    @classmethod
    def load(cls, directory: str | Path, *, verify: bool = True) -> Run:
        """Load a finished run folder. A folder without ``manifest.json`` is not a finished run; with
        ``verify`` (the default) every file the manifest lists must be there with its recorded size and
        SHA-256, else :class:`~fedala_lab.errors.DataError` says which file is damaged."""
        from ..errors import DataError

        d = Path(directory)
        manifest = read_manifest(d)
        if verify:
            problem = check_files(d, manifest, hashes=True)
            if problem:
                raise DataError(f"run folder {d} is damaged: {problem}")
        try:
            cfg = RunConfig.from_dict(json.loads((d / "config.json").read_text()))

            def csv(name):
                return pd.read_csv(d / name, **_ROUND_TRIP)

            with np.load(d / "arrays.npz", allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
            tables = {name: csv(f"table_{name}.csv") for name in manifest.get("tables", [])}
            if (d / "ala.csv").is_file() and "ala" not in tables:  # format 1 kept ALA's passes apart
                ala = csv("ala.csv")
                if len(ala):
                    tables["ala"] = ala
            frames = {"clients": csv("clients.csv"), "rounds": csv("rounds.csv")}
            if manifest.get("format", 1) < 3:  # written in fractions: read in today's unit
                for frame, cols in _PERCENT_SINCE_3:
                    for c in cols:
                        if c in frames[frame]:
                            frames[frame][c] = 100 * frames[frame][c]
            run = cls(config=cfg, **frames, arrays=arrays, meta=json.loads((d / "meta.json").read_text()),
                      status=manifest.get("status", "complete"), message=manifest.get("message", ""), path=d,
                      tables=tables)
        except DataError:
            raise
        except Exception as err:  # noqa: BLE001 - a torn file of any kind: say which folder, never a traceback
            raise DataError(f"run folder {d} is damaged: {type(err).__name__}: {err}") from None
        return run

    def __repr__(self) -> str:
        s = self.summary()
        return (f"Run({s['algo']}, rounds={s['rounds']}, best={s['best_acc']:.2f}%, "
                f"final={s['final_acc']:.2f}%, status={self.status}, path={self.path})")


def _utc_now() -> str:
    import datetime

    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def computed_on(run: Run) -> str:
    """Where and when ``run`` was computed, in words: the date it was saved, the platform that computed it
    (:func:`fedala_lab.numerics.platform_id`), the CPU or GPU and torch's version, as its records say."""
    env = run.meta.get("env", {})
    num = env.get("numerics", {})
    platform = num.get("platform") or run.meta.get("code", {}).get("platform") or "an unrecorded platform"
    where = num.get("cpu") if str(env.get("device", "cpu")).startswith("cpu") else env.get("device_name")
    when = run.meta.get("saved_at", "at an unrecorded time")
    return (f"computed {when} on {platform}" + (f" ({where})" if where else "")
            + (f", torch {env['torch']}" if env.get("torch") else ""))


def served_note(run: Run) -> str:
    """The line that says a run came from the store, not from this call: its folder, key and
    :func:`computed_on`."""
    name = run.path.name if run.path is not None else run.config.slug()
    return f"{run.algo}: served from the run store: {name} (key {run.config.key()}), {computed_on(run)}"


def load_run(path: str | Path) -> Run:
    """Load a run folder written by the store (or ``Run.save``)."""
    return Run.load(path)


def run_row(run: Run, extra: Iterable[str] = ()) -> dict:
    """One run as a flat row: its config (algo, dataset, seed, p, s, …), best/final accuracy in % and best/final
    pooled test AUC in % (``best_auc``, ``final_auc``: NaN for a run recorded without AUC).

    The row of a run in every table (sweeps' ``runs.csv``, :func:`fedala_lab.analysis.tables.runs_frame`);
    ``extra`` adds config fields (run or data) by name.
    """
    cfg = run.config
    row = {
        "algo": cfg.algo, "dataset": cfg.data.dataset, "partition": cfg.data.partition,
        "beta": cfg.data.beta, "num_clients": cfg.data.num_clients, "rounds": cfg.rounds, "seed": cfg.seed,
        "best_acc": run.best_acc, "final_acc": run.final_acc,
        "best_round": run.summary()["best_round"], "seconds": run.summary()["seconds"],
        "status": run.status, "trajectory": trajectory(run), **auc_summary(run),
    }
    for name in extra:
        row[name] = getattr(cfg, name) if hasattr(cfg, name) else getattr(cfg.data, name)
    return row


def auc_summary(run: Run) -> dict[str, float]:
    """The best and the final evaluated round's pooled test AUC (%), NaN where the run recorded none."""
    auc = run.rounds["auc"].dropna() if "auc" in run.rounds else pd.Series(dtype=float)
    return {"best_auc": float(auc.max()) if len(auc) else float("nan"),
            "final_auc": float(auc.iloc[-1]) if len(auc) else float("nan")}


def trajectory(run: Run) -> str:
    """12 hex digits naming a run's per-round results (accuracy and losses of every round, every client):
    equal for two runs whose numbers are all equal, e.g. seeds that change nothing (tables say so)."""
    import hashlib

    cols = [c for c in ("round", "client", "test_acc", "test_loss", "train_loss") if c in run.clients]
    blob = run.clients[cols].to_numpy(dtype="float64").tobytes() + run.rounds[["acc"]].to_numpy("float64").tobytes()
    return hashlib.sha256(blob).hexdigest()[:12]


def read_manifest(d: Path) -> dict:
    """The folder's ``manifest.json`` (what marks it finished); DataError if absent or unreadable."""
    from ..errors import DataError

    man = d / "manifest.json"
    if not man.is_file():
        raise DataError(f"{d} is not a finished run (no manifest.json): it may still be running or "
                        "was interrupted; resume it with get_or_run(config)")
    try:
        manifest = json.loads(man.read_text())
    except (OSError, ValueError) as err:
        raise DataError(f"run folder {d} is damaged: manifest.json cannot be read ({err})") from None
    if not isinstance(manifest, dict):
        raise DataError(f"run folder {d} is damaged: manifest.json holds no manifest")
    return manifest


def check_files(d: Path, manifest: dict, *, hashes: bool) -> str:
    """"" if every file the manifest lists is present with its recorded size (and, with ``hashes``, its
    SHA-256), else what is wrong with the first that is not. Manifests of older versions list names only."""
    files = manifest.get("files", [])
    entries = files.items() if isinstance(files, dict) else ((n, {}) for n in files)
    for name, rec in entries:
        f = d / name
        if not f.is_file():
            return f"{name} is missing"
        if "bytes" in rec and f.stat().st_size != rec["bytes"]:
            return f"{name} has {f.stat().st_size} bytes, the manifest says {rec['bytes']}"
        if hashes and "sha256" in rec and _sha256(f) != rec["sha256"]:
            return f"{name} does not match its recorded SHA-256 (changed or corrupt)"
    return ""


def torch_save(obj, path: str | Path) -> None:
    """``torch.save(obj, path)``, but a failed write (a full disk) raises its OSError naming ``path``: torch
    itself reports it as "RuntimeError: [enforce fail at inline_container.cc] unexpected pos", which says
    nothing of the disk. The caller removes what was half-written."""
    import torch

    class _Writes:  # torch writes through this and swallows the OSError into its RuntimeError: keep it
        def __init__(self, fh):
            self.fh, self.error = fh, None

        def write(self, b):
            try:
                return self.fh.write(b)
            except OSError as err:
                self.error = err
                raise

        def flush(self):
            return self.fh.flush()

    out = None
    try:
        with open(path, "wb") as fh:
            out = _Writes(fh)
            torch.save(obj, out)
    except RuntimeError:
        if out is None or out.error is None:
            raise
        raise OSError(out.error.errno, out.error.strerror, str(path)) from None
    except OSError as err:  # the last buffered bytes failed as the file closed
        if err.filename is not None:
            raise
        raise OSError(err.errno, err.strerror, str(path)) from None


def sha256(path: Path) -> str:
    """The SHA-256 of a file, in hex."""
    return _sha256(path)


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def json_safe(obj):
    """``obj`` with NaN and infinities replaced by None, so ``json.dumps`` writes valid JSON (null)."""
    import math

    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj
