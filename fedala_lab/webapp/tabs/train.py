"""Train & compare: the ticked algorithms on the same data and settings, over a few seeds (3 by default),
computed side by side. The verdict over the seeds (:mod:`~fedala_lab.analysis.stats`: intervals, paired tests,
"could be noise" where it could), the methods ranked, accuracy and loss curves and a summary; then how each
client fares (its final accuracy per method, mean over the seeds, and their spread over clients)."""

from __future__ import annotations

import math
import time

import gradio as gr
import pandas as pd

from ...algorithms import registry
from ...analysis import stats
from ...analysis.tables import data_title
from ...config import algo_label
from ...errors import ConfigError
from ...experiments.runs import load_stored
from ..jobs import finished_status, job, run_label
from ..settings import (
    MAX_SEEDS,
    SCENARIO_FIELDS,
    SCENARIOS,
    TRAIN_ALGOS,
    TRAIN_ALGOS_INFO,
    make_config,
    scenario_notice,
    scenario_values,
    seed_count,
    train_settings,
)
from ..widgets import Dropdown, Radio, plot, run_stop, table, whole_slider
from . import Panel


@job
def train(app, algos, seeds, settings, job):
    """Run (or load) every selected algorithm on the same data, over ``seeds`` seeds (the seed setting and the
    next ones), side by side: accuracy curves of the first seed (with many methods: the best few in colour), the
    methods ranked over the seeds, loss curves, a summary, and the verdict over the seeds (:func:`verdict`).
    Stopped, it shows the finished runs and the stopped ones' rounds so far."""
    from ...analysis.notes import curve_notes, stragglers_note
    from ...figures.curves import AccuracyCurveDisplay
    from ...figures.many import RankedAccuracyDisplay

    cfgs, merged = _configs(algos, settings, seeds)  # all validated before any work
    several = len({c.seed for c in cfgs}) > 1
    tic = time.perf_counter()
    got = app.fetch(job, cfgs,
                    labels=[f"{algo_label(c.algo)}, seed {c.seed}" for c in cfgs] if several else None)
    runs = got.shown
    if not runs:  # stopped before a single round: what the page shows stays
        return *[gr.skip()] * 6, got.status
    labels = [run_label(r) for r in runs]
    first = min(c.seed for c in cfgs)  # the curves: the first seed's runs (the ranking and verdict: every seed's)
    one = [(r, lab) for r, lab in zip(runs, labels) if r.config.seed == first]
    one_runs, one_labels = [r for r, _ in one], [lab for _, lab in one]
    refs = [lab for r, lab in zip(runs, labels) if r.config.algo in references()]
    seed_note = f", seed {first}" if several else ""
    acc = AccuracyCurveDisplay.from_runs(one_runs, metric="acc", labels=one_labels, highlight=HIGHLIGHT, keep=refs,
                                         title=f"Test accuracy per round ({data_title(cfgs[0].data)}{seed_note})")
    loss = AccuracyCurveDisplay.from_runs(one_runs, metric="test_loss", labels=one_labels, highlight=HIGHLIGHT,
                                          keep=refs, title=f"Test loss per round{seed_note}" if several else None)
    ranked = RankedAccuracyDisplay.from_runs(runs, labels=labels, highlight=HIGHLIGHT, keep=refs,
                                             title=f"Final accuracy, ranked ({_seeds(cfgs)})")
    cached = got.cached + [False] * (len(runs) - len(got.runs))
    finished = [run_label(r) for r in got.runs]
    why = stragglers_note(got.runs, finished)  # FedProx's setting: why FedProx wins
    found, more = verdict(got.runs, finished, hint=not why)
    if why:  # one paragraph, the note then its paired test (which names FedAvg itself): short enough above the curves
        found = f"{why} {found.removeprefix(AGAINST)}".strip()
    return (acc.figure_, found, loss.figure_, ranked.figure_, "\n\n".join([*more, *curve_notes(one_runs, one_labels)]),
            _summary(app, runs, cached), finished_status(got, time.perf_counter() - tic) + merged)


# With more methods than this on one plot, only the best few (and FedAvg and Local) are drawn in colour.
HIGHLIGHT = 4
DEFAULT_SEEDS = 3  # the seeds slider's start: a verdict needs an interval, and one seed gives none
AGAINST = "**Against FedAvg:** "


