"""What every tab's handler shares: library errors as visible messages, the shared settings as parameters,
progress, and Stop; and getting runs (from the app's store, else simulated) with both.

A long handler is written ``fn(app, *own, settings, job)`` and published by :func:`job` with one parameter
per shared setting plus Gradio's progress and request (the API's parameters). ``job.stop`` is the
session's stop flag for it; :meth:`Jobs.fetch` gets its runs, reports every round on the progress bar and
stops after the current round once Stop was pressed: the engine keeps a checkpoint (Run again resumes)
and hands back what the stopped run recorded (docs/design.md#run-store), which the tab shows.

Stop works per browser session (or gradio_client), per job: the Run button first arms a stop flag (outside
the queue, at once), then its job waits in the queue and claims that flag when it starts. Stop sets every
flag of the session, so a job still waiting will not start and a running one stops after its round; a
job is never cancelled, so its own result (what was done so far) always reaches the page. Stop then waits
for the job to end and answers with the job's own final status line (what was kept): the status line has
two writers, the job and Stop, and both write the same words whichever arrives last.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import math
import threading
import time
from dataclasses import dataclass, field

import gradio as gr

from ..config import algo_label
from ..errors import FedalaError, FilesMissing, RunCancelled, SplitFailed
from ..experiments.execute import compute
from ..experiments.pool import RunPool
from ..experiments.runs import RunCache, get_or_run
from ..figures.style import projector
from ..record.run import Run, computed_on
from ..record.store import RunStore
from .env import default_store_root
from .settings import DATA_FIELDS, TRAIN_FIELDS
from .split import served
from .widgets import html_text

log = logging.getLogger(__name__)
STOP_LABEL = "Stop"
# Gradio recognises a handler's progress parameter by this default and hands each call its own tracker.
PROGRESS = gr.Progress()


def friendly(fn):
    """Turn library errors into a visible ``gr.Error`` with the library's message (never a traceback); draw in
    the session's projector mode (:meth:`Jobs.projecting`) when ``fn`` is a handler of the app."""

    @functools.wraps(fn)  # keeps the signature: Gradio still sees gr.Progress and gr.Request parameters
    def wrapper(*args, **kwargs):
        app = args[0] if args and isinstance(args[0], Jobs) else None
        request = next((a for a in (*args, *kwargs.values()) if isinstance(a, gr.Request)), None)
        try:
            with projector(app is not None and app.projecting(request)):
                return fn(*args, **kwargs)
        except gr.Error:
            raise
        except FilesMissing as err:  # the app fetches nothing by itself: the Data tab has a Download button
            raise gr.Error(html_text(
                f"{err.dataset} is not on this machine (looked in {err.folder}). Press “Download” on the Data tab "
                "(needs the network; MNIST ≈ 12 MB, CIFAR ≈ 170 MB), or choose the embedded MNIST subset."),
                print_exception=False) from err
        except SplitFailed as err:  # the app has no least_samples / max_tries: say it with its own controls
            raise gr.Error(html_text(split_advice(err)), print_exception=False) from err
        except FedalaError as err:
            raise gr.Error(html_text(str(err)), print_exception=False) from err
        except Exception as err:  # a bug: keep the server's log complete, the page readable and usable
            log.exception("handler %s failed", fn.__name__)
            raise gr.Error(
                html_text(
                    f"internal error ({type(err).__name__}: {err}); the app is still usable, "
                    "details are in the server log"
                ),
                print_exception=False,
            ) from err

    return wrapper


def split_advice(err: SplitFailed) -> str:
    """A failed Dirichlet split in the app's terms (clients N, β), with the library's numbers."""
    return (f"Dirichlet β={err.beta:g} cannot split {err.samples:,} images among {err.clients} clients so that "
            f"each gets at least {err.least} (what a client needs for a training and a test batch, as in the "
            f"paper's code): in {err.tries:,} draws the smallest client got at best {err.best}. Choose fewer "
            "clients or a larger β, or a dataset with more images (MNIST instead of the 3,000-image subset).")


