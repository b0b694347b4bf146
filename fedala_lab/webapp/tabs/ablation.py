"""Ablation: FedALA once per value of p (top blocks with ALA weights) or s (% of local data used to learn
them) and per seed, everything else as set (paper Tables 1 and 6): mean and 95 % interval over the seeds, and
whether each value differs from the page's own (paired by seed: :mod:`~fedala_lab.analysis.stats`)."""

from __future__ import annotations

import time

import gradio as gr
import pandas as pd

from ...analysis import stats
from ...errors import ConfigError
from ..jobs import finished_status, job
from ..settings import MAX_SEEDS, make_config, seed_count, whole
from ..widgets import PRIVATE, Radio, plot, run_stop, table, whole_slider
from . import Panel

# Sweeps offered (small: each value is one FedALA run of the current settings). s first: it shows ALA's
# trade-off (accuracy against the images ALA spends), where p's accuracies are within the seeds' spread on the
# teach data; the finding says so in the runs' numbers when the store holds the p sweep too.
ABLATION_VALUES = {"s": "5,20,50,80,100", "p": "1,2,3"}
DEFAULT = {"param": "s", "values": ABLATION_VALUES["s"], "seeds": 3}
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
def ablation(app, param, values, seeds, settings, job):
    """FedALA for each value of ``param`` (p or s), run seeds 0 … ``seeds`` − 1, the rest as set: the paper's
    Tables 1/6 as a plot, a table (mean and 95 % interval over the seeds) and sentences on what the differences
    mean: each value against the page's own value of ``param`` (the smallest value tried when that is not among
    them), paired by seed. Stopped, it draws the values finished so far (with all their seeds)."""
    from ...figures.ablation import AblationDisplay

    if param not in ABLATION_VALUES:
        raise ConfigError("param", param, "p or s")
    seeds = seed_count(seeds)
    cfgs = [make_config(algo="fedala", **{**settings, param: v, "seed": k})
            for v in parse_values(param, values) for k in range(seeds)]
    own = getattr(make_config(algo="fedala", **settings), param)  # the value the page is set to
    tic = time.perf_counter()
    got = app.fetch(job, cfgs, labels=[f"FedALA {param}={getattr(c, param):g}, seed {c.seed}" for c in cfgs])
    done = _whole_values(got.runs, param, seeds)
    if not done:  # no value finished with all its seeds: what the page shows stays
        return gr.skip(), gr.skip(), gr.skip(), got.status + " No value had finished all its seeds: nothing drawn."
    disp = AblationDisplay.from_runs(done, param=param)
    status = finished_status(got, time.perf_counter() - tic, "FedALA run(s)")
    if got.status:
        status += f" Drawn: the {len(disp.frame_)} value(s) that finished all their seeds."
    text = finding(disp.frame_, param, len(cfgs) // seeds, done, own) + other_sweep(app, param, seeds, settings)
    return disp.figure_, shown_table(disp.frame_, param), text, status


def other_sweep(app, param: str, seeds: int, settings: dict) -> str:
    """What the other default sweep (p when ``param`` is s, and the other way) found, when the app's store holds
    all its runs with these settings and seeds (after ``fedala-lab lecture prepare``, or once run): one click on
    it tells the rest. Empty otherwise; nothing is computed."""
    from ...analysis.ablation import ablation_frame

    other = next(k for k in ABLATION_VALUES if k != param)
    cfgs = [make_config(algo="fedala", **{**settings, other: v, "seed": k})
            for v in parse_values(other, ABLATION_VALUES[other]) for k in range(seeds)]
    runs = [app.store.find(c) for c in cfgs]
    if any(r is None for r in runs):
        return ""
    own = getattr(make_config(algo="fedala", **settings), other)
    return (f"\n\n**The other sweep, {other}** (from the run store): "
            + finding(ablation_frame(runs, other), other, runs=runs, own=own))


def _whole_values(runs, param: str, seeds: int) -> list:
    """The runs of the values that finished with every seed (a stopped sweep draws those)."""
    by = {}
    for r in runs:
        by.setdefault(getattr(r.config, param), []).append(r)
    return [r for rs in by.values() if len(rs) == seeds for r in rs]


def shown_table(frame: pd.DataFrame, param: str) -> pd.DataFrame:
    """The ablation frame with readable headers; the interval columns (half its width, or [low, high] for a
    bootstrap one) only when there are several seeds."""
    out = pd.DataFrame({param: frame[param]})
    several = frame["n_seeds"].min() > 1
    rows = frame.to_dict("records")
    for kind in ("best", "final"):
        out[f"{kind} acc %"] = frame[f"{kind}_mean"].round(2)
        if several:
            out[f"{kind} 95 % CI"] = [stats.interval_text(r[f"{kind}_mean"], r[f"{kind}_lo"], r[f"{kind}_hi"]) or "—"
                                      for r in rows]
    out["seeds"] = frame["n_seeds"]
    out[COST_COLUMNS[0]] = frame["ala_images"]
    out[COST_COLUMNS[1]] = (1000 * frame["ala_seconds"]).round(1)
    if "ala_weights" in frame:
        out["ALA weights"] = frame["ala_weights"]
    return out


# ALA's cost per value: counted (images through ALA, all clients, a normal round), and timed (varies with load)
COST_COLUMNS = ("ALA images per round (counted)", "ALA ms per round (timed)")


def finding(frame: pd.DataFrame, param: str, asked: int | None = None, runs=(), own=None) -> str:
    """Whether the values differ by more than the seeds do, with the numbers (``asked``: how many values the
    sweep had, when a stopped one drew fewer): each value's ``runs`` against those of the value ``own`` (the
    page's; the smallest value when ``own`` is not among them), paired by seed, in words."""
    best = frame.set_index(param)["best_mean"]
    if len(best) == 1:  # one value: nothing to compare, and no "0.00 points apart"
        v = best.index[0]
        head = (f"Only {param} = {v:g} finished with all its seeds before Stop" if asked and asked > 1 else
                f"One value, {param} = {v:g}")
        return (f"{head}: best accuracy {best.iloc[0]:.2f} % ({int(frame['n_seeds'].iloc[0])} seed(s)). Nothing to "
                "compare yet: " + ("Run again to finish the others (the finished runs are kept)." if asked and asked > 1
                                   else "give two or more values."))
    hi, lo = best.idxmax(), best.idxmin()
    gap = best.max() - best.min()
    head = (f"Best accuracy from {best.min():.2f} % ({param} = {lo:g}) to {best.max():.2f} % ({param} = {hi:g}): "
            f"{gap:.2f} points apart")
    cost = ""
    if param == "s" and "ala_images" in frame and frame["ala_images"].notna().all():
        images = frame.set_index(param)["ala_images"]
        cost = (f" ALA's cost grows with {param}: {int(images.iloc[0]):,} images through ALA per round at {param} = "
                f"{images.index[0]:g}, {int(images.iloc[-1]):,} at {param} = {images.index[-1]:g} (counted).")
    if frame["n_seeds"].min() < 2:
        return (head + ", one seed. A run's accuracy also moves from seed to seed, and with one seed that spread "
                "is not measured: close values, even equal ones, are not told apart. Set seeds to 3 to see it." + cost)
    ref = own if own in set(frame[param]) else frame[param].min()
    long = stats.seed_stats(stats.metrics_frame(runs, [param]), [param], against=ref, metrics=["best"])
    said = stats.verdicts(long, "best", labels={v: f"{param} = {v:g}" for v in frame[param]}, digits=2)
    return (f"{head}. Each value against {param} = {ref:g}" + (" (the page's)" if ref == own else "")
            + ", paired by seed (best accuracy):\n\n" + "\n".join(f"- {v}" for v in said)
            + ("\n\n" + cost.strip() if cost else ""))


def build(app, settings) -> Panel:
    with gr.Row(equal_height=False):
        with gr.Column(scale=4, min_width=340):
            gr.Markdown("FedALA once per value of s (% of local data used to learn ALA's weights) or p (top blocks "
                        "with ALA weights) and per seed (0, 1, …), everything else as set (paper Tables 1 and 6): "
                        "mean and 95 % interval over the seeds, and each value against the page's own, paired by "
                        "seed. The cost is counted (images through ALA), and timed. Start with s, ALA's trade-off; "
                        "then p (choose it, then Run).", elem_classes=["note"])
            with gr.Row():
                param = Radio([(k, k) for k in ABLATION_VALUES], value=DEFAULT["param"], label="sweep",
                              elem_id="abl-param", field="param")
                seeds = whole_slider(1, MAX_SEEDS, DEFAULT["seeds"], "seeds", "abl-seeds", field="seeds")
            values = gr.Textbox(DEFAULT["values"], label="values (comma-separated)", elem_id="abl-values")
            run, stop, status = run_stop("abl")
        with gr.Column(scale=7, min_width=480):
            abl_plot = plot(label="accuracy and cost", elem_id="abl-plot", elem_classes=["main-plot"])
            found = gr.Markdown(elem_id="abl-finding", elem_classes=["note"])
    frame = table(label="per value", elem_id="abl-table", columns=(DEFAULT["param"], "best acc %", "best 95 % CI", "final acc %",
                                                                    "final 95 % CI", "seeds", *COST_COLUMNS,
                                                                    "ALA weights"))
    param.change(lambda prm: ABLATION_VALUES.get(prm, ""), param, values, queue=False, **PRIVATE)
    return Panel("ablation", run, stop, status, [param, values, seeds], [abl_plot, frame, found])
