"""Ablation: FedALA once per value of p (top blocks with ALA weights) or s (% of local data used to learn
them), everything else as set (paper Tables 1 and 6)."""

from __future__ import annotations

import time

import gradio as gr

from ...errors import ConfigError
from ...experiments.runs import get_or_run
from ..jobs import finished_status, job
from ..settings import make_config, whole
from ..widgets import PRIVATE, Radio, plot, run_stop, table
from . import Panel

# Sweeps offered (small: each value is one FedALA run of the current settings).
ABLATION_VALUES = {"p": "1,2,3", "s": "5,20,50,80,100"}
MAX_SWEEP = 8


def parse_values(param: str, values) -> list:
    """ "1,2,3" (or a list) → [1, 2, 3]: integers for p, numbers for s; at most MAX_SWEEP distinct values."""
    items = values.split(",") if isinstance(values, str) else list(values or [])
    out = []
    try:
        for v in items:
            if isinstance(v, str) and not v.strip():
                continue
            x = float(v)
            out.append(whole(x) if param == "p" else x)
    except (TypeError, ValueError):
        raise ConfigError("values", values, f"comma-separated numbers, e.g. {ABLATION_VALUES[param]}") from None
    out = sorted(set(out))
    if not 1 <= len(out) <= MAX_SWEEP:
        raise ConfigError("values", values, f"1 to {MAX_SWEEP} distinct values, e.g. {ABLATION_VALUES[param]}")
    return out


@job
def ablation(app, param, values, settings, job):
    """FedALA for each value of ``param`` (p or s), the rest as set: the paper's Tables 1/6 as a plot.
    Stopped, it draws the values finished so far."""
    from ...figures.ablation import AblationDisplay

    if param not in ABLATION_VALUES:
        raise ConfigError("param", param, "p or s")
    cfgs = [make_config(algo="fedala", **{**settings, param: v}) for v in parse_values(param, values)]
    tic = time.perf_counter()
    got = app.fetch(job, cfgs, lambda store, callback: [get_or_run(c, store, progress=False, callback=callback)
                                                        for c in cfgs],
                    labels=[f"FedALA {param}={getattr(c, param):g}" for c in cfgs])
    if not got.runs:  # nothing finished: what the page shows stays
        return gr.skip(), gr.skip(), got.status
    disp = AblationDisplay.from_runs(got.runs, param=param)
    return disp.figure_, disp.frame_.round(3), finished_status(got, time.perf_counter() - tic, "FedALA run(s)")


def build(app, settings) -> Panel:
    gr.Markdown("FedALA once per value of p (top blocks with ALA weights) or s (% of local data used to learn "
                "them), everything else as set (paper Tables 1 and 6).")
    with gr.Row():
        param = Radio([("p", "p"), ("s", "s")], value="p", label="sweep", elem_id="abl-param", field="param")
        values = gr.Textbox(ABLATION_VALUES["p"], label="values (comma-separated)", elem_id="abl-values")
    run, stop, status = run_stop("abl")
    abl_plot = plot(label="accuracy and cost", elem_id="abl-plot")
    frame = table(label="per value", elem_id="abl-table")
    param.change(lambda prm: ABLATION_VALUES.get(prm, ""), param, values, queue=False, **PRIVATE)
    return Panel("ablation", run, stop, status, [param, values], [abl_plot, frame])