@dataclass
class Job:
    """One click's job: its progress tracker (``progress((done, total), desc=…)``) and stop flag."""

    progress: object
    stop: threading.Event = field(default_factory=threading.Event)


def job(fn):
    """Publish ``fn(app, *own, settings, job)`` as ``fn(app, *own, <DATA_FIELDS + TRAIN_FIELDS>,
    progress=…, request=…)``: Gradio reads this public signature (``__signature__``), passes the widgets
    by position, names the API's parameters after it, and finds ``progress`` by its default and
    ``request`` by its annotation. ``fn`` gets the settings as a dict and a :class:`Job` whose stop flag
    is the session's for this tab (``fn.__name__``) while it runs."""
    own = list(inspect.signature(fn).parameters.values())
    at = [q.name for q in own].index("settings")
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    public = inspect.Signature([
        *own[:at],
        *(inspect.Parameter(k, kind) for k in DATA_FIELDS + TRAIN_FIELDS),
        *[q for q in own[at + 1:] if q.name != "job"],
        inspect.Parameter("progress", kind, default=PROGRESS),
        inspect.Parameter("request", kind, default=None, annotation=gr.Request),
    ])

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        values = public.bind(*args, **kwargs).arguments
        settings = {k: values.pop(k) for k in DATA_FIELDS + TRAIN_FIELDS}
        progress, request = values.pop("progress", PROGRESS), values.pop("request", None)
        app = values["app"]
        with app.stops.claim(getattr(request, "session_hash", None), fn.__name__) as ticket:
            out = fn(**values, settings=settings, job=Job(progress, ticket.event))
            ticket.final = out[-1] if isinstance(out, tuple) and isinstance(out[-1], str) else None
            return out

    wrapper.__signature__ = public
    wrapper.__annotations__ = {"request": gr.Request}  # Gradio reads the request's type from here
    return friendly(wrapper)


# --------------------------------------------------------------------------------------------------
# Stop


@dataclass
class _Ticket:
    event: threading.Event  # set: stop after the current round (or do not start)
    running: bool = False
    done: threading.Event = field(default_factory=threading.Event)  # the job has returned (or failed)
    final: str | None = None  # the status line the job ended with
    thread: int | None = None  # the job's thread (threading.get_ident()), set when it claims the ticket


# How long Stop waits for the job to end before it answers without a status line of its own: longer than a
# round of any method on the app's data (the job's own line then arrives alone, and is the last word).
STOP_WAIT_S = 60.0
REPEAT_S = 5.0  # see Jobs.once


class Stops:
    """Stop flags by (session, tab): armed when Run is clicked, claimed by the job when it starts."""

    def __init__(self):
        self._tickets: dict[tuple[str, str], _Ticket] = {}
        self._lock = threading.Lock()

    def arm(self, session: str | None, name: str) -> None:
        """A fresh flag for the job the session just queued on tab ``name`` (a tab runs one job at a time)."""
        if session:
            with self._lock:
                self._tickets[(session, name)] = _Ticket(threading.Event())

    @contextlib.contextmanager
    def claim(self, session: str | None, name: str):
        """The ticket armed for this job (its flag set already if Stop came while it waited), else a fresh one;
        marked done when the job returns."""
        key = (session, name)
        with self._lock:
            ticket = self._tickets.get(key) if session else None
            if ticket is None or ticket.running:
                ticket = _Ticket(threading.Event())
                if session:
                    self._tickets[key] = ticket
            ticket.running, ticket.thread = True, threading.get_ident()
        try:
            yield ticket
        finally:
            with self._lock:
                if self._tickets.get(key) is ticket:
                    del self._tickets[key]
            ticket.done.set()

    def stop(self, session: str | None, name: str | None = None, wait: float = STOP_WAIT_S):
        """Set the session's flags; wait (at most ``wait`` s) for its jobs to end, and return the final status
        line of tab ``name``'s job (or of the last job, without a name). Returns None when a job has not
        ended in time or ended without a line (an error, shown on its own): the job's line is then the only
        one written. "Nothing is running." when the session has no job."""
        with self._lock:
            tickets = {n: t for (s, n), t in self._tickets.items() if session and s == session}
            for t in tickets.values():
                t.event.set()
            running = {n: t for n, t in tickets.items() if t.running}
        if not tickets:
            return "Nothing is running."
        if not running:  # waiting in the queue: it will start, see its flag, and end at once with its own line
            return "The job waiting in the queue will not start."
        deadline = time.monotonic() + wait
        me = threading.get_ident()
        for t in running.values():
            if t.thread != me:  # Stop called by the job itself (its progress callback) waits on the others only
                t.done.wait(max(0.0, deadline - time.monotonic()))
        mine = running.get(name) if name else list(running.values())[-1]
        if mine is None:  # this tab had no job: another tab's stopped
            return "Stopped this session's other job(s)."
        return mine.final if mine.done.is_set() else None


