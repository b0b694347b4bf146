"""Experiment trackers: the runs a caller asks for, logged to TensorBoard or MLflow (docs/trackers.md).

    get_or_run(cfg, trackers=[TensorBoard("tb"), MLflow("ml")])
    fedala-lab run --preset teach --tracker tensorboard=tb --tracker mlflow=ml

A run computed now is logged as it goes (through the engine's per-round callback); a run served from the
run store is logged from its records (a replay), so the trackers see every run asked for, and the two give
the same content (tested). Logged per round (the step): every column of ``run.rounds`` and ``ala_passes``
(ALA's weight-learning passes per tracked client, ``run.ala``); per client, ``client_<id>/<column>`` of
``run.clients`` (and ``ala_passes``, ``ala_loss``) at the rounds ``clients=`` picks; the config as
hyper-parameters (MLflow params, TensorBoard's HParams).

A run's name in a tracker is its folder name in the run store (``<slug>-<key>``): a run is logged once
per tracker. Asking for it again, from this process, another, or a sweep's worker, finds it there and
logs nothing; a log cut short (a stopped or interrupted run) is replaced when the run is next asked for.

TensorBoard and MLflow are optional dependencies (``pip install 'fedala_lab[tensorboard]'``,
``'fedala_lab[mlflow]'``), imported when a run is first logged. MLflow's store is SQLite
(``DIR/mlflow.db``): MLflow 3's plain-file store is in maintenance mode and refuses to start unasked.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
import sqlite3
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Self

import pandas as pd

from ..config import RunConfig
from ..errors import ConfigError, FedalaError, TrainingDiverged
from ..record.run import Run
from ..record.store import open_store

KINDS = ("tensorboard", "mlflow")
# tables every MLflow SQLite store has: a database without them is not one (another program's)
MLFLOW_TABLES = frozenset({"alembic_version", "experiments", "runs", "metrics", "params", "tags"})
CLIENT_ROUNDS = "none, all, last, every:K or round numbers, comma-separated (e.g. every:10,last)"
# the metrics TensorBoard's HParams table shows beside a run's hyper-parameters (their last values)
SUMMARY_METRICS = ("acc", "best_acc", "auc", "test_loss", "train_loss")


@dataclasses.dataclass(frozen=True)
class ClientRounds:
    """The rounds at which per-client metrics are logged, from a spec such as ``"every:10,last"``
    (:data:`CLIENT_ROUNDS`). Only evaluated rounds have clients' accuracies (``eval_every``)."""

    spec: str = "last"
    every: tuple[int, ...] = ()
    rounds: frozenset[int] = frozenset()
    all: bool = False
    last: bool = False

    @classmethod
    def parse(cls, spec: str | ClientRounds) -> ClientRounds:
        if isinstance(spec, ClientRounds):
            return spec
        if not isinstance(spec, str) or not spec.strip():
            raise ConfigError("tracker_clients", spec, CLIENT_ROUNDS)
        every, rounds, flags = [], set(), set()
        for item in (s.strip().lower() for s in spec.split(",")):
            m = re.fullmatch(r"every:(\d+)|(\d+)|(none|all|last)", item)
            if m is None or (m[1] and int(m[1]) < 1) or (m[2] and int(m[2]) < 1):
                raise ConfigError("tracker_clients", spec, CLIENT_ROUNDS)
            if m[1]:
                every.append(int(m[1]))
            elif m[2]:
                rounds.add(int(m[2]))
            else:
                flags.add(m[3])
        if "none" in flags and (every or rounds or flags != {"none"}):
            raise ConfigError("tracker_clients", spec, CLIENT_ROUNDS, "none stands alone")
        return cls(spec, tuple(every), frozenset(rounds), "all" in flags, "last" in flags)

    def __call__(self, t: int, last_round: int) -> bool:
        return (self.all or t in self.rounds or (self.last and t == last_round)
                or any(t % k == 0 for k in self.every))

    def picked(self, last_round: int) -> set[int]:
        """The rounds of a run of ``last_round`` rounds this picks."""
        return {t for t in range(1, last_round + 1) if self(t, last_round)}


