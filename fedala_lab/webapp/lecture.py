"""A lecture prepared in one command, and its figures and handouts for slides.

    fedala-lab lecture prepare               # every tab's defaults and scenarios into the app's run store
    fedala-lab lecture prepare --notebooks notebooks/   # and every notebook's runs into the notebooks' store
    fedala-lab lecture export slides/        # every tab's figures (PNG and SVG) and a handout per tab

:data:`STEPS` lists what the page shows on its defaults: each tab's job with the values its widgets start
with, and the one-click scenarios of *Train & compare* and the other sweep of *Ablation*. :func:`prepare` calls
each tab's own handler with them, exactly as a click does, so the runs a click will ask for are the ones
computed into the app's run store (the same store the app reads: ``$FEDALA_LAB_APP_RUNS`` or ``./runs/app``):
afterwards every default click is served from it. :func:`export` calls the handlers again, in projector mode,
and writes what they return: the figures at projector size, and per step a one-page handout (Markdown and
HTML) with the settings, the tables and the sentences the page shows, all computed from the runs.
:func:`run_notebooks` executes the lecture notebooks once, headless, so that in class each reads its runs from
the store instead of training them (02, 06 and 08 train 20–50 runs each).
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..analysis.tables import data_title, frame_to_markdown, run_settings
from ..errors import FedalaError
from ..experiments.presets import preset
from .settings import (
    DATA_FIELDS,
    DEFAULTS,
    SCENARIO_FIELDS,
    SCENARIOS,
    TRAIN_FIELDS,
    make_config,
    scenario_values,
)
from .tabs import ablation as ablation_tab
from .tabs import ala as ala_tab
from .tabs import data as data_tab
from .tabs import train as train_tab
from .tabs import trajectory as trajectory_tab


@dataclass(frozen=True)
class Step:
    """One thing the page shows: tab ``tab``'s handlers (LectureApp methods, called in turn with the same
    inputs) on its own inputs ``own`` and the shared settings changed by ``changes`` (a scenario's)."""

    key: str  # file names of its figures and handout
    tab: str
    title: str
    handlers: tuple[str, ...]
    own: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)  # the shared settings it runs with


def steps(base: dict | None = None) -> list[Step]:
    """What the page shows on its defaults (``base``: other shared settings, e.g. a smaller problem in the
    tests; the tabs' own inputs then follow them as the page's sliders do: the client within N, the rounds
    within T, FedLAMA's rounds in proportion)."""
    shared = {k: DEFAULTS[k] for k in DATA_FIELDS + TRAIN_FIELDS} | dict(base or {})
    rounds, clients = shared["rounds"], shared["num_clients"]
    lama = preset("teach-fedlama")
    trajectory = {**trajectory_tab.DEFAULT, "client": min(trajectory_tab.DEFAULT["client"], clients - 1),
                  "K": max(1, min(trajectory_tab.DEFAULT["K"], rounds - 10))}
    train = []
    for name in SCENARIOS:
        values, algos = scenario_values(name)
        changes = dict(zip(SCENARIO_FIELDS, values, strict=True))
        key = "train" if name == "teach" else f"train-{name}"
        train.append(Step(key, "Train & compare", f"Train & compare: {SCENARIOS[name][0]}", ("train", "train_clients"),
                          {"algos": algos, "seeds": train_tab.DEFAULT_SEEDS},
                          shared | (changes if name != "teach" else {})))
    sweeps = [Step(f"ablation-{p}", "Ablation", f"Ablation of {p}", ("ablation",),
                   {"param": p, "values": v, "seeds": ablation_tab.DEFAULT["seeds"]}, shared)
              for p, v in ablation_tab.ABLATION_VALUES.items()]
    return [
        Step("data", "Data", "Who holds which labels", ("partition",), {}, shared),
        Step("heterogeneity", "Heterogeneity", "FedAvg as the clients' data drift apart", ("ladder",),
             {"seeds": data_tab.LADDER_SEEDS}, shared),
        *train,
        Step("ala", "ALA inside", "What ALA learns for one client (Fig. 2 and 3)", ("ala",),
             {"client": min(ala_tab.DEFAULT["client"], clients - 1), "round_": rounds}, shared),
        Step("trajectory", "Trajectory", "One client's local models on its loss surface (Fig. 4)", ("trajectory",),
             trajectory, shared),
        *sweeps,
        Step("fedlama", "FedLAMA", "FedLAMA: accuracy against the bytes uploaded", ("fedlama",),
             {"tau0": lama.tau0, "phi": lama.phi, "with_ala": False, "rule": lama.lama_rule,
              "lama_rounds": max(1, round(lama.rounds * rounds / DEFAULTS["rounds"]))}, shared),
    ]


