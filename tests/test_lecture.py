"""The lecture prepared in one command and exported for slides (fedala_lab/webapp/lecture.py), projector mode
(fedala_lab/figures/style.py), and what the fourth pass over the lecture changed in the app's handlers: a method
set computes each distinct run once, a bounded palette with many methods, why FedProx wins under stragglers,
s first on the Ablation tab, and a Runs comparison whose legend stays clear of the axes.

In-process, on small settings (the embedded digits, 10 clients, a few rounds); the browser checks are in
test_app_e2e.py.
"""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import APP_SMALL

gr = pytest.importorskip("gradio")

from fedala_lab.webapp import lecture, ui

# the page's settings for the lecture's steps here: small, and long enough for Trajectory's K (rounds − 10 ≥ 1)
BASE = {**APP_SMALL, "rounds": 11}


class Progress:
    def __init__(self):
        self.calls = []

    def __call__(self, progress, desc=None, total=None, unit="steps"):
        self.calls.append((progress, desc))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """An app whose store was prepared for BASE (what `fedala-lab lecture prepare` does for the defaults)."""
    app = ui.LectureApp(tmp_path_factory.mktemp("lecture_store"))
    reports = []
    done = lecture.prepare(app, lambda fraction, text: reports.append((fraction, text)), base=BASE)
    return app, done, reports


def test_prepare_computes_every_tabs_defaults_once_then_each_default_click_is_served(prepared):
    app, done, reports = prepared
    steps = lecture.steps(BASE)
    # every tab of the page, and the one-click scenarios and the other sweep
    assert {s.tab for s in steps} == {"Data", "Heterogeneity", "Train & compare", "ALA inside", "Trajectory",
                                      "Ablation", "FedLAMA"}
    assert {"train-collab", "train-fedprox", "ablation-s", "ablation-p"} <= {s.key for s in steps}
    # Train & compare's default click, and each scenario's, is over the seeds slider's default (and draws its clients)
    from fedala_lab.webapp.tabs.train import DEFAULT_SEEDS

    train = [s for s in steps if s.tab == "Train & compare"]
    assert len(train) == 3 and all(s.own["seeds"] == DEFAULT_SEEDS > 1 for s in train)
    assert all(s.handlers == ("train", "train_clients") for s in train)
    assert done.computed == len(app.store.list()) > 0 and set(done.statuses) == {s.key for s in steps}
    assert "every default click" in done.summary().lower() or "Every default click" in done.summary()
    assert f"{done.computed} run(s) computed" in done.summary()
    fractions = [f for f, _ in reports]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0  # a progress bar that ends full
    # each tab's handler called as the page calls it with its defaults: nothing computed, the status says so
    listed = len(app.store.list())
    for step in steps:
        if step.handlers == ("partition",):
            continue  # draws the partition, no run
        status = [o for o in lecture.call(app, step) if isinstance(o, str)][-1]
        m = re.search(r"(\d+) (?:FedALA )?run\(s\) in [\d.]+ s \((\d+) served from the run store", status)
        assert m and m[1] == m[2], (step.key, status)
    assert len(app.store.list()) == listed


def test_the_apps_prepare_button_reports_progress_and_what_it_did(prepared, monkeypatch):
    app, _, _ = prepared
    monkeypatch.setattr(lecture, "STEPS", lecture.steps(BASE))
    monkeypatch.setattr(lecture, "steps", lambda base=None: lecture.STEPS)  # the button prepares the defaults
    progress = Progress()
    said = app.prepare_lecture(progress=progress)
    assert said.startswith("Lecture prepared in ") and "0 run(s) computed" in said and "served from it" in said
    assert progress.calls and progress.calls[-1][0] == 1.0


def test_export_writes_figures_for_slides_and_a_handout_per_view(prepared, tmp_path):
    import pandas as pd

    from fedala_lab.figures.style import PROJECTOR_MIN_PT

    app, _, _ = prepared
    slides = ui.LectureApp(app.store, projector=True)  # as `fedala-lab lecture export` draws
    written = lecture.export(slides, tmp_path / "slides", dpi=80, base=BASE)
    names = {p.name for p in written}
    for step in lecture.steps(BASE):
        assert {f"{step.key}.md", f"{step.key}.html", f"{step.key}-1.png", f"{step.key}-1.svg"} <= names, step.key
    assert {"index.md", "index.html"} <= names and len(app.store.list()) == len(slides.store.list())
    png = (tmp_path / "slides" / "train-1.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    # the handout: settings, the page's sentence and numbers, computed from the runs the page shows
    step = next(s for s in lecture.steps(BASE) if s.key == "train-fedprox")
    out = lecture.call(slides, step)
    verdict, summary = out[1], next(o for o in out if isinstance(o, pd.DataFrame))
    md = (tmp_path / "slides" / "train-fedprox.md").read_text()
    assert verdict in md and "stragglers" in md and "**Settings:**" in md and "90 % stragglers" in md
    for value in summary["final acc % (pooled)"]:
        assert f"{value}" in md
    assert "<table>" in (tmp_path / "slides" / "train-fedprox.html").read_text()
    # drawn in projector mode: no text under the projector's size
    fig = out[0]
    sizes = [t.get_fontsize() for t in fig.findobj(lambda a: hasattr(a, "get_fontsize") and hasattr(a, "get_text"))
             if t.get_text()]
    assert min(sizes) >= PROJECTOR_MIN_PT


def test_lecture_cli_refuses_bad_use_in_one_line(tmp_path):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "fedala_lab.cli", "lecture", *args], capture_output=True,
                              text=True, timeout=120, check=False)

    r = cli("export")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "dir=None is not allowed" in r.stderr
    r = cli("prepare", str(tmp_path))
    assert r.returncode == 2 and "prepare writes into the app's run store" in r.stderr


