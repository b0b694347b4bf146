"""ALA inside: what ALA learns for one client (paper Fig. 2 and 3), from the FedALA run of the settings.
Fig. 2 shows the client's weights after the chosen round, with the rows of the labels it holds marked;
Fig. 3 its ALA loss, with the chosen round marked; moving the round slider redraws both."""

from __future__ import annotations

import time

import gradio as gr

from ...errors import ConfigError
from ...experiments.runs import tracked_run
from ..jobs import finished_status, job
from ..recorded import recorded_panel
from ..settings import DEFAULTS, ala_settings, make_config, p_max, whole
from ..widgets import mirror, plot, run_stop, table, whole_slider
from . import Panel

DEFAULT = {"client": 0, "round": DEFAULTS["rounds"]}  # the tab's own defaults: the last round's weights
# the W table's headers (ALAWeightsDisplay.summary's columns → what the page shows)
COLUMNS = {"param": "tensor", "shape": "shape", "weights": "ALA weights", "mean": "mean W",
           "at_0": "share of W at 0 (keeps the local value)", "at_1": "share of W at 1 (takes the global value)"}


@job
def ala(app, client, round_, settings, job):
    """Fig. 2 (the client's learned ALA weights after ``round_``) and Fig. 3 (its ALA loss) from the
    FedALA run of the current settings (the rounds done so far, when stopped)."""
    from ...data.federated import FederatedData
    from ...figures.ala import ALALossDisplay, ALAWeightsDisplay

    cfg = make_config(algo="fedala", **settings)
    client, round_ = whole(client), whole(round_)
    if not isinstance(round_, int) or not 2 <= round_ <= cfg.rounds:
        raise ConfigError("round", round_, f"a round from 2 (ALA skips round 1) to {cfg.rounds}")
    tic = time.perf_counter()
    got = app.fetch(job, [cfg], lambda store, callback: [tracked_run(cfg, client, store, callback=callback)])
    run = got.shown[0] if got.shown else None
    if run is None or run.summary()["rounds"] < 2:  # stopped before ALA learned anything
        return gr.skip(), gr.skip(), gr.skip(), got.status
    held = FederatedData.from_config(cfg.data).labels_held(client)
    weights = ALAWeightsDisplay.from_run(run, client, round_, held_labels=held)
    loss = ALALossDisplay.from_run(run, client, round_=weights.round_)
    summary = weights.summary().round(3)
    summary["shape"] = summary["shape"].map(lambda t: " × ".join(map(str, t)))
    summary = summary.rename(columns=COLUMNS)
    note = got.status or (
        f"Client {client} (holds labels {', '.join(map(str, held))}), ALA weights after round {weights.round_} "
        f"of {run.summary()['rounds']}; start phase {loss.start_epochs} epoch(s) in round 2"
        + (" (capped)" if client in run.capped_clients else "") + ". " + finished_status(got, time.perf_counter() - tic)
    )
    return weights.figure_, loss.figure_, summary, note


def build(app, settings) -> Panel:
    d = DEFAULTS
    with gr.Row(equal_height=False):
        with gr.Column(scale=4, min_width=340):
            gr.Markdown("What ALA learns for one client (paper Fig. 2 and 3), from the FedALA run of the current "
                        "settings. ALA's η, s and p here are those of *Train & compare*.", elem_classes=["note"])
            client = whole_slider(0, d["num_clients"] - 1, DEFAULT["client"], "client", "ala-client", field="client")
            round_ = whole_slider(2, d["rounds"], DEFAULT["round"], "round (ALA starts in round 2)", "ala-round",
                                  field="round")
            with gr.Accordion("ALA's η, s and p (the same as on Train & compare)", open=False, elem_id="ala-settings"):
                mine = ala_settings("ala-")
            for widget, name in zip(mine, ("eta", "s", "p")):
                mirror(widget, settings[name])
            run, stop, status = run_stop("ala")
        with gr.Column(scale=7, min_width=480):
            weights_plot = plot(label="ALA weights W (Fig. 2)", elem_id="ala-weights-plot", elem_classes=["main-plot"])
    with gr.Row():
        loss_plot = plot(label="ALA loss (Fig. 3)", elem_id="ala-loss-plot")
        summary = table(label="W per tensor", elem_id="ala-table", columns=COLUMNS.values())
    settings.followers.add(settings["model"], mine[2], p_max, lo=1, event="change")  # as Train & compare's p
    recorded_panel("fig2", "The paper's setting, recorded: Fig. 2 on real MNIST Dir(0.1) with the paper's CNN")
    recorded_panel("fig3", "The paper's setting, recorded: Fig. 3 on real MNIST with the paper's CNN")
    settings.followers.add(settings["num_clients"], client, lambda n: n - 1, event="change")
    settings.followers.add(settings["rounds"], round_, lambda t: max(t, 2), lo=2)
    return Panel("ala", run, stop, status, [client, round_], [weights_plot, loss_plot, summary],
                 triggers=[round_.release])