class Tracker:
    """A place runs are logged to: a folder, and the rounds at which clients are logged (``clients``).

    Picklable (a sweep's worker processes get a copy); what a tracker opens lives in one process.
    """

    kind = ""

    def __init__(self, directory: str | Path, *, clients: str | ClientRounds = "last"):
        if not isinstance(directory, (str, os.PathLike)) or not str(directory).strip():
            raise ConfigError("tracker", directory, f"{self.kind}=DIR: a folder (created if missing)")
        self.directory = Path(directory).expanduser().absolute()  # the same folder from any worker's cwd
        if self.directory.exists() and not self.directory.is_dir():
            raise ConfigError("tracker", f"{self.kind}={directory}", "a folder, not a file")
        self.clients = ClientRounds.parse(clients)
        self._check()  # before the import: a refusal is at once
        with needs(self.kind):  # the optional package: missing, one line at once rather than at the first run
            self._import()

    def _check(self) -> None:
        """Refuse a destination this tracker must not write into (what is there already)."""

    def _import(self) -> None:
        raise NotImplementedError

    @property
    def destination(self) -> tuple:
        """Where this tracker writes: two trackers of one destination are one (:func:`check_trackers`)."""
        return self.kind, str(self.directory.resolve())

    def open(self, name: str, cfg: RunConfig):
        """A log for the run ``name`` (with ``log``, ``finish``, ``abort``), or None when it is logged already."""
        raise NotImplementedError

    def logged_already(self, name: str, cfg: RunConfig, logged_clients: str | None) -> None:
        """The run ``name`` is logged here with clients at the rounds ``logged_clients`` picked: nothing is added
        (a log is written once); if this tracker asks for clients at rounds that log lacks, say so in one line."""
        had = ClientRounds.parse(logged_clients or "last").picked(cfg.rounds)
        missing = sorted(self.clients.picked(cfg.rounds) - had)
        if missing:
            shown = ", ".join(map(str, missing[:5])) + (" …" if len(missing) > 5 else "")
            warnings.warn(f"tracker {self.kind}={self.directory} has run {name} logged already, with clients at "
                          f"the rounds '{logged_clients or 'last'}' picks: clients='{self.clients.spec}' adds nothing "
                          f"to it (rounds {shown} missing). A log is written once: log into another folder, or "
                          "remove the run's log there and ask again", stacklevel=4)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.directory)!r}, clients={self.clients.spec!r})"


@contextlib.contextmanager
def needs(kind: str):
    """Turn a failed import of a tracker's optional package into one line saying how to install it."""
    try:
        yield
    except ImportError:
        raise FedalaError(f"the {kind} tracker needs the {kind} package, an optional dependency: "
                          f"pip install 'fedala_lab[{kind}]'") from None


# ---------------------------------------------------------------------------------------------- TensorBoard


class TensorBoard(Tracker):
    """TensorBoard event files, one folder per run: ``DIR/<run name>/`` (``tensorboard --logdir DIR``).

    Values are stored as float32 (TensorBoard's scalars): byte counts above 2**24 are rounded there."""

    kind = "tensorboard"
    DONE = ".fedala_lab-logged.json"  # written last: the run's log is whole (TensorBoard ignores the file)

    def _import(self) -> None:
        import tensorboard  # noqa: F401 - torch's SummaryWriter writes with it

    def open(self, name: str, cfg: RunConfig):
        folder = self.directory / name
        if (folder / self.DONE).is_file():
            with contextlib.suppress(OSError, ValueError, AttributeError):
                self.logged_already(name, cfg, json.loads((folder / self.DONE).read_text()).get("clients"))
            return None
        if folder.is_dir():  # a log cut short: replaced whole
            shutil.rmtree(folder)
        return _TensorBoardLog(folder, cfg, self.clients.spec)


