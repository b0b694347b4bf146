"""The lecture app's page and handlers: widgets → config → library → ``Display.figure_``.

Each tab's action is one method of :class:`LectureApp` and one named API endpoint (``partition``,
``train``, ``ala``, ``trajectory``, ``ablation``, ``fedlama``, ``runs``), so scripts and tests drive the app
with ``gradio_client`` exactly as the page does. Handlers compute nothing themselves: they build a
:class:`~fedala_lab.config.RunConfig` (whose validation is the app's input check), ask the run store for the
run (cached by config hash, so the same settings again are instant) and hand the recorded run to a Display.

Errors: a :class:`~fedala_lab.errors.FedalaError` (bad value, impossible partition, diverged run) becomes a
``gr.Error`` with the library's one-line message; anything else is logged with its traceback on the server
and shown as a short message. Either way the page stays usable.

Stop: every simulation reports each finished round through the engine's ``callback(sim, row)``, which
updates the progress bar and returns ``False`` once the session's Stop button was pressed; the engine then
writes a checkpoint and raises :class:`~fedala_lab.errors.RunCancelled`. Running the same settings again
resumes from that checkpoint.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import math
import threading
import time

from .env import default_store_root, offline_env

offline_env()  # before gradio is imported: it reads these at import time

import gradio as gr
import pandas as pd

from ..config import RunConfig, algo_label
from ..errors import ConfigError, FedalaError, RunCancelled
from ..experiments.plans import comparison_configs
from ..experiments.presets import preset
from ..experiments.runs import fig4_runs, get_or_run
from ..record.store import RunStore
from .widgets import Number, Slider, html_text

log = logging.getLogger(__name__)
# Gradio recognises a handler's progress parameter by this default and hands each call its own tracker.
_PROGRESS = gr.Progress()

# Algorithms offered on the Train & compare tab: (label, config name).
TRAIN_ALGOS = [
    (algo_label(a), a)
    for a in ("fedavg", "fedprox", "fedala", "fedavg+ala", "fedprox+ala", "fedavg-c", "fedprox-c")
]
DATASET_CHOICES = [
    ("digits (8×8, embedded)", "digits"),
    ("MNIST", "mnist"),
    ("Fashion-MNIST", "fashion_mnist"),
    ("CIFAR-10", "cifar10"),
    ("CIFAR-100", "cifar100"),
]
PARTITION_CHOICES = [("IID", "iid"), ("pathological", "pathological"), ("Dirichlet", "dirichlet")]
MODEL_CHOICES = [
    ("MLP 64→128→64→10 (fast)", "mlp"),
    ("small CNN (≈2× slower)", "smallcnn"),
    ("auto (CNN by image size)", "auto"),
    ("FedAvgCNN (paper, needs 28×28)", "fedavgcnn"),
]

# The settings every simulation tab shares, in this order (the order of the API's parameters).
DATA_FIELDS = ("dataset", "partition", "num_clients", "beta", "classes_per_client")
TRAIN_FIELDS = ("model", "rounds", "join_ratio", "lr", "batch_size", "mu", "eta", "s", "p", "seed")
# The "teach" preset is the default of every widget: digits, 20 clients, Dir(0.1), MLP, lr 0.1, 50 rounds.
_TEACH = preset("teach")
DEFAULTS = {k: getattr(_TEACH.data, k) for k in DATA_FIELDS} | {k: getattr(_TEACH, k) for k in TRAIN_FIELDS}
# Settings the config holds as floats: widgets may send 0 for 0.0, converted before validation so that
# messages read "beta=0.0" whatever the widget sent. Every other number is made whole (20.0 → 20).
_FLOAT_FIELDS = ("beta", "join_ratio", "lr", "mu", "eta", "s")


# --------------------------------------------------------------------------------------------------
# helpers: values → config, errors → gr.Error


def _whole(value):
    """Sliders and number boxes send floats; 20.0 means 20. Anything else is left for the config to refuse."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def make_config(algo: str = "fedala", preset_name: str = "teach", **settings) -> RunConfig:
    """A preset (default "teach") with the widgets' values; RunConfig/DataConfig validation is the input
    check, so every bad value is refused with the library's message naming the field."""
    changes = {}
    for k, v in settings.items():
        if v is None:
            continue
        if k not in _FLOAT_FIELDS:
            v = _whole(v)
        elif isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        changes[k] = v
    return preset(preset_name, algo=algo, **changes)


def _friendly(fn):
    """Turn library errors into a visible ``gr.Error`` with the library's message (never a traceback)."""

    @functools.wraps(fn)  # keeps the signature: Gradio still sees gr.Progress and gr.Request parameters
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
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