def test_projector_mode_makes_every_text_large_lines_thick_and_colours_dark():
    from matplotlib.lines import Line2D
    from matplotlib.text import Text

    from fedala_lab.experiments.runs import run_unsaved
    from fedala_lab.figures import AccuracyCurveDisplay, ClientAccuracyDisplay, HeterogeneityDisplay
    from fedala_lab.figures.style import CONTRAST, PROJECTOR_MAX_SIZE, PROJECTOR_MIN_PT, projector

    runs = [run_unsaved(ui.make_config(algo=a, **{**APP_SMALL, "rounds": 2})) for a in ("fedavg", "fedala")]

    def texts(fig):
        return [t.get_fontsize() for t in fig.findobj(Text) if t.get_text()]

    plain = AccuracyCurveDisplay.from_runs(runs)
    with projector():
        big = AccuracyCurveDisplay.from_runs(runs)
        wide = HeterogeneityDisplay.from_runs({"a": runs[:1], "b": runs[1:]})
        clients = ClientAccuracyDisplay.from_runs(runs)
    assert min(texts(plain.figure_)) < PROJECTOR_MIN_PT <= min(texts(big.figure_))
    assert min(texts(wide.figure_)) >= PROJECTOR_MIN_PT and min(texts(clients.figure_)) >= PROJECTOR_MIN_PT
    # tick labels made later (at drawing) get the size too
    big.figure_.draw_without_rendering()
    assert min(t.label1.get_fontsize() for t in big.ax_.xaxis.get_major_ticks()) >= PROJECTOR_MIN_PT
    assert all(a <= b for a, b in zip(wide.figure_.get_size_inches(), PROJECTOR_MAX_SIZE))
    thin = [ln.get_linewidth() for ln in plain.ax_.get_lines()]
    thick = [ln.get_linewidth() for ln in big.ax_.get_lines()]
    assert all(b > 1.5 * a for a, b in zip(thin, thick))
    colours = {ln.get_color() for ln in big.figure_.findobj(Line2D)}
    assert not colours & {"tab:blue", "#1f77b4"}  # FedALA's blue, darkened
    assert any(np.allclose(gr_rgba(c), gr_rgba(CONTRAST["#1f77b4"])) for c in colours)


def gr_rgba(c):
    from matplotlib.colors import to_rgba

    return np.asarray(to_rgba(c))[:3]


def test_a_method_set_computes_each_distinct_run_once(tmp_path):
    app = ui.LectureApp(tmp_path / "store")
    settings = {**APP_SMALL, "rounds": 3}
    acc, *_, summary, status = app.train(["fedavg", "fedala", "fedavg+ala", "fedavg"], 1, **settings)
    assert list(summary["algorithm"]) == ["FedAvg", "FedALA"] and status.startswith("2 run(s) in")
    assert "Computed once: FedAvg+ALA is FedALA, FedAvg (the same run)." in status
    assert sorted(app.store.list()["algo"]) == ["fedala", "fedavg"]  # FedAvg+ALA is FedALA's run, stored once
    assert [ln.get_label() for ln in acc.axes[0].get_lines()] == ["FedAvg", "FedALA"]


def test_many_methods_get_a_bounded_palette_in_every_figure(tmp_path):
    from fedala_lab.figures.style import OTHERS
    from fedala_lab.webapp.tabs.train import HIGHLIGHT

    app = ui.LectureApp(tmp_path / "store")
    settings = {**APP_SMALL, "rounds": 2}
    algos = ["fedavg", "local", "fedala", "fedprox", "ditto", "fedrep", "partialfed", "fedamp"]
    _, _, _, ranked, *_ = app.train(algos, 1, **settings)
    per_client, spread = app.train_clients(algos, 1, **settings)
    from matplotlib.colors import to_hex

    grey = to_hex(OTHERS)
    # per client: the best few and the references in colour, the rest grey under one legend entry
    coloured = {to_hex(c.get_facecolor()[0]) for c in per_client.axes[0].collections[1:]} - {grey}
    assert len(coloured) <= HIGHLIGHT + 2
    legend = [t.get_text() for t in per_client.axes[0].get_legend().get_texts()]
    grey_entry = re.fullmatch(r"(\d+) others \(grey\)", legend[-1])
    assert grey_entry and int(grey_entry[1]) + len(legend) - 1 == len(algos) and len(legend) - 1 <= HIGHLIGHT + 2
    assert {"FedAvg", "Local"} <= {t.split(":")[0] for t in legend}  # the references always in colour
    for fig in (ranked, spread):
        faces = {to_hex(c) for coll in fig.axes[0].collections for c in coll.get_facecolor() if c[3] > 0}
        faces |= {to_hex(c) for coll in fig.axes[0].collections for c in coll.get_edgecolor() if c[3] > 0}
        assert grey in faces and len(faces - {grey}) <= HIGHLIGHT + 2


