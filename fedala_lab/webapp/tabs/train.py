"""Train & compare: the ticked algorithms on the same data and settings. Accuracy and loss curves and a
summary; then how each client fares (its final accuracy per method, and their spread over clients)."""

from __future__ import annotations

import math
import time

import gradio as gr
import pandas as pd

from ...algorithms import registry
from ...analysis.tables import data_title
from ...config import algo_label
from ...errors import ConfigError
from ...experiments.runs import get_or_run, load_stored
from ..jobs import finished_status, job, run_label
from ..settings import (
    SCENARIO_FIELDS,
    SCENARIOS,
    TRAIN_ALGOS,
    TRAIN_ALGOS_INFO,
    make_config,
    scenario_notice,
    scenario_values,
    train_settings,
)
from ..widgets import Dropdown, Radio, plot, run_stop, table
from . import Panel


@job
def train(app, algos, settings, job):
    """Run (or load) every selected algorithm on the same data: accuracy curves (with many methods: the best few
    in colour), the methods ranked, loss curves, a summary, and what the runs say about federating at all.
    Stopped, it shows the finished runs and the stopped one's rounds so far."""
    from ...analysis.notes import curve_notes, stragglers_note
    from ...figures.curves import AccuracyCurveDisplay
    from ...figures.many import RankedAccuracyDisplay

    cfgs, merged = _configs(algos, settings)  # all validated before any work
    tic = time.perf_counter()
    got = app.fetch(job, cfgs, lambda store, callback: [get_or_run(c, store, progress=False, callback=callback)
                                                        for c in cfgs], side_by_side=True)
    runs = got.shown
    if not runs:  # stopped before a single round: what the page shows stays
        return *[gr.skip()] * 6, got.status
    labels = [run_label(r) for r in runs]
    refs = [lab for r, lab in zip(runs, labels) if r.config.algo in registry.with_role("reference", "no-federation")]
    acc = AccuracyCurveDisplay.from_runs(runs, metric="acc", labels=labels, highlight=HIGHLIGHT, keep=refs,
                                         title=f"Test accuracy per round ({data_title(cfgs[0].data)})")
    loss = AccuracyCurveDisplay.from_runs(runs, metric="test_loss", labels=labels, highlight=HIGHLIGHT, keep=refs)
    ranked = RankedAccuracyDisplay.from_runs(runs, labels=labels, title="Final accuracy, ranked (one seed)",
                                             highlight=HIGHLIGHT, keep=refs)
    cached = got.cached + [False] * (len(runs) - len(got.runs))
    found = stragglers_note(runs, labels) or verdict(ranked.ranking_)  # FedProx's setting: why FedProx wins
    return (acc.figure_, found, loss.figure_, ranked.figure_, "\n\n".join(curve_notes(runs, labels)),
            _summary(app, runs, cached), finished_status(got, time.perf_counter() - tic) + merged)


# With more methods than this on one plot, only the best few (and FedAvg and Local) are drawn in colour.
HIGHLIGHT = 4


def verdict(ranking: pd.DataFrame) -> str:
    """What the runs on screen say about federating, in their own numbers (final pooled accuracy, as
    ``RankedAccuracyDisplay.ranking_`` ranks them, best first): whether Local (no federation) is beaten,
    and by what."""

    final = dict(zip(ranking["label"], ranking["mean"]))  # in % (one run per label: its final accuracy)
    algo = dict(zip(ranking["label"], ranking["algo"]))
    ranked = list(ranking["label"])
    alone = registry.with_role("no-federation")
    local = next((lab for lab in ranked if algo[lab] in alone), None)
    fed = [lab for lab in ranked if algo[lab] not in alone]
    top = ", ".join(f"{lab} {final[lab]:.2f} %" for lab in ranked[:3])
    if local is None or not fed:
        text = f"**Final accuracy, best first:** {top}." + (
            "" if local is not None else " Tick *Local* (each client alone, no communication) to ask whether "
            "federating pays at all.")
    else:
        best = fed[0]
        beaten = [lab for lab in fed if final[lab] > final[local]]
        if not beaten:
            text = (f"**Here federating does not pay:** *Local* (each client alone, no communication) ends at "
                    f"**{final[local]:.2f} %**, the best federated method, {best}, at {final[best]:.2f} %: each "
                    "client's own images are enough for its few digits.")
        else:
            text = (f"**Federating pays here:** {best} ends at **{final[best]:.2f} %** against *Local*'s "
                    f"{final[local]:.2f} % (each client alone), {final[best] - final[local]:+.2f} points"
                    + (f"; {len(beaten)} of {len(fed)} federated methods beat Local." if len(fed) > 1 else "."))
        text += " One seed each: a small gap can flip with another seed (notebook 2 repeats over seeds)."
    return text
@job
def clients(app, algos, settings, job):
    """Each client's accuracy at the last round of every selected algorithm's run (drawn after :func:`train`,
    from the same runs as its curves): per client, and as a spread over clients. A run Stop interrupted is
    drawn at the round it stopped (from its checkpoint), labelled so; with no run at all (stopped before it
    started) the page keeps what it shows, as the curves do."""
    from ...figures.clients import ClientAccuracyDisplay, ClientSpreadDisplay

    runs = [r for r in (_stored(app, c) for c in _configs(algos, settings)[0]) if r is not None]
    if not runs:
        return gr.skip(), gr.skip()
    labels = [run_label(r) for r in runs]
    many = {"highlight": HIGHLIGHT, "keep": [lab for r, lab in zip(runs, labels)
                                             if r.config.algo in registry.with_role("reference", "no-federation")]}
    return (ClientAccuracyDisplay.from_runs(runs, labels=labels, **many).figure_,
            ClientSpreadDisplay.from_runs(runs, labels=labels, **many).figure_)