class _TensorBoardLog:
    def __init__(self, folder: Path, cfg: RunConfig, clients: str):
        from torch.utils.tensorboard import SummaryWriter
        from torch.utils.tensorboard.summary import hparams

        self.folder, self.clients = folder, clients
        self.key = cfg.key()
        self.writer = SummaryWriter(str(folder))
        hp = {k: (v if isinstance(v, (int, float, str)) and not isinstance(v, bool) else json.dumps(v))
              for k, v in hyper_parameters(cfg).items()}
        exp, start, _ = hparams(hp, dict.fromkeys(SUMMARY_METRICS, 0.0))
        for summary in (exp, start):  # the run's row in the HParams tab; the metrics are its scalars
            self.writer.file_writer.add_summary(summary)

    def _here(self) -> None:
        """The run's folder still there: checked before each write, which TensorBoard's writer makes in a thread
        of its own (a failure there is a traceback of that thread, not an error the run's log can report)."""
        if not self.folder.is_dir():
            raise FileNotFoundError(f"the run's folder {self.folder} was removed or replaced while it was logged")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._here()
        for tag, value in metrics.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()  # a round at a time: TensorBoard shows a run as it goes (its default waits 2 minutes)

    def finish(self, run: Run) -> None:
        self._here()
        self.writer.file_writer.add_summary(_session_end(run.status == "complete"))
        self.writer.close()
        done = {"key": self.key, "status": run.status, "rounds": len(run.rounds), "clients": self.clients}
        (self.folder / TensorBoard.DONE).write_text(json.dumps(done))

    def abort(self) -> None:
        self.writer.close()


def _session_end(success: bool):
    """TensorBoard's HParams "session end" summary with the run's status (torch writes success only)."""
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    status = api_pb2.Status.Value("STATUS_SUCCESS" if success else "STATUS_FAILURE")
    content = plugin_data_pb2.HParamsPluginData(session_end_info=plugin_data_pb2.SessionEndInfo(status=status),
                                                version=metadata.PLUGIN_DATA_VERSION)
    meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name=metadata.PLUGIN_NAME,
                                                                   content=content.SerializeToString()))
    return Summary(value=[Summary.Value(tag=metadata.SESSION_END_INFO_TAG, metadata=meta)])


# --------------------------------------------------------------------------------------------------- MLflow