def test_fedprox_scenario_says_why_fedprox_wins_in_its_runs_numbers(tmp_path):
    from fedala_lab.webapp.settings import SCENARIO_FIELDS, scenario_values

    app = ui.LectureApp(tmp_path / "store")
    values, algos = scenario_values("fedprox")
    settings = {**APP_SMALL, **dict(zip(SCENARIO_FIELDS, values)), "rounds": 6}
    _, verdict, *_, summary, _ = app.train(algos, 1, **settings)
    final = summary.set_index("algorithm")["final acc % (pooled)"]
    runs = {a: app.store.find(ui.make_config(algo=a, **settings)) for a in algos}
    kept = 10 - runs["fedavg"].rounds["dropped"].mean()
    head = "Why FedProx wins here" if final["FedProx"] > final["FedAvg"] else "Here FedProx does not beat FedAvg"
    assert head in verdict and f"averages {kept:.0f} model" in verdict and "Tick *Local*" not in verdict
    assert f"FedProx {final['FedProx']:.2f} %, FedAvg {final['FedAvg']:.2f} %" in verdict
    assert "μ = 1" in verdict


def test_ablation_starts_with_s_and_names_what_p_found_when_the_store_has_it(tmp_path):
    from fedala_lab.webapp.tabs.ablation import ABLATION_VALUES, DEFAULT

    assert DEFAULT["param"] == "s" and next(iter(ABLATION_VALUES)) == "s"
    app = ui.LectureApp(tmp_path / "store")
    settings = {**APP_SMALL, "rounds": 2}
    *_, found, _ = app.ablation("s", "5,80", 1, **settings)
    assert "images through ALA per round at s = 5" in found and "The other sweep" not in found
    app.ablation("p", ABLATION_VALUES["p"], 1, **settings)
    *_, found, status = app.ablation("s", "5,80", 1, **settings)
    assert "**The other sweep, p** (from the run store): Best accuracy from" in found
    assert "2 served from the run store" in status


def test_runs_comparison_legend_stays_clear_of_the_axes(tmp_path):
    """Issue 48, item 4: two runs compared, their long labels drawn over the y label and the curves, and cut off."""
    from fedala_lab.experiments.runs import get_or_run

    app = ui.LectureApp(tmp_path / "store")
    for algo in ("local", "fedala"):
        get_or_run(ui.make_config(algo=algo, **{**APP_SMALL, "rounds": 3}), app.store, progress=False)
    listed, *_ = app.runs("")
    _, _, fig, *_ = app.runs(list(listed["name"]))
    fig.draw_without_rendering()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent(renderer)
    whole = fig.bbox
    assert whole.x0 <= legend.x0 and legend.x1 <= whole.x1 and whole.y0 <= legend.y0  # not cut off
    for part in (ax.bbox, ax.yaxis.label.get_window_extent(renderer), ax.xaxis.label.get_window_extent(renderer)):
        assert not legend.overlaps(part), (legend, part)


def test_every_figure_has_a_download_button_and_the_page_a_projector_toggle(tmp_path):
    """Every figure of the page (gr.Plot) has a download button under it, which gets the figure shown as a PNG
    file; ``--projector`` starts the page in projector mode, and each session's toggle is its own."""
    import base64
    import types

    from fedala_lab.webapp.widgets import png_file

    demo = ui.build_app(tmp_path / "store", projector=True)
    blocks = list(demo.blocks.values())
    plots = [b for b in blocks if isinstance(b, gr.Plot)]
    buttons = {b.elem_id for b in blocks if isinstance(b, gr.DownloadButton)}
    assert len(plots) >= 15 and {f"{p.elem_id}-download" for p in plots} <= buttons
    toggle = next(b for b in blocks if isinstance(b, gr.Checkbox) and b.elem_id == "projector")
    app = demo.lecture_app
    assert toggle.value is True and app.projecting(None) is True
    alice, bob = (types.SimpleNamespace(session_hash=h) for h in ("alice", "bob"))
    app.set_projecting(False, alice)
    assert app.projecting(alice) is False and app.projecting(bob) is True
    # the button's file: the PNG the page was sent, byte for byte
    fig, *_ = ui.LectureApp(tmp_path / "store").partition(**{k: APP_SMALL[k] for k in ui.DATA_FIELDS})
    shown = gr.Plot(format="png").postprocess(fig)
    got = png_file(shown)
    with open(got.value["path"], "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data == base64.b64decode(shown.plot.split(",", 1)[1])
    assert png_file(None).visible is False