# --------------------------------------------------------------------------------------------------
# getting runs


@dataclass
class Fetched:
    """What :meth:`Jobs.fetch` got: the finished runs in the order asked, whether each came from the
    store, and, if Stop interrupted one, what that one recorded (``stopped``) and the status line; runs computed
    side by side may stop together: the others that Stop interrupted are ``stopped_too``."""

    runs: list[Run]
    cached: list[bool]
    stopped: Run | None = None
    status: str = ""
    stopped_too: list[Run] = field(default_factory=list)

    @property
    def shown(self) -> list[Run]:
        """The runs to draw: the finished ones and the stopped ones' rounds so far."""
        return self.runs + ([self.stopped] if self.stopped is not None else []) + self.stopped_too


class Jobs:
    """The handlers' common ground, bound to one run store: Stop and getting runs."""

    def __init__(self, store=None, processes: int = 1, projector: bool = False):
        self.projector = projector  # the figures' projector mode of a session that has not chosen (--projector)
        self._projecting: dict[str, bool] = {}  # session → its choice (the page's toggle)
        self.store = (
            store if isinstance(store, RunStore) else RunStore(store if store is not None else default_store_root())
        )
        # processes > 1: a click's runs are computed side by side in that many processes (experiments/pool.py)
        self.pool = RunPool(processes, self.store.root) if processes > 1 else None
        self.stops = Stops()
        self._refused: dict[tuple, tuple] = {}  # (session, handler) → (values, when): see once()
        self._refused_lock = threading.Lock()

    @contextlib.contextmanager
    def once(self, request, name: str, values: tuple):
        """Refuse bad ``values`` once per session: the page sends a field on Enter and again as it loses focus,
        and the same refusal within :data:`REPEAT_S` seconds is raised again without a second message."""
        try:
            yield
        except (FedalaError, gr.Error) as err:
            key, now = (getattr(request, "session_hash", None), name), time.monotonic()
            with self._refused_lock:
                last = self._refused.get(key)
                if len(self._refused) > 10_000:  # sessions come and go: never a growing table in a long-lived app
                    self._refused.clear()
                self._refused[key] = (values, now)
            if key[0] and last is not None and last[0] == values and now - last[1] < REPEAT_S:
                message = err.message if isinstance(err, gr.Error) else html_text(str(err))
                raise gr.Error(message, visible=False, print_exception=False) from err
            raise

    def projecting(self, request=None) -> bool:
        """Whether this session's figures are drawn in projector mode: its toggle's last value, else the app's."""
        return self._projecting.get(getattr(request, "session_hash", None), self.projector)

    def set_projecting(self, on: bool, request: gr.Request = None) -> None:
        """The page's projector toggle: this session's figures from now on (Run again redraws them)."""
        session = getattr(request, "session_hash", None)
        if session:
            if len(self._projecting) > 10_000:  # sessions come and go: never a growing table
                self._projecting.clear()
            self._projecting[session] = bool(on)

    def arm(self, name: str):
        """The Run button's first step for tab ``name``: arm its stop flag (outside the queue, at once)."""

        def arm(request: gr.Request = None) -> None:
            self.stops.arm(getattr(request, "session_hash", None), name)

        return arm

    def stop(self, request: gr.Request = None, name: str | None = None) -> str:
        """Ask this session's jobs to stop (a running simulation after its current round, a waiting job before
        it starts) and answer, once they have, with the status line the job ended with (what was kept): tab
        ``name``'s job's, else the last job's."""
        line = self.stops.stop(getattr(request, "session_hash", None), name)
        return gr.skip() if line is None else line

    def stopper(self, name: str):
        """Tab ``name``'s Stop: as :meth:`stop`, answering with that tab's job's final line; and the Stop
        button back to its label (the page shows "Stopping…" on it meanwhile)."""

        def stop(request: gr.Request = None):
            return self.stop(request, name), gr.Button(STOP_LABEL)

        return stop

    def fetch(self, job: Job, cfgs, get=None, labels=None) -> Fetched:
        """The runs of ``cfgs`` as ``get(store, callback)`` returns them, where ``get`` is a library call
        that takes a store and the engine's per-round callback (e.g. ``fig4_runs``): from the app's store,
        else simulated with every round on the progress bar (labelled ``labels[i]``, default the algorithm)
        and with Stop.

        Without ``get``: the stored run of each config (``get_or_run`` of each), so the ones the store lacks
        may be computed first in the app's processes (:attr:`pool`), several at once; then found stored.
        """
        cfgs = list(cfgs)
        side_by_side = get is None
        if side_by_side:

            def get(store, callback):
                return [get_or_run(c, store, progress=False, callback=callback) for c in cfgs]

        # before any work: a split that cannot serve N is refused at once, not after 100,000 draws (data that
        # comes partitioned, a PFLlib directory, has its clients given: no split to check)
        for data in dict.fromkeys(c.data for c in cfgs if not c.data.comes_partitioned):
            served(data).check(data.num_clients)
        names = list(labels) if labels else [algo_label(c.algo) for c in cfgs]
        if len(cfgs) > 1:
            names = [f"{n} ({i + 1}/{len(cfgs)})" for i, n in enumerate(names)]
        total, places = sum(c.rounds for c in cfgs), {}
        for cfg, name in zip(cfgs, names):
            places[cfg.key()] = (name, sum(p[2] for p in places.values()), cfg.rounds)
        if job.stop.is_set():
            return Fetched([], [], status="Stopped before it started: nothing ran, the page keeps what it showed.")
        computed: set[str] = set()

        def callback(sim, row):
            if job.stop.is_set():
                return False
            key = sim.cfg.key()
            computed.add(key)
            name, offset, _ = places.get(key, (algo_label(sim.cfg.algo), 0, sim.cfg.rounds))
            t, acc = int(row["round"]), row["acc"]
            desc = f"{name}: round {t}/{sim.cfg.rounds}"
            if not math.isnan(acc):  # NaN: a round without evaluation
                desc += f" · accuracy {acc:.1f} %"
            job.progress((offset + t, total), desc=desc, unit="rounds")
            return True

        job.progress((0, total), desc="looking in the run store", unit="rounds")
        cache = RunCache(self.store)  # counts the runs handed out: the finished ones, should Stop come
        if side_by_side and self.pool is not None:
            stopped = self._side_by_side(job, cfgs, places, total, computed)
            if stopped:  # the runs that finished, in the order asked, and those stopped
                runs = [r for r in (self.store.find(c) for c in cfgs) if r is not None]
                status = stopped_status(stopped[0], runs, places, len(cfgs))
                for r in stopped[1:]:
                    status += (f" {places.get(r.config.key(), ('run',))[0]} stopped too, after round "
                               f"{r.summary()['rounds']} (its checkpoint kept).")
                return Fetched(runs, [r.config.key() not in computed for r in runs], stopped[0], status, stopped[1:])
        try:
            runs = list(get(cache, callback))
            stopped, status = None, ""
        except RunCancelled as err:
            runs, stopped = list(cache.used), err.run
            status = stopped_status(stopped, runs, places, len(cfgs))
        return Fetched(runs, [r.config.key() not in computed for r in runs], stopped, status)

    def _side_by_side(self, job: Job, cfgs, places: dict, total: int, computed: set) -> list[Run]:
        """Compute the runs of ``cfgs`` the store lacks (experiments/execute.py: in :attr:`pool`'s processes, one
        in this process), every round on the progress bar; returns those that Stop interrupted (what they
        recorded), in ``cfgs``' order. A run that failed or diverged is left to ``get``, which reads it again or
        computes it here and reports it as usual."""
        latest: dict[str, tuple[int, float]] = {}  # key → (round, accuracy) last reported

        def on_round(key, t, acc):
            computed.add(key)
            latest[key] = (t, acc)
            parts = []
            for k, (r, a) in latest.items():
                name, _, n = places.get(k, ("run", 0, 0))
                parts.append(f"{name}: round {r}/{n}" + ("" if math.isnan(a) else f" · accuracy {a:.1f} %"))
            job.progress((sum(r for r, _ in latest.values()), total), desc=" | ".join(parts), unit="rounds")

        results = compute(cfgs, self.store, pool=self.pool, stop=job.stop, on_round=on_round)
        return [results[c.key()]["run"] for c in dict.fromkeys(cfgs) if results[c.key()]["status"] == "stopped"]


