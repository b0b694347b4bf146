"""The lecture app's page: the data settings above the tabs, one tab per module of :mod:`.tabs`, and the
wiring that makes each tab's job a named API endpoint with Run, Stop and progress.

Each tab's action is one method of :class:`LectureApp` and one named API endpoint (``partition``,
``download``, ``ladder``, ``train``, ``ala``, ``trajectory``, ``ablation``, ``fedlama``, ``runs``, and
``stop``), so scripts and tests
drive the app with ``gradio_client`` exactly as the page does. Handlers compute nothing themselves: they
build a :class:`~fedala_lab.config.RunConfig` (whose validation is the app's input check), get the runs from
the library (the run store, else simulated: :mod:`.jobs`) and hand them to a Display.

Errors: a :class:`~fedala_lab.errors.FedalaError` (bad value, impossible partition, diverged run) becomes a
``gr.Error`` with the library's one-line message; anything else is logged with its traceback on the server
and shown as a short message. Either way the page stays usable and keeps what it showed.
"""

from __future__ import annotations

import logging

import gradio as gr  # after the package's offline_env()

from .jobs import PROGRESS, Jobs, friendly
from .settings import DATA_FIELDS, DEFAULTS, TRAIN_FIELDS, Settings, data_settings, make_config
from .tabs import ablation as ablation_tab
from .tabs import ala as ala_tab
from .tabs import data as data_tab
from .tabs import fedlama as fedlama_tab
from .tabs import runs as runs_tab
from .tabs import train as train_tab
from .tabs import trajectory as trajectory_tab
from .widgets import KEEP_TYPED_VALUES_JS, LIGHT, PRIVATE

__all__ = ["DATA_FIELDS", "DEFAULTS", "TRAIN_FIELDS", "LectureApp", "build_app", "launch_kwargs", "make_config",
           "warm_up"]

log = logging.getLogger(__name__)


class LectureApp(Jobs):
    """The app's handlers, bound to one run store. Each public method is one tab's action."""

    partition = data_tab.partition
    download = data_tab.download
    ladder = data_tab.ladder
    train = train_tab.train
    train_clients = train_tab.clients
    ala = ala_tab.ala
    trajectory = trajectory_tab.trajectory
    ablation = ablation_tab.ablation
    fedlama = fedlama_tab.fedlama
    runs = runs_tab.runs

    @friendly
    def prepare_lecture(self, progress=PROGRESS):
        """Compute every tab's defaults and scenarios into the run store (:mod:`.lecture`), on the progress bar;
        returns how long it took and what it did."""
        from .lecture import prepare

        return prepare(self, lambda fraction, text: progress(fraction, desc=text)).summary()


def build_app(store=None, concurrency: int = 1, processes: int = 1, projector: bool = False) -> gr.Blocks:
    """The Blocks page. ``concurrency`` jobs run at once (shared by every tab); more clicks queue. ``processes``
    > 1: a job's runs are computed side by side in that many processes, started (and warmed) here.
    ``projector``: the projector toggle's first value (every session may change its own)."""
    app = LectureApp(store, processes, projector)
    if app.pool is not None:
        app.pool.start([make_config(algo=a, rounds=2) for a in ("fedavg", "fedala")])
    settings = Settings()
    with gr.Blocks(title="fedala_lab: personalised federated learning", analytics_enabled=False) as demo:
        demo.lecture_app = app  # tests reach the handlers (and the store) through the page
        with gr.Row(equal_height=True):
            gr.Markdown(
                "**fedala_lab · FedAvg, FedProx, FedALA and FedLAMA, live.** The data set here is every tab's (and "
                "the training settings under *Train & compare*); runs are cached, the same settings again are "
                "instant.", elem_id="app-title")
            # figure text of 14 px or more at 1280×800, thick lines, high contrast: the figures drawn from now on
            projecting = gr.Checkbox(projector, label="projector mode", elem_id="projector", scale=0, min_width=170)
        projecting.change(app.set_projecting, projecting, None, queue=False, api_name="projector")
        data_settings(settings)
        panels = []
        with gr.Tabs():
            with gr.Tab("Data", id="data"):
                data_tab.build(app, demo, settings)
            for label, tab_id, build in (("Heterogeneity", "ladder", data_tab.build_ladder),
                                         ("Train & compare", "train", train_tab.build),
                                         ("ALA inside", "ala", ala_tab.build),
                                         ("Trajectory", "trajectory", trajectory_tab.build),
                                         ("Ablation", "ablation", ablation_tab.build),
                                         ("FedLAMA", "fedlama", fedlama_tab.build)):
                with gr.Tab(label, id=tab_id):
                    panels.append(build(app, settings))
            with gr.Tab("Runs", id="runs"):
                runs_io, (prepare, prepared) = runs_tab.build(app, demo)
        sim = {"concurrency_limit": concurrency, "concurrency_id": "simulation"}
        prepare.click(app.prepare_lecture, None, prepared, api_name="prepare", show_progress_on=prepared,
                      **sim).then(app.runs, *runs_io, **LIGHT, **PRIVATE)
        for panel in panels:
            _wire(app, panel, settings, runs_io, sim)
        settings.followers.wire()
    _no_estimates(demo)
    return demo