def references() -> list[str]:
    """The methods the others are compared with (FedAvg, Local: their specs' roles), always drawn in colour."""
    return registry.with_role("reference", "no-federation")


def _seeds(cfgs) -> str:
    return _count(len({c.seed for c in cfgs}))


def _count(n: int) -> str:
    return "one seed" if n == 1 else f"{n} seeds"


def ranking(runs, labels) -> list[str]:
    """The labels best first by their runs' mean final pooled accuracy over seeds (as the ranked plot orders
    them): the order of the verdict and of the per-client plots."""
    from ...figures.many import RankedAccuracyDisplay, ranked_frame

    return list(RankedAccuracyDisplay(ranked_frame(runs, labels)).ranking_["label"])


def verdict(runs, labels, hint: bool = True) -> tuple[str, list[str]]:
    """What the finished runs on screen say, over their seeds (:mod:`~fedala_lab.analysis.stats`, final pooled
    accuracy in %), short enough to stand above the curves: the best federated method but FedAvg against FedAvg
    (Local when there is none) and the best federated method against *Local* (does federating pay?), each paired
    by seed with its interval and p-value, and "could be noise" where the interval holds 0 or p ≥ 0.05; one seed
    has no interval and names no winner. Without FedAvg and Local: the best three with their intervals. Without
    Local and with ``hint``: how to ask whether federating pays. Also the lines for below the plots: the
    per-client gains against Local, and what one seed cannot tell."""
    groups: dict[str, list] = {}
    for run, label in zip(runs, labels, strict=True):
        groups.setdefault(label, []).append(run)
    if not groups:
        return "", []
    frame = stats.groups_frame(groups)
    algo = {label: rs[0].config.algo for label, rs in groups.items()}
    order = ranking(runs, labels)
    n = max(len(rs) for rs in groups.values())
    reference, alone = registry.with_role("reference"), registry.with_role("no-federation")
    fedavg = next((lab for lab in order if algo[lab] in reference), None)
    local = next((lab for lab in order if algo[lab] in alone), None)
    federated = [lab for lab in order if algo[lab] not in alone]
    text, more = [], []
    if fedavg is not None and len(order) > 1:  # the best other federated method (Local has its own line below)
        best = next((lab for lab in federated if lab != fedavg), local)
        said, _ = _against(frame, best, fedavg)
        text.append(f"{AGAINST}{said}.")
    if local is not None and federated:
        said, row = _against(frame, federated[0], local)
        if n == 1:
            lead = "**Does federating pay? One seed cannot say:**"
        elif stats.is_noise(row):
            lead = "**Does federating pay? Not measurably here** (against *Local*, each client alone):"
        elif row["diff_mean"] > 0:
            lead = "**Federating pays here** (against *Local*, each client alone):"
        else:
            lead = "**Here federating does not pay:** *Local* (each client alone) is ahead:"
        text.append(f"{lead} {said}.")
        gains = stats.gain_table(frame, against=local)
        gains = gains[gains["label"] == federated[0]]
        if len(gains):
            more.append(stats.gain_words(gains.iloc[0], federated[0], local, digits=2) + ".")
    if not text:
        own = stats.seed_stats(frame, against=None, metrics=["final"]).set_index("label")
        top = ", ".join(f"{lab} {stats.format_ci(*own.loc[lab, ['mean', 'ci_lo', 'ci_hi']])} %" for lab in order[:3])
        text.append(f"**Final accuracy (pooled), {'best first, ' if n > 1 else ''}over {_count(n)}"
                    + (" (mean ± 95 % interval)" if n > 1 else "") + f":** {top}.")
    if hint and local is None:
        text.append("Tick *Local* (each client alone, no communication) to ask whether federating pays at all.")
    if n == 1:
        more.append(f"One seed each: no interval, so no winner is named. Set seeds to {DEFAULT_SEEDS} to see how much "
                    "a run moves from seed to seed.")
    return "\n\n".join(text), more


def _against(frame, label: str, reference: str) -> tuple[str, object]:
    """``label``'s runs against ``reference``'s, paired by seed, in words (:func:`stats.verdict_row`, p-values
    Holm-adjusted over every method compared with that reference), and the row of numbers it says."""
    long = stats.seed_stats(frame, against=reference, metrics=["final"])
    row = long[(long["label"] == label) & (long["metric"] == "final")].iloc[0]
    return stats.verdict_row(row, label, reference, digits=2), row


