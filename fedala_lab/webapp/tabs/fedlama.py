"""FedLAMA: FedAvg every τ0 and every φ·τ0 local steps against FedLAMA(τ0, φ), all with the same local
steps (experiments.plans.comparison_configs): accuracy against the bytes each uploads.

The tab's defaults are the ``teach-fedlama`` preset (τ0 = 5, φ = 2, 100 rounds, the authors' interval rule),
chosen so that the saving shows (measured over seeds, experiments/presets.py). A round here is τ0 local steps,
not an epoch, so the tab has its own rounds; the data, learning rate, batch size, model, join ratio and seed
are the shared ones. Every run's accuracy is read on a global model: FedAvg's, and FedLAMA's server model
(``lama_eval="server"``: every layer as last averaged)."""

from __future__ import annotations

import time

import gradio as gr
import pandas as pd

from ...algorithms import registry
from ...errors import ConfigError
from ...experiments.plans import comparison_configs
from ...experiments.presets import preset
from ...experiments.runs import comparison_runs
from ..jobs import finished_status, job
from ..settings import DATA_FIELDS, make_config, whole
from ..widgets import Radio, plot, run_stop, table, whole_slider
from . import Panel

_PRESET = preset("teach-fedlama")
RULES = {"authors": "the authors' code: the layer where δ_l reaches 1 − λ_l is relaxed too",
         "spec": "the paper's text: layers are relaxed while δ_l < 1 − λ_l"}
RULE_NAMES = {"authors": "the authors' rule", "spec": "the paper's rule"}
SHARED = ("model", "lr", "batch_size", "join_ratio", "seed")  # of TRAIN_FIELDS, the ones this tab takes
RULE_CHOICES = {"authors": "the authors' code", "spec": "the paper's text"}
# the table's columns: frame column → header
# Accuracies are read where every run evaluates (a fair comparison of runs with different rounds); the run's
# own best over all its rounds, which the Runs tab lists, is beside them, named so.
COLUMNS = {"label": "method", "final_acc": "final acc % (last step all evaluate)", "bytes_up_mb": "upload MB",
           "comm_pct": "upload % of FedAvg(τ0)", "bytes_down_mb": "download MB",
           "best_acc": "best acc % (steps all evaluate)", "best_acc_all": "best acc % (its own rounds, as on Runs)",
           "steps_per_round": "local steps per round", "phi": "φ", "rounds": "rounds", "total_steps": "local steps"}


@job
def fedlama(app, tau0, phi, with_ala, rule, lama_rounds, settings, job):
    """FedAvg(τ0), FedAvg(φ·τ0) and FedLAMA(τ0, φ) with interval rule ``rule`` ("authors" or "spec"), each
    ``lama_rounds`` rounds of τ0 local SGD steps (the shared ``rounds`` is the Train tab's, in epochs, and not
    used here): accuracy against the bytes each uploads (FedLAMA's Tables 1–4 as curves), the table, and a
    sentence saying what was measured. ``with_ala`` adds FedALA and FedLAMA+ALA."""
    from ...figures.fedlama import CommAccuracyDisplay

    if not isinstance(with_ala, bool):  # Gradio passes a checkbox's value on as sent: "false" would be true
        raise ConfigError("with_ala", with_ala, "true or false")
    if rule not in RULES:
        raise ConfigError("rule", rule, " or ".join(map(repr, RULES)))
    # a round is τ0 local steps, with reshuffling: the teach-fedlama preset (experiments/presets.py)
    # the shared settings the tab names (the data, model, lr, batch size, join ratio, seed); the rest is the
    # preset's: its rounds are τ0 steps, and stragglers (a scenario's) have no meaning under FedLAMA's intervals
    shared = {k: v for k, v in settings.items() if k in DATA_FIELDS + SHARED}
    base = make_config(algo="fedlama", preset_name="teach-fedlama", tau0=tau0, phi=phi, lama_rule=rule,
                       rounds=whole(lama_rounds), **shared)
    cfgs = comparison_configs(base, with_ala=with_ala)
    tic = time.perf_counter()
    got = app.fetch(job, cfgs.values(), lambda store, callback: comparison_runs(
        base, with_ala=with_ala, store=store, callback=callback).values(), labels=list(cfgs))
    if got.status:  # stopped: the comparison needs every run to the end
        return gr.skip(), gr.skip(), gr.skip(), got.status
    disp = CommAccuracyDisplay.from_runs(dict(zip(cfgs, got.runs, strict=True)),
                                         title=f"Accuracy vs upload, FedLAMA with {RULE_NAMES[rule]}")
    return disp.figure_, shown_table(disp.frame_), finding(disp.frame_, base), \
        finished_status(got, time.perf_counter() - tic)