# Ablation sweeps offered (small: each value is one FedALA run of the current settings).
ABLATION_VALUES = {"p": "1,2,3", "s": "5,20,50,80,100"}
MAX_SWEEP = 8


def _parse_values(param: str, values) -> list:
    """ "1,2,3" (or a list) → [1, 2, 3]: integers for p, numbers for s; at most MAX_SWEEP distinct values."""
    items = values.split(",") if isinstance(values, str) else list(values or [])
    out = []
    try:
        for v in items:
            if isinstance(v, str) and not v.strip():
                continue
            x = float(v)
            out.append(_whole(x) if param == "p" else x)
    except (TypeError, ValueError):
        raise ConfigError(
            "values", values, f"comma-separated numbers, e.g. {ABLATION_VALUES[param]}"
        ) from None
    out = sorted(set(out))
    if not 1 <= len(out) <= MAX_SWEEP:
        raise ConfigError(
            "values", values, f"1 to {MAX_SWEEP} distinct values, e.g. {ABLATION_VALUES[param]}"
        )
    return out


def _with_settings(fn):
    """Write a handler as ``fn(self, *own, settings, progress=…, request=…)`` and publish it with one
    parameter per shared setting (DATA_FIELDS + TRAIN_FIELDS) in place of ``settings``, which it receives
    as a dict. Gradio reads the public signature (``__signature__``): it passes the widgets by position,
    names the API's parameters after it, and finds ``progress`` by its default and ``request`` by its
    annotation (resolved through ``__wrapped__`` in this module's globals)."""
    sig = inspect.signature(fn)
    own = list(sig.parameters.values())
    at = [q.name for q in own].index("settings")
    shared = [
        inspect.Parameter(k, inspect.Parameter.POSITIONAL_OR_KEYWORD) for k in DATA_FIELDS + TRAIN_FIELDS
    ]
    public = sig.replace(parameters=[*own[:at], *shared, *own[at + 1 :]])

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        values = public.bind(*args, **kwargs).arguments
        settings = {k: values.pop(k) for k in DATA_FIELDS + TRAIN_FIELDS}
        return fn(**values, settings=settings)

    wrapper.__signature__ = public
    return wrapper


def _status(runs, cached, seconds: float, what: str = "run(s)") -> str:
    """The status line of finished runs: how many, how long, how many came from the store."""
    n_cached = sum(cached)
    return (
        f"{len(runs)} {what} in {seconds:.1f} s"
        + (f" ({n_cached} from the run store)" if n_cached else "")
        + "."
    )


def _stopped(err: RunCancelled, label: str = "") -> str:
    return (
        f"Stopped: {label + ' ' if label else ''}{err} (its checkpoint is kept: run the same settings "
        "again to resume)."
    )


def _round_callback(stop: threading.Event, progress, total: int, place):
    """The engine's per-round ``callback(sim, row)``: False once Stop was pressed (the engine then keeps a
    checkpoint and raises RunCancelled), else the round and its accuracy on the progress bar.
    ``place(sim)`` gives the run's label and the rounds of ``total`` done before it."""

    def callback(sim, row):
        if stop.is_set():
            return False
        label, offset = place(sim)
        t, acc = int(row["round"]), row["acc"]
        desc = f"{label}: round {t}/{sim.cfg.rounds}"
        if not math.isnan(acc):  # NaN: a round without evaluation
            desc += f" · accuracy {100 * acc:.1f} %"
        progress((offset + t, total), desc=desc, unit="rounds")
        return True

    return callback


def _client(client, num_clients: int) -> int:
    client = _whole(client)
    if not (isinstance(client, int) and 0 <= client < num_clients):
        raise ConfigError("client", client, f"a client id from 0 to {num_clients - 1}")
    return client


def _pct(x) -> float | None:
    return None if x is None or math.isnan(x) else round(float(x), 2)


def _run_rows(runs, cached) -> pd.DataFrame:
    rows = []
    for run, hit in zip(runs, cached, strict=True):
        s = run.summary()
        rows.append(
            {
                "algorithm": algo_label(s["algo"]),
                "best acc %": _pct(s["best_acc"]),
                "best round": s["best_round"],
                "final acc %": _pct(s["final_acc"]),
                "rounds": s["rounds"],
                "seconds": round(s["seconds"], 2),
                "MB up": round(s["bytes_up"] / 2**20, 2),
                "MB down": round(s["bytes_down"] / 2**20, 2),
                "source": "run store" if hit else "computed",
                "run": run.path.name if run.path else "",
            }
        )
    return pd.DataFrame(rows)