class MLflow(Tracker):
    """An MLflow tracking store in SQLite, ``DIR/mlflow.db``, no server (``mlflow ui --backend-store-uri
    sqlite:///DIR/mlflow.db``); runs in the experiment ``experiment`` ("fedala_lab"), named as in the
    run store, tagged ``fedala_lab.key`` and ``fedala_lab.status``. A diverged run ends "FAILED"."""

    kind = "mlflow"
    BATCH = 1000  # MLflow's limit of metrics per log_batch call
    PARAMS = 100  # and of params

    def __init__(self, directory: str | Path, *, clients: str | ClientRounds = "last",
                 experiment: str = "fedala_lab"):
        # before MLflow is imported: nothing leaves the machine unasked (a user's own setting is kept)
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        if not isinstance(experiment, str) or not experiment.strip():
            raise ConfigError("experiment", experiment, "the name of an MLflow experiment (default fedala_lab)")
        self.experiment = experiment
        super().__init__(directory, clients=clients)
        self._client = self._experiment_id = None

    def _import(self) -> None:
        import mlflow  # noqa: F401

    @property
    def destination(self) -> tuple:
        return (*super().destination, self.experiment)

    def _check(self) -> None:
        """An existing ``DIR/mlflow.db`` must be an MLflow store (or empty): never add MLflow's tables to another
        program's database, nor start on a file that is no database."""
        db = self.directory / "mlflow.db"
        where = f"mlflow={self.directory}"
        if db.is_dir():
            raise ConfigError("tracker", where, f"a folder whose mlflow.db is an MLflow store; {db} is a folder")
        if not db.exists() or db.stat().st_size == 0:
            return  # created at the first run logged
        try:
            with open(db, "rb") as fh:
                head = fh.read(16)
            if head != b"SQLite format 3\x00":
                raise ConfigError("tracker", where, f"a folder whose mlflow.db is an MLflow store; {db} is not a "
                                  "SQLite database")
            con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
            try:
                tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            finally:
                con.close()
        except (OSError, sqlite3.Error) as err:
            raise ConfigError("tracker", where, f"a folder whose mlflow.db is an MLflow store; {db} cannot be read "
                              f"as one ({' '.join(str(err).split())})") from None
        if tables and not MLFLOW_TABLES <= tables:
            shown = ", ".join(sorted(tables)[:5]) + (", …" if len(tables) > 5 else "")
            raise ConfigError("tracker", where, f"a folder whose mlflow.db is an MLflow store; {db} is another "
                              f"program's SQLite database (tables {shown}), left untouched: choose another folder")

    @property
    def uri(self) -> str:
        return f"sqlite:///{self.directory.resolve() / 'mlflow.db'}"

    def __getstate__(self):  # a copy for another process opens its own client
        return {**self.__dict__, "_client": None, "_experiment_id": None}

    def client(self):
        """The MLflow client of this store and the experiment's id, made once per process; the database and
        the experiment are created under a file lock (a sweep's workers may start together)."""
        if self._client is None:
            import logging

            from mlflow.tracking import MlflowClient

            self.directory.mkdir(parents=True, exist_ok=True)
            quiet = [logging.getLogger(n) for n in ("alembic", "mlflow.store.db.utils")]
            levels = [q.level for q in quiet]
            with _file_lock(self.directory / ".mlflow-init.lock"):
                try:
                    for q in quiet:  # creating the database logs every migration at INFO
                        q.setLevel(logging.WARNING)
                    client = MlflowClient(tracking_uri=self.uri)
                    exp = client.get_experiment_by_name(self.experiment)
                    # artifacts (none are logged) under DIR, not ./mlruns; the UI's "training runs" view
                    eid = exp.experiment_id if exp is not None else client.create_experiment(
                        self.experiment, artifact_location=(self.directory.resolve() / "artifacts").as_uri(),
                        tags={"mlflow.experimentKind": "custom_model_development"})
                finally:
                    for q, lv in zip(quiet, levels):
                        q.setLevel(lv)
            self._client, self._experiment_id = client, eid
        return self._client, self._experiment_id

    def runs(self, key: str) -> list:
        """The MLflow runs (not deleted) of the config key ``key``: by its tag, which is hex (a run's name may
        hold any character of a data folder's name)."""
        client, eid = self.client()
        return client.search_runs([eid], filter_string=f"tags.`fedala_lab.key` = '{key}'")

    def open(self, name: str, cfg: RunConfig):
        client, eid = self.client()
        found = self.runs(cfg.key())
        done = [r for r in found if r.data.tags.get("fedala_lab.logged") == "true"]
        if done:
            self.logged_already(name, cfg, done[0].data.tags.get("fedala_lab.clients"))
            return None
        for r in found:  # a log cut short: replaced
            client.delete_run(r.info.run_id)
        run = client.create_run(eid, run_name=name, tags={"fedala_lab.key": cfg.key(), "fedala_lab.algo": cfg.algo,
                                                          "fedala_lab.clients": self.clients.spec})
        from mlflow.entities import Param

        params = [Param(k, v if isinstance(v, str) else json.dumps(v)) for k, v in hyper_parameters(cfg).items()]
        for i in range(0, len(params), self.PARAMS):
            client.log_batch(run.info.run_id, params=params[i:i + self.PARAMS])
        return _MLflowLog(client, run.info.run_id)


class _MLflowLog:
    def __init__(self, client, run_id: str):
        self.client, self.run_id = client, run_id

    def log(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, v, now, step) for k, v in metrics.items()]
        for i in range(0, len(items), MLflow.BATCH):
            self.client.log_batch(self.run_id, metrics=items[i:i + MLflow.BATCH])

    def finish(self, run: Run) -> None:
        self.client.set_tag(self.run_id, "fedala_lab.status", run.status)
        self.client.set_tag(self.run_id, "fedala_lab.logged", "true")
        self.client.set_terminated(self.run_id, "FINISHED" if run.status == "complete" else "FAILED")

    def abort(self) -> None:
        self.client.set_terminated(self.run_id, "KILLED")


@contextlib.contextmanager
def _file_lock(path: Path):
    with open(path, "w") as fh:
        # Windows: no lock (two processes creating one database at once may fail)
        with contextlib.suppress(ImportError):
            import fcntl

            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


# ---------------------------------------------------------------------------------------------- parsing


