"""Train & compare: the ticked algorithms on the same data and settings. Accuracy and loss curves and a
summary; then how each client fares (its final accuracy per method, and their spread over clients)."""

from __future__ import annotations

import math
import time

import gradio as gr
import pandas as pd

from ...config import algo_label
from ...errors import ConfigError
from ...experiments.runs import get_or_run, load_stored
from ..jobs import finished_status, job, run_label
from ..settings import (
    LOCAL_NOTE,
    SCENARIO_FIELDS,
    SCENARIOS,
    TRAIN_ALGOS,
    TRAIN_ALGOS_INFO,
    make_config,
    scenario_notice,
    scenario_values,
    train_settings,
)
from ..widgets import CheckboxGroup, Radio, plot, run_stop, table
from . import Panel


@job
def train(app, algos, settings, job):
    """Run (or load) every selected algorithm on the same data; accuracy and loss curves, a summary.
    Stopped, it shows the finished runs and the stopped one's rounds so far."""
    from ...figures.curves import AccuracyCurveDisplay

    cfgs = [make_config(algo=a, **settings) for a in _algos(algos)]  # all validated before any work
    tic = time.perf_counter()
    got = app.fetch(job, cfgs, lambda store, callback: [get_or_run(c, store, progress=False, callback=callback)
                                                        for c in cfgs])
    runs = got.shown
    if not runs:  # stopped before a single round: what the page shows stays
        return gr.skip(), gr.skip(), gr.skip(), got.status
    labels = [run_label(r) for r in runs]
    acc = AccuracyCurveDisplay.from_runs(runs, metric="acc", labels=labels)
    loss = AccuracyCurveDisplay.from_runs(runs, metric="test_loss", labels=labels)
    cached = got.cached + [False] * (len(runs) - len(got.runs))
    return acc.figure_, loss.figure_, _summary(app, runs, cached), finished_status(got, time.perf_counter() - tic)


@job
def clients(app, algos, settings, job):
    """Each client's accuracy at the last round of every selected algorithm's run (drawn after :func:`train`,
    from the same runs as its curves): per client, and as a spread over clients. A run Stop interrupted is
    drawn at the round it stopped (from its checkpoint), labelled so; with no run at all (stopped before it
    started) the page keeps what it shows, as the curves do."""
    from ...figures.clients import ClientAccuracyDisplay, ClientSpreadDisplay

    runs = [r for r in (_stored(app, make_config(algo=a, **settings)) for a in _algos(algos)) if r is not None]
    if not runs:
        return gr.skip(), gr.skip()
    labels = [run_label(r) for r in runs]
    return (ClientAccuracyDisplay.from_runs(runs, labels=labels).figure_,
            ClientSpreadDisplay.from_runs(runs, labels=labels).figure_)


def _stored(app, cfg):
    """The finished run of ``cfg`` in the app's store, else what its checkpoint recorded (a stopped run)."""
    run = app.store.find(cfg)
    if run is None and app.store.checkpoint_for(cfg).is_file():
        run = load_stored(app.store, app.store.name_for(cfg))
    return run


def _algos(algos) -> list[str]:
    if isinstance(algos, str):
        algos = algos.split(",")
    algos = [a.strip() for a in algos or [] if a.strip()]
    if not algos:
        raise ConfigError("algorithms", algos, "at least one algorithm ticked")
    return algos


def _pct(x) -> float | None:
    return None if x is None or math.isnan(x) else round(float(x), 2)


# The summary's columns and their widths (the run's folder name wraps in the widest)
SUMMARY = {"algorithm": "9%", "best acc %": "7%", "best round": "6%", "final acc %": "7%", "rounds": "6%",
           "status": "11%", "seconds": "7%", "MB up": "6%", "MB down": "6%", "source": "8%", "run": "27%"}


def _summary(app, runs, cached) -> pd.DataFrame:
    rows = []
    for run, hit in zip(runs, cached, strict=True):
        s = run.summary()
        rows.append({
            "algorithm": algo_label(s["algo"]),
            "best acc %": _pct(s["best_acc"]),
            "best round": s["best_round"],
            "final acc %": _pct(s["final_acc"]),
            "rounds": s["rounds"],
            "status": f"stopped at round {s['rounds']}" if run.status == "partial" else run.status,
            "seconds": round(s["seconds"], 2),
            "MB up": round(s["bytes_up"] / 2**20, 2),
            "MB down": round(s["bytes_down"] / 2**20, 2),
            "source": "run store" if hit else "computed",
            "run": run.path.name if run.path else app.store.name_for(run.config),
        })
    return pd.DataFrame(rows, columns=list(SUMMARY))


def build(app, settings) -> Panel:
    scenario = Radio([(label, k) for k, (label, *_) in SCENARIOS.items()], value="teach", label="scenario",
                     elem_id="scenario", field="scenario")
    algos = CheckboxGroup(TRAIN_ALGOS, value=SCENARIOS["teach"][2], label="algorithms", elem_id="algos",
                          info=TRAIN_ALGOS_INFO, field="algos")
    train_settings(settings)

    def choose(name, *before):
        values, ticked = scenario_values(name)
        return [*values, ticked, scenario_notice(name, list(before))]

    fields = [settings[k] for k in SCENARIO_FIELDS]
    # never silent: the line above the tabs says what changed for every tab
    scenario.input(choose, [scenario, *fields], fields + [algos, settings.notice], queue=False,
                   api_visibility="private")
    run, stop, status = run_stop("train")
    with gr.Row():
        acc_plot = plot(label="test accuracy", elem_id="train-acc-plot")
        loss_plot = plot(label="test loss", elem_id="train-loss-plot")
    summary = table(label="summary", elem_id="train-summary", columns=SUMMARY, column_widths=list(SUMMARY.values()))
    gr.Markdown(LOCAL_NOTE, elem_id="train-local-note")
    gr.Markdown("How each client fares with the model it holds at the last round (FedAvg: the global "
                "model; FedALA and Local: its own).")
    with gr.Row():
        client_plot = plot(label="accuracy per client", elem_id="train-clients-plot", scale=3)
        spread_plot = plot(label="spread over clients", elem_id="train-spread-plot", scale=2)
    return Panel("train", run, stop, status, [algos], [acc_plot, loss_plot, summary],
                 then=[("train_clients", [algos], [client_plot, spread_plot])])