@job
def clients(app, algos, seeds, settings, job):
    """Each client's accuracy at the last round of every selected algorithm's runs (drawn after :func:`train`,
    from the same runs): per client, its mean over the seeds, the methods in the verdict's order, and as a
    spread over clients. A run Stop interrupted is drawn at the round it stopped (from its checkpoint), labelled
    so; with no run at all (stopped before it started) the page keeps what it shows, as the curves do."""
    from ...analysis.curves import seed_client_accuracy
    from ...figures.clients import ClientAccuracyDisplay, ClientSpreadDisplay

    cfgs = _configs(algos, settings, seeds)[0]
    runs = [r for r in (_stored(app, c) for c in cfgs) if r is not None]
    if not runs:
        return gr.skip(), gr.skip()
    labels = [run_label(r) for r in runs]
    place = {lab: i for i, lab in enumerate(ranking(runs, labels))}
    pairs = sorted(zip(runs, labels), key=lambda p: place[p[1]])  # stable: a method's seeds keep their order
    frame = seed_client_accuracy([r for r, _ in pairs], [lab for _, lab in pairs])
    many = {"highlight": HIGHLIGHT, "keep": [lab for r, lab in pairs if r.config.algo in references()]}
    over = f", mean of {_seeds(cfgs)}" if len({c.seed for c in cfgs}) > 1 else ""
    return (ClientAccuracyDisplay(frame, title=f"Accuracy of each client's model{over}" if over else None,
                                  **many).plot().figure_,
            ClientSpreadDisplay(frame, title=f"Spread over {frame['client'].nunique()} clients{over}" if over else None,
                                **many).plot().figure_)


def _stored(app, cfg):
    """The finished run of ``cfg`` in the app's store, else what its checkpoint recorded (a stopped run)."""
    run = app.store.find(cfg)
    if run is None and app.store.checkpoint_for(cfg).is_file():
        run = load_stored(app.store, app.store.name_for(cfg))
    return run


def _configs(algos, settings, seeds) -> tuple[list, str]:
    """The configs of the ticked algorithms over ``seeds`` seeds (the seed setting and the next ones), each
    distinct run once: a name for another's composition (FedAvg+ALA is FedALA) asks for that one's run, and two
    ticks of one run are one. Also what the status line adds when some were merged ("" if none)."""
    seeds = seed_count(seeds)
    cfgs, merged = {}, []
    for a in _algos(algos):
        name = registry.alias_for(a)
        cfg = make_config(algo=name, **settings)
        if cfg.key() in cfgs:
            merged.append(f"{algo_label(a)} is {algo_label(name)}" if name != a else algo_label(a))
        cfgs.setdefault(cfg.key(), cfg)
    said = f" Computed once: {', '.join(dict.fromkeys(merged))} (the same run)." if merged else ""
    return [c.replace(seed=c.seed + k) for c in cfgs.values() for k in range(seeds)], said


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
SUMMARY = {"algorithm": "9%", "seed": "4%", "final acc % (pooled)": "8%", "best acc % (pooled)": "8%", "best round": "6%",
           "rounds": "6%", "status": "10%", "seconds": "6%", "MB up": "6%", "MB down": "6%", "source": "8%",
           "run": "23%"}
MB_DOWN = ("*MB down*: every client receives the model every round, also when only a share ρ trains and uploads, "
           "since every client is evaluated every round (as in the FedALA reference code).")


def _summary(app, runs, cached) -> pd.DataFrame:
    rows = []
    for run, hit in zip(runs, cached, strict=True):
        s = run.summary()
        rows.append({
            "algorithm": algo_label(s["algo"]),
            "seed": run.config.seed,
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
            seeds = whole_slider(1, MAX_SEEDS, DEFAULT_SEEDS, "seeds (from the seed setting on)",
                                 "train-seeds", field="seeds")
            run, stop, status = run_stop("train")
            # under Run (and its status line): above it, Run would leave a 1280×800 screen with every method ticked
            gr.Markdown(TRAIN_ALGOS_INFO, elem_id="algos-info", elem_classes=["note"])
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
    return Panel("train", run, stop, status, [algos, seeds], [acc_plot, found, loss_plot, rank_plot, notes, summary],
                 triggers=[go.change], then=[("train_clients", [algos, seeds], [client_plot, spread_plot])])