class LectureApp:
    """The app's handlers, bound to one run store. Each public method is one tab's action."""

    def __init__(self, store=None):
        self.store = (
            store
            if isinstance(store, RunStore)
            else RunStore(store if store is not None else default_store_root())
        )
        self._stops: dict[str, threading.Event] = {}
        self._stops_lock = threading.Lock()

    # -- stop flags, one per browser session (or gradio_client) -------------------------------------

    @contextlib.contextmanager
    def _stop_flag(self, request):
        """A fresh stop flag for this session's job, which the session's Stop button sets while it runs."""
        ev = threading.Event()
        key = getattr(request, "session_hash", None)
        if key:
            with self._stops_lock:
                self._stops[key] = ev
        try:
            yield ev
        finally:
            if key:
                with self._stops_lock:
                    if self._stops.get(key) is ev:
                        del self._stops[key]

    def stop(self, request: gr.Request = None) -> str:
        """Ask this session's running simulation to stop after its current round (the page's Stop button
        also takes the session's waiting jobs off the queue)."""
        key = getattr(request, "session_hash", None)
        with self._stops_lock:
            ev = self._stops.get(key) if key else None
        if ev is None:
            return "Nothing is running."
        ev.set()
        return "Stopping after the current round… (a stopped run keeps its checkpoint: Run again resumes it)"

    def _get_runs(self, cfgs, progress, request, *, labels=None, needs=None, resume=True):
        """Each config's run from the store, simulating (with progress and Stop) the ones it lacks.

        Returns (runs, cached flags, stop message or ""). A stopped run keeps its checkpoint. ``needs`` and
        ``resume`` go to :func:`~fedala_lab.experiments.runs.get_or_run`: a stored run failing ``needs`` is recomputed.
        """
        total = sum(c.rounds for c in cfgs)
        runs, cached = [], []
        done = 0
        with self._stop_flag(request) as stop:
            for i, cfg in enumerate(cfgs):
                label = labels[i] if labels else algo_label(cfg.algo)
                if len(cfgs) > 1:
                    label += f" ({i + 1}/{len(cfgs)})"
                if stop.is_set():  # Stop pressed between two runs: do not start the next one
                    return runs, cached, f"Stopped before {label}."
                progress((done, total), desc=f"{label}: looking in the run store", unit="rounds")
                run = self.store.find(cfg)
                hit = run is not None and (needs is None or needs(run))
                if not hit:
                    # no data= : the simulation loads it through FederatedData.from_config's cache
                    callback = _round_callback(
                        stop, progress, total, lambda sim, _label=label, _offset=done: (_label, _offset)
                    )
                    try:
                        run = get_or_run(
                            cfg, self.store, progress=False, callback=callback, needs=needs, resume=resume
                        )
                    except RunCancelled as err:
                        return runs, cached, _stopped(err, label)
                runs.append(run)
                cached.append(hit)
                done += cfg.rounds
        return runs, cached, ""

    # -- Data ------------------------------------------------------------------------------------

    @_friendly
    def partition(self, dataset, partition, num_clients, beta, classes_per_client, kind="bubble"):
        """Partition the data and draw who holds which labels (paper Fig. 6–9) plus a per-client table."""
        from ..data.federated import FederatedData
        from ..figures.data import DataDistributionDisplay

        cfg = make_config(
            dataset=dataset,
            partition=partition,
            num_clients=num_clients,
            beta=beta,
            classes_per_client=classes_per_client,
        ).data
        data = FederatedData.from_config(cfg)
        part = {
            "iid": "IID",
            "pathological": f"pathological, {cfg.classes_per_client} labels per client",
            "dirichlet": f"Dir(β={cfg.beta:g})",
        }[cfg.partition]
        disp = DataDistributionDisplay.from_data(
            data, kind=kind or "bubble", title=f"{cfg.dataset}, {part}, {cfg.num_clients} clients"
        )
        return disp.figure_, data.summary(counts=disp.counts_)  # the counts just drawn, not recounted

    # -- Train & compare ----------------------------------------------------------------------------

    @_friendly
    @_with_settings
    def train(self, algos, settings, progress=_PROGRESS, request: gr.Request = None):
        """Run (or load) every selected algorithm on the same data; accuracy and loss curves, a summary."""
        from ..figures.curves import AccuracyCurveDisplay

        if isinstance(algos, str):
            algos = [a for a in algos.split(",") if a.strip()]
        if not algos:
            raise ConfigError("algorithms", algos, "at least one algorithm ticked")
        cfgs = [make_config(algo=a.strip(), **settings) for a in algos]  # all validated before any work
        tic = time.perf_counter()
        runs, cached, stopped = self._get_runs(cfgs, progress, request)
        seconds = time.perf_counter() - tic
        if not runs:
            return None, None, _run_rows([], []), stopped
        acc = AccuracyCurveDisplay.from_runs(runs, metric="acc")
        loss = AccuracyCurveDisplay.from_runs(runs, metric="test_loss")
        status = stopped or _status(runs, cached, seconds)
        return acc.figure_, loss.figure_, _run_rows(runs, cached), status

    # -- ALA inside ----------------------------------------------------------------------------------

    @_friendly
    @_with_settings
    def ala(self, client, round_, settings, progress=_PROGRESS, request: gr.Request = None):
        """Fig. 2 (the client's learned ALA weights after ``round_``) and Fig. 3 (its ALA loss) from the
        FedALA run of the current settings."""
        from ..figures.ala import ALALossDisplay, ALAWeightsDisplay

        cfg = make_config(algo="fedala", **settings)
        n = cfg.data.num_clients
        client = _client(client, n)
        round_ = _whole(round_)
        if not isinstance(round_, int) or not 2 <= round_ <= cfg.rounds:
            raise ConfigError("round", round_, f"a round from 2 (ALA skips round 1) to {cfg.rounds}")
        tracked = cfg.clients_to("track_clients", n)
        widened = client not in tracked
        if widened:  # "auto" keeps the first clients' ALA weights only: track this one too (same result),
            # and those a stored run tracks, so that looking at clients in turn does not recompute each time
            stored = self.store.find(cfg)
            keep = stored.tracked_clients() if stored is not None else tracked
            cfg = cfg.replace(track_clients=",".join(map(str, sorted({*keep, client}))))
        # a stored run without this client is recomputed and replaced; widened, no resume: a checkpoint
        # of this config may come from a run that did not track the client (its weights would lack rounds)
        runs, _, stopped = self._get_runs(
            [cfg],
            progress,
            request,
            needs=lambda r: client in r.tracked_clients(),
            resume=not widened,
        )
        if stopped:
            return None, None, None, stopped
        run = runs[0]
        weights = ALAWeightsDisplay.from_run(run, client, round_)
        loss = ALALossDisplay.from_run(run, client)
        table = weights.summary().round(3)
        table["shape"] = table["shape"].map(lambda t: " × ".join(map(str, t)))
        note = (
            f"Client {client}, ALA weights after round {weights.round_} of {run.summary()['rounds']}; "
            f"start phase {loss.start_epochs} epoch(s) in round 2"
            + (" (capped)" if client in run.capped_clients else "")
            + "."
        )
        return weights.figure_, loss.figure_, table, note

    # -- Trajectory -----------------------------------------------------------------------------------

    @_friendly
    @_with_settings
    def trajectory(self, client, K, before, grid, settings, progress=_PROGRESS, request: gr.Request = None):
        """Fig. 4: ``client``'s local models on its loss surface, FedAvg vs FedALA with ALA switched on after
        round K, from round K − ``before`` to the last round of the current settings."""
        from ..figures.trajectory import TrajectoryDisplay

        cfg = make_config(algo="fedala", **settings)
        client = _client(client, cfg.data.num_clients)
        K, before, grid = _whole(K), _whole(before), _whole(grid)
        if not isinstance(before, int) or before < 0:
            raise ConfigError("rounds before K", before, "an integer >= 0")
        if not isinstance(grid, int) or not 5 <= grid <= 61:
            raise ConfigError("grid", grid, "an integer from 5 to 61 (points per axis of the loss surface)")
        if not isinstance(K, int) or not 0 <= K < cfg.rounds:
            raise ConfigError(
                "K", K, f"an integer with 0 <= K < {cfg.rounds} (rounds): ALA must be on for part of the run"
            )
        window = (max(1, K - before), cfg.rounds)
        total = 2 * cfg.rounds + 1
        offsets = {"fedavg": 0, "fedala": cfg.rounds}

        def place(sim):
            name = "FedAvg" if sim.cfg.algo == "fedavg" else f"FedALA (ALA on after round {K})"
            return name, offsets.get(sim.cfg.algo, 0)

        progress((0, total), desc="FedAvg and FedALA: looking in the run store", unit="rounds")
        with self._stop_flag(request) as stop:
            try:
                fedavg_run, fedala_run = fig4_runs(
                    cfg,
                    K=K,
                    window=window,
                    client=client,
                    store=self.store,
                    progress=False,
                    callback=_round_callback(stop, progress, total, place),
                )
            except RunCancelled as err:
                return None, None, _stopped(err)
        progress((total - 1, total), desc=f"loss surface: {grid}×{grid} points", unit="rounds")
        disp = TrajectoryDisplay.from_runs(fedavg_run, fedala_run, client, grid=grid, rounds=window)
        table = disp.landscape_.summary()
        note = (
            f"Client {client}, rounds {window[0]}–{window[1]}; ALA switched on after round {K}. Markers are "
            "projections: the table gives each run's true final local loss and how far its models lie "
            "off the plane."
        )
        return disp.figure_, table.round(4), note

    # -- Ablation -----------------------------------------------------------------------------------

    @_friendly
    @_with_settings
    def ablation(self, param, values, settings, progress=_PROGRESS, request: gr.Request = None):
        """FedALA for each value of ``param`` (p or s), the rest as set: the paper's Tables 1/6 as a plot."""
        from ..figures.ablation import AblationDisplay

        if param not in ABLATION_VALUES:
            raise ConfigError("param", param, "p or s")
        vals = _parse_values(param, values)
        cfgs = [make_config(algo="fedala", **{**settings, param: v}) for v in vals]
        tic = time.perf_counter()
        runs, cached, stopped = self._get_runs(cfgs, progress, request)
        if not runs:
            return None, None, stopped
        disp = AblationDisplay.from_runs(runs, param=param)
        status = stopped or _status(runs, cached, time.perf_counter() - tic, what="FedALA run(s)")
        return disp.figure_, disp.frame_.round(3), status

    # -- FedLAMA -------------------------------------------------------------------------------------

    @_friendly
    @_with_settings
    def fedlama(self, tau0, phi, with_ala, settings, progress=_PROGRESS, request: gr.Request = None):
        """FedAvg(τ0), FedAvg(φ·τ0) and FedLAMA(τ0, φ) with the same local SGD steps: accuracy against the
        communication each needs (FedLAMA's Tables 1–4 as curves). ``with_ala`` adds FedALA and
        FedLAMA+ALA."""
        from ..figures.fedlama import CommAccuracyDisplay

        # the teach-fedlama preset: a round is τ0 local steps, with reshuffling (see experiments/presets.py)
        base = make_config(algo="fedlama", preset_name="teach-fedlama", tau0=tau0, phi=phi, **settings)
        cfgs = comparison_configs(base, with_ala=bool(with_ala))
        tic = time.perf_counter()
        runs, cached, stopped = self._get_runs(list(cfgs.values()), progress, request, labels=list(cfgs))
        if stopped:
            return None, None, stopped
        disp = CommAccuracyDisplay.from_runs(dict(zip(cfgs, runs, strict=True)))
        cols = [
            "label",
            "final_acc",
            "comm_pct",
            "best_acc",
            "steps_per_round",
            "phi",
            "rounds",
            "total_steps",
        ]
        table = disp.frame_[[c for c in cols if c in disp.frame_.columns]].round(2)
        return disp.figure_, table, _status(runs, cached, time.perf_counter() - tic)

    # -- Runs --------------------------------------------------------------------------------------

    @_friendly
    def runs(self, name=""):
        """List the app's run store; with ``name``, reload that run (accuracy curve and its settings).

        Only names listed in the store are accepted, and loading goes through :meth:`RunStore.load`, which
        refuses anything with a path separator: nothing outside the store can be reached.
        """
        from ..figures.curves import AccuracyCurveDisplay

        table = self.store.list()
        names = table["name"].tolist()
        shown = table.drop(columns=["modified"]).round({"best_acc": 2, "final_acc": 2, "seconds": 2})
        choices = gr.Dropdown(choices=names, value=name if name in names else None)
        if not name:
            return shown, choices, None, {}
        if name not in names:
            raise FedalaError(f"no finished run named {name!r} in the app's run store")
        run = self.store.load(name)
        fig = AccuracyCurveDisplay.from_runs([run], metric="acc").figure_
        return shown, choices, fig, {"summary": run.summary(), "config": run.config.to_dict()}