STEPS = steps()


class _Progress:
    """What a handler reports (gr.Progress's call signature), passed on as ``report(fraction of the step,
    text)``."""

    def __init__(self, report):
        self.report = report

    def __call__(self, progress, desc=None, total=None, unit="steps"):
        if isinstance(progress, tuple):
            done, total = progress
            progress = done / total if total else 0.0
        self.report(float(progress or 0.0), desc or "")


def call(app, step: Step, report=None) -> list:
    """The outputs of ``step``'s handlers on ``app`` (a LectureApp), in order, as the page gets them.
    ``report(fraction, text)``: their progress. A refusal or failure is a FedalaError with the page's message."""
    import gradio as gr

    progress = _Progress(report or (lambda fraction, text: None))
    out = []
    for name in step.handlers:
        fn = getattr(app, name)
        try:
            if name == "partition":  # the Data tab's handler takes the data settings alone
                got = fn(**{k: step.settings[k] for k in DATA_FIELDS})
            else:
                got = fn(**step.own, **step.settings, progress=progress)
        except gr.Error as err:
            raise FedalaError(f"{step.title}: {err.message}") from None
        out.extend(got if isinstance(got, tuple) else [got])
    return out


@dataclass
class Prepared:
    """What :func:`prepare` did: seconds, runs added to the store, and each step's status line."""

    seconds: float
    computed: int
    statuses: dict[str, str]

    def summary(self) -> str:
        return (f"Lecture prepared in {self.seconds:.0f} s: {len(self.statuses)} views of {len({s.tab for s in STEPS})} "
                f"tabs, {self.computed} run(s) computed into the app's run store. Every default click, and each "
                "scenario's, is now served from it at once.")


def prepare(app, report=None, base: dict | None = None) -> Prepared:
    """Compute every step of :func:`steps` into ``app``'s run store (the runs it lacks; the others are served).
    ``report(fraction of all steps, text)``: progress. ``base``: as for :func:`steps`."""
    before = len(app.store.list())
    tic = time.perf_counter()
    statuses = {}
    todo = steps(base)
    for i, step in enumerate(todo):
        def inner(fraction, text, i=i, step=step):
            if report:
                report((i + min(max(fraction, 0.0), 1.0)) / len(todo), f"{step.title}: {text}")

        out = call(app, step, inner)
        statuses[step.key] = next((o for o in reversed(out) if isinstance(o, str)), "")
    if report:
        report(1.0, "done")
    return Prepared(time.perf_counter() - tic, len(app.store.list()) - before, statuses)


def export(app, out, report=None, *, dpi: int = 200, base: dict | None = None) -> list[Path]:
    """Write every step's figures (``<key>-<n>.png`` at ``dpi`` and ``.svg``) and its handout (``<key>.md``,
    ``<key>.html``) into the folder ``out``, and an index (``index.md``, ``index.html``). ``app`` should draw in
    projector mode (``LectureApp(..., projector=True)``); runs the store lacks are computed first, as a click
    would. ``base``: as for :func:`steps`. Returns the files written."""
    from matplotlib.figure import Figure

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written, index = [], []
    todo = steps(base)
    for i, step in enumerate(todo):
        got = call(app, step, (lambda f, t, i=i, step=step: report and report((i + f) / len(todo),
                                                                                 f"{step.title}: {t}")))
        figures = [o for o in got if isinstance(o, Figure)]
        names = []
        for n, fig in enumerate(figures, 1):
            for fmt in ("png", "svg"):
                path = out / f"{step.key}-{n}.{fmt}"
                _save(fig, path, dpi)
                written.append(path)
            names.append(f"{step.key}-{n}.png")
        md = handout(step, got, names)
        for suffix, text in ((".md", md), (".html", _html(step.title, md))):
            path = out / f"{step.key}{suffix}"
            _write(path, text)
            written.append(path)
        index.append(f"- [{step.title}]({step.key}.html) ({step.tab}; [Markdown]({step.key}.md))")
    md = "# The lecture's views\n\n" + "\n".join(index) + "\n"
    for suffix, text in ((".md", md), (".html", _html("The lecture's views", md))):
        _write(out / f"index{suffix}", text)
        written.append(out / f"index{suffix}")
    if report:
        report(1.0, "done")
    return written