def parse_tracker(text: str, *, clients: str | ClientRounds = "last") -> Tracker:
    """A tracker from ``KIND=DIR`` (the command line's ``--tracker``): ``tensorboard=DIR`` or ``mlflow=DIR``."""
    kind, sep, directory = str(text).partition("=")
    allowed = "tensorboard=DIR or mlflow=DIR (MLflow: a SQLite store DIR/mlflow.db)"
    if not sep or kind.strip().lower() not in KINDS or not directory.strip():
        raise ConfigError("tracker", text, allowed)
    cls = TensorBoard if kind.strip().lower() == "tensorboard" else MLflow
    return cls(directory.strip(), clients=clients)


def check_trackers(trackers) -> list[Tracker]:
    """``trackers`` (a list of trackers, or one) as a list, each a :class:`Tracker`, each destination once: a
    folder named twice (``D`` and ``D/``) is one tracker, not two writing one log (docs/trackers.md)."""
    if isinstance(trackers, Tracker):
        trackers = [trackers]
    if trackers is None:
        return []
    if isinstance(trackers, (str, bytes)) or not isinstance(trackers, Iterable):
        raise ConfigError("trackers", trackers, "a list of trackers, e.g. [TensorBoard('tb'), MLflow('ml')] (a "
                          "KIND=DIR text: parse_tracker('tensorboard=tb'))")
    out: dict[tuple, Tracker] = {}
    for t in trackers:
        if not isinstance(t, Tracker):
            raise ConfigError("trackers", t, "trackers made as TensorBoard(DIR) or MLflow(DIR) (an instance, not "
                              "the class), or parse_tracker('KIND=DIR')")
        have = out.setdefault(t.destination, t)
        if have.clients != t.clients:
            raise ConfigError("trackers", t, f"one tracker per destination: {have!r} logs there already, with "
                              "other client rounds")
    return list(out.values())


# ------------------------------------------------------------------------------------------ what is logged


def hyper_parameters(cfg: RunConfig) -> dict:
    """The config as flat hyper-parameters: the run's fields and the algorithm's, then ``data.<field>``."""
    d = cfg.to_dict()
    data = d.pop("data")
    return {**d, **{f"data.{k}": v for k, v in data.items()}}


def round_metrics(rounds: pd.DataFrame, clients: pd.DataFrame, ala: pd.DataFrame | None, *, num_clients: int,
                  last_round: int, when: ClientRounds) -> list[tuple[int, dict[str, float]]]:
    """(round, {metric: value}) for each row of ``rounds``: its columns, ALA's passes that round, and at the
    rounds ``when`` picks each client's columns as ``client_<id>/<column>``. NaN (not evaluated, not
    recorded) is left out."""
    out: dict[int, dict[str, float]] = {}
    for row in rounds.to_dict("records"):
        t = int(row.pop("round"))
        out[t] = _numbers(row)
    picked = {t for t in out if when(t, last_round)}
    width = len(str(max(num_clients - 1, 0)))

    def name(c, col):
        return f"client_{int(c):0{width}d}/{col}"

    for row in clients[clients["round"].isin(picked)].to_dict("records"):
        t, c = int(row.pop("round")), row.pop("client")
        out[t].update({name(c, k): v for k, v in _numbers(row).items()})
    if ala is not None and len(ala):
        ala = ala[ala["round"].isin(out)]
        for t, n in ala.groupby(["round", "client"]).size().groupby(level="round").mean().items():
            out[int(t)]["ala_passes"] = float(n)  # per tracked client that round
        mine = ala[ala["round"].isin(picked)].groupby(["round", "client"])
        for (t, c), n in mine.size().items():
            out[int(t)][name(c, "ala_passes")] = float(n)
        for (t, c), loss in mine["loss"].last().items():
            if math.isfinite(loss):
                out[int(t)][name(c, "ala_loss")] = float(loss)
    return sorted(out.items())


def _numbers(row: dict) -> dict[str, float]:
    out = {}
    for k, v in row.items():
        with contextlib.suppress(TypeError, ValueError):
            v = float(v)
            if math.isfinite(v):
                out[k] = v
    return out


# ------------------------------------------------------------------------------------------- one run's log