# --------------------------------------------------------------------------------------------------
# the page


def warm_up() -> None:
    """Partition the default data, run two rounds of FedAvg and of FedALA on it and draw their curves, all
    discarded: the first click in a process would otherwise pay for loading the data, tracing the engine's
    step functions and loading matplotlib's fonts (≈ 3 s on a laptop CPU)."""
    import io

    from ..engine.simulate import simulate
    from ..figures.curves import AccuracyCurveDisplay

    try:
        runs = [simulate(make_config(algo=a, rounds=2), progress=False) for a in ("fedavg", "fedala")]
        AccuracyCurveDisplay.from_runs(runs).figure_.savefig(io.BytesIO(), format="png")
    except Exception:  # a warm-up must never take the app down; the real click reports any problem
        log.warning("warm-up failed", exc_info=True)


def launch_kwargs() -> dict:
    """What ``demo.launch`` needs besides host/port/share (Gradio 6: theme and css belong to launch)."""
    return {
        "theme": gr.themes.Default(),
        "css": CSS,
        "ssr_mode": False,
        "show_error": False,
        "footer_links": ["api"],
    }


CSS = """
#train-status { min-height: 1.5em; }
"""


def _plot(label: str, elem_id: str, **kw):
    """A figure output; its label is the accessible name only (every figure carries its own title)."""
    return gr.Plot(label=label, elem_id=elem_id, show_label=False, **kw)