def handout(step: Step, outputs: list, figures: list[str]) -> str:
    """One page of Markdown: what the step shows, its settings, its sentences (the page's, computed from the
    runs), its figures and its tables."""
    import pandas as pd

    cfg = make_config(**step.settings)
    own = ", ".join(f"{k.rstrip('_')} {', '.join(map(str, v)) if isinstance(v, list) else v}"
                    for k, v in step.own.items())
    texts = [o for o in outputs if isinstance(o, str) and o.strip()]
    status, said = (texts[-1], texts[:-1]) if step.handlers != ("partition",) else ("", texts)
    lines = [f"# {step.title}", "",
             f"**Settings:** {data_title(cfg.data)}; {cfg.model}, {cfg.rounds} rounds, {run_settings(cfg)}, "
             f"seed {cfg.seed}" + (f"; {own}" if own else "") + ".", ""]
    for text in said:
        lines += [text, ""]
    for name in figures:
        lines += [f"![{step.title}]({name})", ""]
    for frame in (o for o in outputs if isinstance(o, pd.DataFrame) and len(o)):
        lines += [frame_to_markdown(frame.head(30), index=False), ""]
    if status:
        lines += [f"*{status}*", ""]
    return "\n".join(lines)


def _save(fig, path: Path, dpi: int) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, dpi=dpi, format=path.suffix[1:])
    tmp.replace(path)  # never a half-written figure


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _html(title: str, md: str) -> str:
    from markdown_it import MarkdownIt  # Gradio's Markdown renderer, installed with it

    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(md)
    return (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto;line-height:1.4}"
            "img{max-width:100%}table{border-collapse:collapse;font-size:90%}"
            "td,th{border:1px solid #999;padding:2px 6px}</style></head>\n<body>\n"
            f"{body}</body></html>\n")


NOTEBOOKS = "[0-9][0-9]_*.ipynb"  # the lecture notebooks: 01_fedavg.ipynb …


def notebooks_store(folder) -> Path:
    """Where the notebooks of ``folder`` keep their runs: ``$FEDALA_LAB_RUNS``, else the project's runs/ beside
    the folder (their parameters cell reads ``FEDALA_LAB_RUNS`` and defaults to ``../runs``)."""
    from ..environ import RUNS, env_folder

    return Path(env_folder(RUNS) or Path(folder, "..", "runs")).resolve()


def execute_notebook(path, env: dict, on_cell=None, timeout: int = 600):
    """Execute the notebook ``path`` with nbclient on the ``python3`` kernel, from its own folder, with ``env``
    set for the kernel (``FEDALA_LAB_RUNS``, ``FEDALA_LAB_SMOKE``…; a None value unsets a variable) and
    ``MPLBACKEND`` unset (Agg would leak into the kernel); this process's environment is restored after.
    ``on_cell(done, total)`` after each cell. Returns the executed notebook (nothing is written)."""
    import os

    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    env = {**env, "MPLBACKEND": None}
    saved = {k: os.environ.get(k) for k in env}
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = str(v)
    total = sum(c.cell_type == "code" for c in nb.cells)
    done = []

    def cell_done(cell=None, cell_index=None, **_):
        done.append(cell_index)
        if on_cell:
            on_cell(len(done), total)

    try:
        client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                         resources={"metadata": {"path": str(Path(path).parent)}},
                                         on_cell_executed=cell_done)
        client.execute()
        return nb
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_notebooks(folder, report=None) -> list[str]:
    """Execute the lecture notebooks of ``folder`` once, at their full settings (``FEDALA_LAB_SMOKE`` unset), so
    that the runs they need are in their run store (:func:`notebooks_store`): in class each then reads them.
    Nothing is written into the notebooks. ``report(fraction, text)``: progress. Returns the notebooks run."""
    from ..errors import ConfigError

    paths = sorted(Path(folder).glob(NOTEBOOKS))
    if not paths:
        raise ConfigError("notebooks", str(folder), "a folder holding the lecture notebooks (01_fedavg.ipynb …)")
    store = notebooks_store(folder)
    for i, path in enumerate(paths):
        def cell(done, total, i=i, path=path):
            if report:
                report((i + done / max(total, 1)) / len(paths), f"{path.stem}: cell {done} of {total}")

        execute_notebook(path, {"FEDALA_LAB_RUNS": store, "FEDALA_LAB_SMOKE": None}, cell)
    if report:
        report(1.0, f"notebooks done (run store {store})")
    return [p.stem for p in paths]


__all__ = ["NOTEBOOKS", "STEPS", "Prepared", "Step", "call", "execute_notebook", "export", "handout",
           "notebooks_store", "prepare", "run_notebooks", "steps"]