def stopped_status(stopped: Run, runs: list, places: dict, asked: int) -> str:
    """The status line of a job that Stop interrupted: where ``stopped`` stopped, and what was kept."""
    k, n = stopped.summary()["rounds"], stopped.config.rounds
    which = f"{places.get(stopped.config.key(), ('',))[0]}; " if asked > 1 else ""
    status = f"Stopped after round {k} of {n} ({which}checkpoint kept: Run again resumes)."
    if asked > 1:
        n = len(runs)
        status += (f" {n} of the {asked} runs had finished before it: {'it is' if n == 1 else 'they are'} kept in "
                   "the run store." if runs else " No run of this job had finished before it.")
    return status


def finished_status(got: Fetched, seconds: float, what: str = "run(s)") -> str:
    """The status line of a job: how many runs, how long, which were served from the store and where and when
    those were computed (never silent: a stale answer would show its date and platform), or why it stopped."""
    if got.status:
        return got.status
    line = f"{len(got.runs)} {what} in {seconds:.1f} s"
    served: dict[str, list[str]] = {}  # where and when -> the runs computed there
    for run, cached in zip(got.runs, got.cached):
        if cached:
            served.setdefault(computed_on(run), []).append(f"{algo_label(run.config.algo)} (key {run.config.key()})")
    if not served:
        return line + "."
    said = "; ".join(f"{', '.join(_counted(names))} {where}" for where, names in served.items())
    return f"{line} ({sum(got.cached)} served from the run store: {said})."


def _counted(names: list[str]) -> list[str]:
    """Each name once, with how many times it came when more than once ("FedAvg ×12")."""
    counts = {n: names.count(n) for n in dict.fromkeys(names)}
    return [n if k == 1 else f"{n} ×{k}" for n, k in counts.items()]


def run_label(run: Run) -> str:
    """A legend label: the algorithm, and for a stopped run the round it stopped at."""
    label = algo_label(run.config.algo)
    return f"{label} (stopped at round {run.summary()['rounds']})" if run.status == "partial" else label
