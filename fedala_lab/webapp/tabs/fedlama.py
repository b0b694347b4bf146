"""FedLAMA: FedAvg every τ0 and every φ·τ0 local steps against FedLAMA(τ0, φ), all with the same local
steps (experiments.plans.comparison_configs): accuracy against the communication each needs."""

from __future__ import annotations

import time

import gradio as gr

from ...errors import ConfigError
from ...experiments.plans import comparison_configs
from ...experiments.runs import comparison_runs
from ..jobs import finished_status, job
from ..settings import make_config
from ..widgets import plot, run_stop, table, whole_slider
from . import Panel

COLUMNS = ["label", "final_acc", "comm_pct", "best_acc", "steps_per_round", "phi", "rounds", "total_steps"]


@job
def fedlama(app, tau0, phi, with_ala, settings, job):
    """FedAvg(τ0), FedAvg(φ·τ0) and FedLAMA(τ0, φ) with the same local SGD steps: accuracy against the
    communication each needs (FedLAMA's Tables 1–4 as curves). ``with_ala`` adds FedALA and
    FedLAMA+ALA."""
    from ...figures.fedlama import CommAccuracyDisplay

    if not isinstance(with_ala, bool):  # Gradio passes a checkbox's value on as sent: "false" would be true
        raise ConfigError("with_ala", with_ala, "true or false")

    # the teach-fedlama preset: a round is τ0 local steps, with reshuffling (see experiments/presets.py)
    base = make_config(algo="fedlama", preset_name="teach-fedlama", tau0=tau0, phi=phi, **settings)
    cfgs = comparison_configs(base, with_ala=with_ala)
    tic = time.perf_counter()
    got = app.fetch(job, cfgs.values(), lambda store, callback: comparison_runs(
        base, with_ala=with_ala, store=store, callback=callback).values(), labels=list(cfgs))
    if got.status:  # stopped: the comparison needs every run to the end
        return gr.skip(), gr.skip(), got.status
    disp = CommAccuracyDisplay.from_runs(dict(zip(cfgs, got.runs, strict=True)))
    frame = disp.frame_[[c for c in COLUMNS if c in disp.frame_.columns]].round(2)
    return disp.figure_, frame, finished_status(got, time.perf_counter() - tic)


def build(app, settings) -> Panel:
    gr.Markdown("FedLAMA averages each layer every τ0 or φ·τ0 local steps, by how much the clients disagree on "
                "it. Compared with FedAvg every τ0 and every φ·τ0 steps, all with the same local steps (a round "
                "is τ0 steps here; data reshuffled each round).")
    with gr.Row():
        tau0 = whole_slider(1, 50, 10, "τ0 (local steps per round)", "tau0", field="tau0")
        phi = whole_slider(1, 8, 2, "φ (long interval = φ·τ0)", "phi", field="phi")
        with_ala = gr.Checkbox(False, label="also FedALA and FedLAMA+ALA", elem_id="lama-ala")
    run, stop, status = run_stop("lama")
    lama_plot = plot(label="accuracy vs communication", elem_id="lama-plot")
    frame = table(label="per method", elem_id="lama-table")
    return Panel("fedlama", run, stop, status, [tau0, phi, with_ala], [lama_plot, frame])