def _no_estimates(demo: gr.Blocks) -> None:
    """No expected duration beside a job's elapsed time ("6.9/2.9s"): Gradio shows the mean of the handler's
    earlier durations, which says nothing when one click is served from the run store in a second and the next
    computes for a minute (the drawing after a job, too, takes as long as the runs it draws). The elapsed time and
    the rounds done stay. Gradio's queue gives an estimate only for a handler found in ``process_time_per_fn``."""
    queue = getattr(demo, "_queue", None)
    times = getattr(queue, "process_time_per_fn", None)
    if times is None:
        return

    class Untimed(type(times)):
        def __contains__(self, fn):
            return False

    queue.process_time_per_fn = Untimed(times.default_factory, times)


def _wire(app: LectureApp, panel, settings: Settings, runs_io, sim: dict) -> None:
    """A tab's job: Run (or another trigger) arms the session's stop flag at once, then queues the job, a
    named endpoint (with every shared setting as a parameter); after it, what draws from its runs and the
    Runs tab's list. Stop runs outside the queue (it must not wait behind the job it stops): the button reads
    "Stopping…" at once (in the page), then Stop waits for the job and writes the job's own final line; one
    public endpoint, so a gradio_client script can stop its own session's job too."""
    armed = gr.on([panel.run.click, *panel.triggers], app.arm(panel.name), None, None, queue=False, **PRIVATE)
    # progress (and an error's badge) on the status line only: the figures and tables keep what they show
    event = armed.then(getattr(app, panel.name), panel.inputs + settings.inputs, panel.outputs + [panel.status],
                       api_name=panel.name, show_progress_on=panel.status, **sim)
    for name, inputs, outputs in panel.then:
        event.success(getattr(app, name), inputs + settings.inputs, outputs, **LIGHT, **PRIVATE)
    event.then(app.runs, *runs_io, **LIGHT, **PRIVATE)  # the Runs tab lists the new runs
    # every Stop is named: an unnamed one would take the name "stop" (from the handler) before the Train tab's
    public = panel.name == "train"
    ack = panel.stop.click(None, None, panel.stop, js="() => 'Stopping…'", queue=False, **PRIVATE)
    ack.then(app.stopper(panel.name), None, [panel.status, panel.stop], queue=False, show_progress="hidden",
             api_name="stop" if public else f"stop_{panel.name}", **({} if public else PRIVATE))


def warm_up() -> None:
    """Partition the default data, run two rounds of FedAvg and of FedALA on it and draw their curves and
    their clients' spread, all discarded: the first click in a process would otherwise pay for loading the
    data, tracing the engine's step functions and loading matplotlib's fonts and seaborn (seconds on a laptop
    CPU: benchmarks/results.md times the server's start with it)."""
    import io

    from ..experiments.runs import run_unsaved
    from ..figures.clients import ClientSpreadDisplay
    from ..figures.curves import AccuracyCurveDisplay

    try:
        runs = [run_unsaved(make_config(algo=a, rounds=2)) for a in ("fedavg", "fedala")]
        for disp in (AccuracyCurveDisplay.from_runs(runs), ClientSpreadDisplay.from_runs(runs)):
            disp.figure_.savefig(io.BytesIO(), format="png")
    except Exception:  # a warm-up must never take the app down; the real click reports any problem
        log.warning("warm-up failed", exc_info=True)


def launch_kwargs() -> dict:
    """What ``demo.launch`` needs besides host/port/share (Gradio 6: theme, css and js belong to launch)."""
    return {
        # Source Sans Pro at 400 and 700: the package's 600 ("SemiBold") file holds only "A", "B" and the space, so
        # bold text mixed its "A" with a fallback font's other letters ("FedAᴠg")
        "theme": gr.themes.Default(font=[gr.themes.LocalFont("Source Sans Pro", weights=(400, 700)), "ui-sans-serif",
                                         "system-ui", "sans-serif"]),
        "css": CSS,
        "js": KEEP_TYPED_VALUES_JS,
        "ssr_mode": False,
        "show_error": False,
        "footer_links": ["api"],
    }


# Projector-sized: every tab's Run button and main figure fit 1280×800 without scrolling (the browser test
# checks it); notes in full-size, full-contrast text (Gradio's "info" lines are pale and small).
CSS = """
.gradio-container { padding-top: 6px !important; }
#app-title p { margin: 0; font-size: 15px; }
.status { min-height: 1.5em; }
.note, .note p { font-size: 14px !important; color: var(--body-text-color) !important; }
.main-plot img { max-height: calc(100vh - 340px) !important; width: auto !important; max-width: 100% !important; }
.main-plot.below-note img { max-height: calc(100vh - 450px) !important; }
#algos .wrap-inner { max-height: 6.6em; overflow-y: auto; }
.figure-download { align-self: flex-start; margin-top: -6px; }
"""