class RunLog:
    """One run's logs in ``trackers``: the rounds as they are computed (:meth:`callback`), then whatever is
    not logged yet from the run's records when it is returned (:meth:`finish`: all of a run served from the
    store, the first rounds of one resumed or branched). As a context manager: a diverged run is logged
    with its status, a log cut short by any other error is closed as such (replaced next time).

        with RunLog(trackers, store) as log:
            run = log.finish(get_run(callback=log.callback(callback)))
    """

    def __init__(self, trackers: Iterable[Tracker], store=None):
        self.trackers = check_trackers(trackers)
        self.name_for = open_store(store).name_for  # the run store's folder name: one name everywhere
        self.logs: list | None = None  # opened at the first round (or at finish): the trackers that lack the run
        self.logged = 0  # rounds logged so far
        self.name = ""

    def _failed(self, tracker: Tracker, log, err: Exception) -> None:
        """A tracker is an observer: its failure is one line, it logs nothing more of this run, the run goes
        on (and is stored); asked for again, the run is logged again (a log cut short is replaced)."""
        self.logs = [(t, lg) for t, lg in self.logs or [] if t is not tracker]
        if log is not None:
            with contextlib.suppress(Exception):
                log.abort()
        text = " ".join(str(err).split()).split(" [SQL: ")[0]  # an SQL error without its statement
        warnings.warn(f"tracker {tracker.kind}={tracker.directory} failed and logs nothing more of run "
                      f"{self.name}: {type(err).__name__}: {text[:300]}{'…' if len(text) > 300 else ''}",
                      stacklevel=3)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind, err, tb) -> bool:
        if isinstance(err, TrainingDiverged) and err.run is not None:
            self.finish(err.run)
        elif err is not None:
            self.abort()
        return False

    def _open(self, cfg: RunConfig) -> list:
        if self.logs is None:
            self.name = self.name_for(cfg)
            self.logs = []
            for t in self.trackers:
                try:
                    log = t.open(self.name, cfg)
                except Exception as err:  # noqa: BLE001 - whatever a tracker raises, the run goes on
                    self._failed(t, None, err)
                    continue
                if log is not None:
                    self.logs.append((t, log))
        return self.logs

    def _log(self, cfg: RunConfig, rounds, clients, ala) -> None:
        for tracker, log in list(self._open(cfg)):
            try:
                for step, metrics in round_metrics(rounds, clients, ala, num_clients=cfg.data.num_clients,
                                                   last_round=cfg.rounds, when=tracker.clients):
                    log.log(step, metrics)
            except Exception as err:  # noqa: BLE001 - whatever a tracker raises, the run goes on
                self._failed(tracker, log, err)
        if len(rounds):
            self.logged = int(rounds["round"].iloc[-1])

    def callback(self, inner=None):
        """The engine's per-round callback ``(sim, row)`` that logs the rounds recorded since the last call,
        then calls ``inner`` (and returns what it returns: False stops the run)."""

        def logging_callback(sim, row):
            if self._open(sim.cfg):
                rec, after = sim.recorder, self.logged  # the engine's records: columns of plain lists, by round

                def since(cols):
                    i = bisect.bisect_right(cols["round"], after)
                    return pd.DataFrame({k: v[i:] for k, v in cols.items()})

                ala = rec.tables.get("ala")
                self._log(sim.cfg, since(rec.rounds), since(rec.clients), since(ala) if ala else None)
            return None if inner is None else inner(sim, row)

        return logging_callback

    def finish(self, run: Run) -> Run:
        """Log the rounds of ``run`` not logged yet, close the logs with its status; ``run`` itself."""
        after = self.logged

        def since(df):
            return df[df["round"] > after]

        ala = run.tables.get("ala")
        self._log(run.config, since(run.rounds), since(run.clients), since(ala) if ala is not None else None)
        for tracker, log in list(self.logs):
            try:
                log.finish(run)
            except Exception as err:  # noqa: BLE001 - whatever a tracker raises, the run is returned
                self._failed(tracker, log, err)
        self.logs = []
        return run

    def abort(self) -> None:
        for _, log in self.logs or []:
            with contextlib.suppress(Exception):  # closing what can be closed; the run's own error goes on
                log.abort()
        self.logs = []


def log_run(run: Run, trackers: Iterable[Tracker], store=None) -> Run:
    """Log a finished (or diverged) run to ``trackers`` from its records, unless they have it already;
    ``store`` names it (its folder name there). Returns ``run``."""
    return RunLog(trackers, store).finish(run)