def _whole_slider(lo, hi, value, label: str, elem_id: str, step: int = 1, *, field: str, **kw):
    """A slider of whole numbers (clients, rounds, sizes): other values are refused, never rounded."""
    return Slider(lo, hi, value=value, step=step, precision=0, label=label, elem_id=elem_id, field=field,
                  whole=True, **kw)


def _run_stop(run_id: str, stop_id: str):
    with gr.Row():
        run = gr.Button("Run", variant="primary", elem_id=run_id, scale=0, min_width=120)
        stop = gr.Button("Stop", variant="stop", elem_id=stop_id, scale=0, min_width=120)
    return run, stop


def build_app(store=None, concurrency: int = 1) -> gr.Blocks:
    """The Blocks page. ``concurrency`` simulations run at once (shared by every tab); more clicks queue."""
    app = LectureApp(store)
    sim = {"concurrency_limit": concurrency, "concurrency_id": "simulation"}
    light = {"concurrency_limit": 4, "concurrency_id": "light"}
    private = {"api_visibility": "private"}
    d = DEFAULTS

    with gr.Blocks(title="fedala_lab: personalised federated learning", analytics_enabled=False) as demo:
        demo.lecture_app = app  # tests reach the handlers (and the store) through the page
        gr.Markdown(
            "## fedala_lab · FedAvg, FedProx, FedALA and FedLAMA, live\n"
            "Set the data here; every tab uses it (and the *Train & compare* settings). Runs are "
            "cached: the same settings again are instant."
        )
        with gr.Row(equal_height=True):
            dataset = gr.Dropdown(
                DATASET_CHOICES, value=d["dataset"], label="dataset", elem_id="dataset", scale=2
            )
            partition = gr.Radio(
                PARTITION_CHOICES, value=d["partition"], label="partition", elem_id="partition", scale=3
            )
            num_clients = _whole_slider(2, 100, d["num_clients"], "clients N", "clients", field="num_clients", scale=3)
            beta = Number(d["beta"], label="Dirichlet β (small = skewed)", elem_id="beta", field="beta", scale=2)
            classes_per_client = _whole_slider(
                1, 10, d["classes_per_client"], "labels per client (pathological)", "classes", field="classes_per_client",
                scale=2
            )

        with gr.Tabs():
            # 1. Data
            with gr.Tab("Data", id="data"):
                kind = gr.Radio(
                    [("bubbles", "bubble"), ("heatmap", "heatmap")],
                    value="bubble",
                    label="view",
                    elem_id="data-kind",
                )
                with gr.Row():
                    data_plot = _plot(label="samples per client and label", elem_id="data-plot", scale=3)
                    data_table = gr.Dataframe(
                        label="per client", elem_id="data-table", max_height=420, interactive=False, scale=1
                    )

            # 2. Train & compare
            with gr.Tab("Train & compare", id="train"):
                with gr.Row():
                    algos = gr.CheckboxGroup(
                        TRAIN_ALGOS, value=["fedavg", "fedala"], label="algorithms", elem_id="algos", scale=3
                    )
                    model = gr.Dropdown(
                        MODEL_CHOICES, value=d["model"], label="model", elem_id="model", scale=1
                    )
                with gr.Row():
                    rounds = _whole_slider(1, 300, d["rounds"], "rounds T", "rounds", field="rounds")
                    join_ratio = Slider(
                        0.05,
                        1.0,
                        value=d["join_ratio"],
                        step=0.05,
                        label="join ratio ρ (clients per round)",
                        elem_id="join-ratio",
                        field="join_ratio",
                    )
                    batch_size = _whole_slider(1, 64, d["batch_size"], "batch size", "batch-size", field="batch_size")
                    seed = Number(d["seed"], precision=0, minimum=0, label="seed", elem_id="seed", field="seed", whole=True)
                with gr.Row():
                    lr = Number(d["lr"], label="learning rate", elem_id="lr", field="lr")
                    mu = Number(d["mu"], label="FedProx μ", elem_id="mu", field="mu")
                    eta = Number(d["eta"], label="ALA η (weight learning rate)", elem_id="eta", field="eta")
                    s = Slider(1, 100, value=d["s"], step=1, label="ALA s (% of local data)", elem_id="s", field="s")
                    p = _whole_slider(1, 4, d["p"], "ALA p (top blocks)", "p", field="p")
                train_btn, train_stop = _run_stop("train-run", "train-stop")
                train_status = gr.Markdown(elem_id="train-status")
                with gr.Row():
                    acc_plot = _plot(label="test accuracy", elem_id="train-acc-plot")
                    loss_plot = _plot(label="test loss", elem_id="train-loss-plot")
                summary = gr.Dataframe(label="summary", elem_id="train-summary", interactive=False)

            # 3. ALA inside
            with gr.Tab("ALA inside", id="ala"):
                gr.Markdown(
                    "What ALA learns for one client (paper Fig. 2 and 3), from the FedALA run of the "
                    "current settings."
                )
                with gr.Row():
                    ala_client = _whole_slider(0, d["num_clients"] - 1, 0, "client", "ala-client", field="client")
                    ala_round = _whole_slider(
                        2, d["rounds"], d["rounds"], "round (ALA starts in round 2)", "ala-round", field="round"
                    )
                ala_btn, ala_stop = _run_stop("ala-run", "ala-stop")
                ala_status = gr.Markdown(elem_id="ala-status")
                ala_w_plot = _plot(label="ALA weights W (Fig. 2)", elem_id="ala-weights-plot")
                with gr.Row():
                    ala_loss_plot = _plot(label="ALA loss (Fig. 3)", elem_id="ala-loss-plot", scale=3)
                    ala_table = gr.Dataframe(
                        label="W per tensor", elem_id="ala-table", interactive=False, scale=2
                    )

            # 4. Trajectory
            with gr.Tab("Trajectory", id="trajectory"):
                gr.Markdown(
                    "Paper Fig. 4: one client's local models on its loss surface, FedAvg (black) vs "
                    "FedALA (blue), where FedALA is FedAvg until round K and uses ALA afterwards. Red "
                    "circles: start of a round, green squares: its end."
                )
                with gr.Row():
                    traj_client = _whole_slider(0, d["num_clients"] - 1, 4, "client", "traj-client", field="client")
                    traj_K = _whole_slider(
                        0, d["rounds"] - 1, d["rounds"] - 10, "ALA activation round K (ALA on after it)", "traj-k",
                        field="K"
                    )
                    traj_before = _whole_slider(0, 20, 2, "rounds shown before K", "traj-before", field="rounds before K")
                    traj_grid = _whole_slider(
                        5, 41, 21, "surface grid (points per axis)", "traj-grid", step=2, field="grid"
                    )
                traj_btn, traj_stop = _run_stop("traj-run", "traj-stop")
                traj_status = gr.Markdown(elem_id="traj-status")
                with gr.Row():
                    traj_plot = _plot(label="trajectories on the loss surface", elem_id="traj-plot", scale=3)
                    traj_table = gr.Dataframe(
                        label="true local losses", elem_id="traj-table", interactive=False, scale=2
                    )

            # 5. Ablation
            with gr.Tab("Ablation", id="ablation"):
                gr.Markdown(
                    "FedALA once per value of p (top blocks with ALA weights) or s (% of local data used "
                    "to learn them), everything else as set (paper Tables 1 and 6)."
                )
                with gr.Row():
                    abl_param = gr.Radio(
                        [("p", "p"), ("s", "s")], value="p", label="sweep", elem_id="abl-param"
                    )
                    abl_values = gr.Textbox(
                        ABLATION_VALUES["p"], label="values (comma-separated)", elem_id="abl-values"
                    )
                abl_btn, abl_stop = _run_stop("abl-run", "abl-stop")
                abl_status = gr.Markdown(elem_id="abl-status")
                abl_plot = _plot(label="accuracy and cost", elem_id="abl-plot")
                abl_table = gr.Dataframe(label="per value", elem_id="abl-table", interactive=False)

            # 6. FedLAMA
            with gr.Tab("FedLAMA", id="fedlama"):
                gr.Markdown(
                    "FedLAMA averages each layer every τ0 or φ·τ0 local steps, by how much the clients "
                    "disagree on it. Compared with FedAvg every τ0 and every φ·τ0 steps, all with the "
                    "same local steps (a round is τ0 steps here; data reshuffled each round)."
                )
                with gr.Row():
                    tau0 = _whole_slider(1, 50, 10, "τ0 (local steps per round)", "tau0", field="tau0")
                    phi = _whole_slider(1, 8, 2, "φ (long interval = φ·τ0)", "phi", field="phi")
                    lama_ala = gr.Checkbox(False, label="also FedALA and FedLAMA+ALA", elem_id="lama-ala")
                lama_btn, lama_stop = _run_stop("lama-run", "lama-stop")
                lama_status = gr.Markdown(elem_id="lama-status")
                with gr.Row():
                    lama_plot = _plot(label="accuracy vs communication", elem_id="lama-plot", scale=3)
                    lama_table = gr.Dataframe(
                        label="per method", elem_id="lama-table", interactive=False, scale=2
                    )

            # 7. Runs
            with gr.Tab("Runs", id="runs"):
                gr.Markdown(
                    "Runs the app has computed (its own run store, read-only). Pick one to reload it."
                )
                with gr.Row():
                    run_name = gr.Dropdown(
                        [], label="run", elem_id="run-name", allow_custom_value=True, scale=4
                    )
                    refresh_btn = gr.Button("Refresh", elem_id="runs-refresh", scale=0, min_width=120)
                runs_table = gr.Dataframe(
                    label="finished runs", elem_id="runs-table", interactive=False, max_height=300
                )
                with gr.Row():
                    run_plot = _plot(label="test accuracy", elem_id="run-plot")
                    run_details = gr.JSON(label="summary and settings", elem_id="run-details")

        # -- events: each tab's action is a named API endpoint ------------------------------------------
        # the setting widgets by name, listed in DATA_FIELDS + TRAIN_FIELDS order: the handlers' parameters
        by_name = {
            "dataset": dataset,
            "partition": partition,
            "num_clients": num_clients,
            "beta": beta,
            "classes_per_client": classes_per_client,
            "model": model,
            "rounds": rounds,
            "join_ratio": join_ratio,
            "lr": lr,
            "batch_size": batch_size,
            "mu": mu,
            "eta": eta,
            "s": s,
            "p": p,
            "seed": seed,
        }
        data_inputs = [by_name[k] for k in DATA_FIELDS]
        settings = [by_name[k] for k in DATA_FIELDS + TRAIN_FIELDS]
        gr.on(
            [
                dataset.change,
                partition.change,
                num_clients.release,
                classes_per_client.release,
                beta.submit,
                beta.blur,
                kind.change,
                demo.load,
            ],
            app.partition,
            data_inputs + [kind],
            [data_plot, data_table],
            api_name="partition",
            trigger_mode="always_last",
            **light,
        )
        runs_out = [runs_table, run_name, run_plot, run_details]
        gr.on(
            [refresh_btn.click, run_name.select, demo.load],
            app.runs,
            [run_name],
            runs_out,
            api_name="runs",
            **light,
        )

        long_jobs = [
            (
                train_btn,
                train_stop,
                app.train,
                [algos],
                [acc_plot, loss_plot, summary],
                train_status,
                "train",
            ),
            (
                ala_btn,
                ala_stop,
                app.ala,
                [ala_client, ala_round],
                [ala_w_plot, ala_loss_plot, ala_table],
                ala_status,
                "ala",
            ),
            (
                traj_btn,
                traj_stop,
                app.trajectory,
                [traj_client, traj_K, traj_before, traj_grid],
                [traj_plot, traj_table],
                traj_status,
                "trajectory",
            ),
            (
                abl_btn,
                abl_stop,
                app.ablation,
                [abl_param, abl_values],
                [abl_plot, abl_table],
                abl_status,
                "ablation",
            ),
            (
                lama_btn,
                lama_stop,
                app.fedlama,
                [tau0, phi, lama_ala],
                [lama_plot, lama_table],
                lama_status,
                "fedlama",
            ),
        ]
        for btn, stop_btn, fn, own, outs, status, name in long_jobs:
            event = btn.click(fn, own + settings, outs + [status], api_name=name, **sim)
            event.then(app.runs, None, runs_out, **private)  # the Runs tab lists the new runs
            # Stop runs outside the queue (it must not wait behind the job it stops); one public endpoint,
            # so a gradio_client script can stop its own session's job too
            # (cancels: a job still waiting in the queue is dropped; a running one stops through the flag)
            stop_btn.click(
                app.stop,
                None,
                status,
                queue=False,
                cancels=[event],
                **({"api_name": "stop"} if name == "train" else private),
            )

        # sliders that depend on the settings follow them
        def follow_clients(n, a, t):
            top = max(int(n) - 1, 0)
            return gr.Slider(maximum=top, value=min(a, top)), gr.Slider(maximum=top, value=min(t, top))

        def follow_rounds(r, a, k):
            r = int(r)
            return (
                gr.Slider(maximum=max(r, 2), value=min(max(a, 2), max(r, 2))),
                gr.Slider(maximum=max(r - 1, 0), value=min(k, max(r - 1, 0))),
            )

        num_clients.release(
            follow_clients,
            [num_clients, ala_client, traj_client],
            [ala_client, traj_client],
            queue=False,
            **private,
        )
        rounds.release(
            follow_rounds, [rounds, ala_round, traj_K], [ala_round, traj_K], queue=False, **private
        )
        abl_param.change(
            lambda prm: ABLATION_VALUES.get(prm, ""), abl_param, abl_values, queue=False, **private
        )
    return demo