def _stored(app, cfg):
    """The finished run of ``cfg`` in the app's store, else what its checkpoint recorded (a stopped run)."""
    run = app.store.find(cfg)
    if run is None and app.store.checkpoint_for(cfg).is_file():
        run = load_stored(app.store, app.store.name_for(cfg))
    return run


def _configs(algos, settings) -> tuple[list, str]:
    """The configs of the ticked algorithms, each distinct run once: a name for another's composition (FedAvg+ALA
    is FedALA) asks for that one's run, and two ticks of one run are one. Also what the status line adds when
    some were merged ("" if none)."""
    cfgs, merged = {}, []
    for a in _algos(algos):
        name = registry.alias_for(a)
        cfg = make_config(algo=name, **settings)
        if cfg.key() in cfgs:
            merged.append(f"{algo_label(a)} is {algo_label(name)}" if name != a else algo_label(a))
        cfgs.setdefault(cfg.key(), cfg)
    said = f" Computed once: {', '.join(dict.fromkeys(merged))} (the same run)." if merged else ""
    return list(cfgs.values()), said


def _algos(algos) -> list[str]:
    if isinstance(algos, str):
        algos = algos.split(",")
    algos = [a.strip() for a in algos or [] if a.strip()]
    if not algos:
        raise ConfigError("algorithms", algos, "at least one algorithm ticked")
    return algos


def _pct(x) -> float | None:
    return None if x is None or math.isnan(x) else round(float(x), 2)


# The summary's columns and their widths (the run's folder name wraps in the widest). Accuracies are pooled:
# every test image of every client counted once (the per-client plot's legend gives the clients' mean).
SUMMARY = {"algorithm": "9%", "final acc % (pooled)": "8%", "best acc % (pooled)": "8%", "best round": "6%",
           "rounds": "6%", "status": "10%", "seconds": "6%", "MB up": "6%", "MB down": "6%", "source": "8%",
           "run": "27%"}
MB_DOWN = ("*MB down*: every client receives the model every round, also when only a share ρ trains and uploads, "
           "since every client is evaluated every round (as in the FedALA reference code).")


def _summary(app, runs, cached) -> pd.DataFrame:
    rows = []
    for run, hit in zip(runs, cached, strict=True):
        s = run.summary()
        rows.append({
            "algorithm": algo_label(s["algo"]),
            "final acc % (pooled)": _pct(s["final_acc"]),
            "best acc % (pooled)": _pct(s["best_acc"]),
            "best round": s["best_round"],
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
    def choose(name, *before):
        values, ticked = scenario_values(name)
        return [*values, ticked, scenario_notice(name, list(before))]

    with gr.Row(equal_height=False):
        with gr.Column(scale=4, min_width=360):
            scenario = Radio([(label, k) for k, (label, *_) in SCENARIOS.items()], value="teach", label="scenario",
                             elem_id="scenario", field="scenario")
            algos = Dropdown(TRAIN_ALGOS, value=SCENARIOS["teach"][2], multiselect=True, label="algorithms",
                             elem_id="algos", field="algos")
            gr.Markdown(TRAIN_ALGOS_INFO, elem_id="algos-info", elem_classes=["note"])
            run, stop, status = run_stop("train")
        with gr.Column(scale=7, min_width=480):
            found = gr.Markdown(elem_id="train-verdict", elem_classes=["note"])
            with gr.Row():  # one click from the default's answer to the scenarios that make the lecture's points
                pays = gr.Button(f"Show {SCENARIOS['collab'][0]} →", elem_id="train-collab", size="sm")
                prox = gr.Button(f"Show {SCENARIOS['fedprox'][0]} →", elem_id="train-fedprox", size="sm")
            acc_plot = plot(label="test accuracy", elem_id="train-acc-plot", elem_classes=["main-plot", "below-note"])
    with gr.Row():
        rank_plot = plot(label="methods ranked", elem_id="train-rank-plot")
        loss_plot = plot(label="test loss", elem_id="train-loss-plot")
    notes = gr.Markdown(elem_id="train-notes", elem_classes=["note"])
    summary = table(label="summary", elem_id="train-summary", columns=SUMMARY, column_widths=list(SUMMARY.values()),
                    max_height=900)
    gr.Markdown(MB_DOWN, elem_classes=["note"])
    gr.Markdown("How each client fares with the model it holds at the last round (FedAvg: the global "
                "model; FedALA and Local: its own).", elem_classes=["note"])
    with gr.Row():
        client_plot = plot(label="accuracy per client", elem_id="train-clients-plot", scale=3)
        spread_plot = plot(label="spread over clients", elem_id="train-spread-plot", scale=2)
    gr.Markdown("### Training settings (every tab uses them)")
    train_settings(settings)

    fields = [settings[k] for k in SCENARIO_FIELDS]
    # never silent: the line above the tabs says what changed for every tab
    scenario.input(choose, [scenario, *fields], fields + [algos, settings.notice], queue=False,
                   api_visibility="private")
    # one click from the default's answer to a scenario: choose it, then run it (go counts the clicks: its change,
    # after the settings have changed, starts the run)
    go = gr.Number(0, visible=False, elem_id="train-collab-go")
    for button, name in ((pays, "collab"), (prox, "fedprox")):
        button.click(lambda *before, name=name: [*choose(name, *before[:-1]), name, (before[-1] or 0) + 1],
                     [*fields, go], fields + [algos, settings.notice, scenario, go], queue=False,
                     api_visibility="private")
    return Panel("train", run, stop, status, [algos], [acc_plot, found, loss_plot, rank_plot, notes, summary],
                 triggers=[go.change], then=[("train_clients", [algos], [client_plot, spread_plot])])