def shown_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The comparison frame with the bytes in MB and readable headers."""
    f = frame.assign(bytes_up_mb=frame["bytes_up"] / 2**20, bytes_down_mb=frame["bytes_down"] / 2**20)
    return f[list(COLUMNS)].round(2).rename(columns=COLUMNS)


def finding(frame: pd.DataFrame, base) -> str:
    """What this comparison measured, in a sentence: FedLAMA's upload and final accuracy against FedAvg(τ0)'s,
    and FedAvg(φτ0)'s, with the rule's name and the model whose accuracy is read."""
    rows = {r.label: r for r in frame.itertuples(index=False)}
    ref = next(r for r in rows.values() if r.reference)
    lama = next(r for r in rows.values() if r.algo == "fedlama")
    longer = next((r for r in rows.values() if r.algo in registry.with_role("reference") and not r.reference), None)
    diff = lama.final_acc - ref.final_acc
    text = (f"**{lama.label}, {RULE_NAMES[base.lama_rule]}:** uploaded **{lama.comm_pct:.1f} %** of "
            f"{ref.label}'s bytes ({lama.bytes_up / 2**20:.1f} MB against {ref.bytes_up / 2**20:.1f} MB) and ended "
            f"at **{lama.final_acc:.2f} %** against {ref.final_acc:.2f} % ({diff:+.2f} points)")
    if longer is not None:
        text += (f"; {longer.label}, which uploads {longer.comm_pct:.0f} %, ended at {longer.final_acc:.2f} % "
                 f"({longer.final_acc - ref.final_acc:+.2f})")
    step = lama.final_step
    text += (f". Final accuracy: local step {step}, the last step every run evaluates (seed {base.seed}). "
             "Accuracy is that of a global model on every client's test split: FedAvg's, and FedLAMA's server "
             "model (every layer as last averaged)")
    if any(registry.resolve(r.algo).uses("ala") for r in rows.values()):
        text += "; FedALA's and FedLAMA+ALA's are each client's own model (FedLAMA+ALA's at window starts only)"
    return text + "."


def build(app, settings) -> Panel:
    p = _PRESET
    with gr.Row(equal_height=False):
        with gr.Column(scale=4, min_width=340):
            with gr.Row():
                tau0 = whole_slider(1, 50, p.tau0, "τ0 (local steps per round)", "tau0", field="tau0")
                phi = whole_slider(1, 8, p.phi, "φ (long interval = φ·τ0)", "phi", field="phi")
            rounds = whole_slider(1, 400, p.rounds, "rounds (of τ0 steps)", "lama-rounds", field="rounds")
            rule = Radio([(v, k) for k, v in RULE_CHOICES.items()], value=p.lama_rule, label="interval rule",
                         elem_id="lama-rule", field="rule")
            with_ala = gr.Checkbox(False, label="also FedALA and FedLAMA+ALA", elem_id="lama-ala")
            run, stop, status = run_stop("lama")
        with gr.Column(scale=7, min_width=480):
            lama_plot = plot(label="accuracy vs upload", elem_id="lama-plot", elem_classes=["main-plot"])
            found = gr.Markdown(elem_id="lama-finding", elem_classes=["note"])
            gr.Markdown(
                "FedLAMA averages each layer every τ0 or φ·τ0 local steps, by how much the clients disagree on it; "
                "against FedAvg every τ0 and every φ·τ0 steps, all with the same local steps. A round here is τ0 "
                "steps (its own rounds); data, learning rate, batch size, model, join ratio and seed are the "
                "shared ones. Accuracy: a global model's (FedLAMA's server model). The FedLAMA paper reports up "
                "to 70 % less communication on non-IID data.", elem_id="lama-intro", elem_classes=["note"])
    frame = table(label="per method", elem_id="lama-table", columns=COLUMNS.values())
    gr.Markdown("\n".join(f"- *{RULE_NAMES[k]}*: {v}" for k, v in RULES.items()), elem_classes=["note"])
    return Panel("fedlama", run, stop, status, [tau0, phi, with_ala, rule, rounds], [lama_plot, frame, found])
