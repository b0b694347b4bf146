"""Runs: what the app's own run store holds (finished, diverged, and stopped runs waiting to be resumed),
filtered; several reloaded at once to compare (their accuracy curves on one plot, a table, and in words over
seeds: runs alike but for their seed are one group, each group against FedAvg's, paired by seed).

Only names the store lists are reloaded (experiments.runs.load_stored, which goes through the store's own
refusal of anything with a path in it): nothing outside the store can be reached.
"""

from __future__ import annotations

import json
from datetime import datetime

import gradio as gr
import pandas as pd

from ...algorithms import registry
from ...analysis import stats
from ...analysis.tables import run_settings, setting_label
from ...config import algo_label
from ...errors import ConfigError, DataError, short_repr
from ...experiments.runs import load_stored, stored_runs
from ..jobs import friendly, run_label
from ..settings import DATASET_CHOICES, PARTITION_CHOICES
from ..widgets import LIGHT, PRIVATE, Dropdown, plot, table

ANY = ("any", "")
ALGORITHM_FILTER = [ANY] + [(registry.label(algo), algo) for algo in registry.names()]
DATASET_FILTER = [ANY] + DATASET_CHOICES
PARTITION_FILTER = [ANY] + PARTITION_CHOICES
STATUS_FILTER = [ANY, ("complete", "complete"), ("diverged", "diverged"), ("stopped", "stopped")]
# The columns of the list and of the comparison, with their widths (the run's folder name wraps in its own)
LISTED = {"date": "9%", "algorithm": "8%", "data": "9%", "clients": "7%", "settings": "19%", "seed": "5%",
          "rounds": "6%", "status": "9%", "best acc %": "6%", "final acc %": "6%", "name": "16%"}
COMPARED = {"#": "3%", "algorithm": "8%", "data": "9%", "clients": "7%", "settings": "18%", "seed": "5%",
            "rounds": "6%", "status": "9%", "best acc %": "6%", "best round": "6%", "final acc %": "6%", "run": "17%"}


@friendly
def runs(app, name="", algorithm="", dataset="", partition="", status="", text="", request: gr.Request = None):
    """List the app's run store (filtered by algorithm, dataset, partition, status and any text); with
    ``name`` (a run's name, or a list of them), reload those runs: their accuracy curves on one plot, a
    table comparing them, the summary and settings of the last one, and what they say over seeds in words
    (:func:`over_seeds`). (``request``: the session, whose projector mode the plot is drawn in.)"""
    from ...figures.curves import AccuracyCurveDisplay

    names = _names(name)
    if text is not None and not isinstance(text, str):
        raise ConfigError("text", text, "a text to look for in the list (or empty)")
    overview = stored_runs(app.store)
    listing = _listing(overview)
    keep = _matches(overview, listing, algorithm, dataset, partition, status, text)
    known = set(listing["name"])
    for n in names:
        if n not in known:
            raise DataError(f"{short_repr(n)} is not a run name in the app's run store (no finished run and no "
                            "checkpoint of that name)")
    offered = list(dict.fromkeys(list(listing.loc[keep, "name"]) + names))
    by_name = dict(zip(overview["name"], overview["config"]))
    labels = dict(zip(offered, distinct([by_name.get(n) for n in offered], offered)))
    selection = gr.Dropdown(choices=[(labels[n], n) for n in offered], value=names, multiselect=True)
    shown = listing[keep].reset_index(drop=True)
    if not names:
        return shown, selection, None, {}, pd.DataFrame(columns=list(COMPARED)), ""
    loaded = [load_stored(app.store, n) for n in names]
    legend = distinct([r.config for r in loaded], names, status=[run_label(r) for r in loaded])
    fig = AccuracyCurveDisplay.from_runs(loaded, labels=[f"{i}. {lab}" for i, lab in enumerate(legend, 1)],
                                         title=f"Test accuracy of {len(loaded)} run(s) from the store").figure_
    last = loaded[-1]
    details = _json_safe({"name": names[-1], "summary": last.summary(), "config": last.config.to_dict()})
    return shown, selection, fig, details, _compared(names, loaded), over_seeds(loaded)


def over_seeds(loaded) -> str:
    """The compared runs over seeds, in words: the finished runs grouped by everything but their seed, each group
    against FedAvg's (else the first picked), paired by seed, on the final pooled accuracy
    (:func:`~fedala_lab.analysis.stats.verdicts`; "one seed: no interval" for one), and client by client where
    the data are the same; a single group's mean with its interval."""
    done = [r for r in loaded if r.status == "complete"]
    left = len(loaded) - len(done)
    groups: dict[str, list] = {}
    for r in done:  # one group per config but its seed, in the order picked
        groups.setdefault(json.dumps(_flat(r.config.replace(seed=0)), sort_keys=True, default=str), []).append(r)
    if not groups:
        return "No finished run picked: nothing to say over seeds." if loaded else ""
    labels = _group_labels([runs[0].config.replace(seed=0) for runs in groups.values()])
    named = dict(zip(labels, groups.values()))
    ref = next((lab for lab, runs in named.items() if runs[0].config.algo in registry.with_role("reference")),
               labels[0])
    frame = stats.groups_frame(named)
    long = stats.seed_stats(frame, against=ref if len(named) > 1 else None, metrics=["final"])
    lines = (stats.verdicts(long, "final") if len(named) > 1 else
             [stats.interval_words(long.iloc[0], labels[0])])
    if len(named) > 1:
        gains = stats.gain_table(frame, against=ref)
        lines += [stats.gain_words(g, g["label"], ref) for g in gains.to_dict("records")]
    head = "**Over seeds** (final pooled accuracy; runs alike but for their seed make one group"
    head += f"; {left} unfinished run(s) left out):" if left else "):"
    return head + "\n\n" + "\n".join(f"- {line}" for line in lines)


def _group_labels(cfgs) -> list[str]:
    """A name per group: its algorithm, then every setting all the groups have and in which they differ (a
    setting only one method has, as FedALA's η, does not tell FedALA from FedAvg: the algorithm does)."""
    flat = [_flat(c) for c in cfgs]
    keys = [k for k in flat[0] if k not in ("algo", "seed") and all(k in f for f in flat)
            and len({repr(f[k]) for f in flat}) > 1]
    out = [", ".join([algo_label(c.algo), *(f"{k} {f[k]}" for k in keys)]) for c, f in zip(cfgs, flat)]
    return [lab if out.count(lab) == 1 else f"{lab} ({i})" for i, lab in enumerate(out, 1)]


def distinct(cfgs, names, status=None) -> list[str]:
    """A label per run that tells runs apart: the algorithm (or ``status``, e.g. "FedALA (stopped at round 2)"),
    the data, and every setting in which the runs listed together differ (seed, η, rounds…); runs equal in
    all of these (never two of one store) get their name's key."""
    flat = [_flat(c) for c in cfgs]
    keys = [k for k in dict.fromkeys(k for f in flat for k in f)
            if k not in ("algo", "data") and len({repr(f.get(k)) for f in flat}) > 1]
    out = []
    for i, (cfg, f) in enumerate(zip(cfgs, flat)):
        head = (status[i] if status else algo_label(cfg.algo) if cfg else "?")
        parts = [head, setting_label(cfg) if cfg else "?"]
        parts += [f"{k} {f[k]}" for k in keys if k in f]
        out.append(", ".join(parts))
    return [lab if out.count(lab) == 1 else f"{lab} ({name.rsplit('-', 1)[-1]})"
            for lab, name in zip(out, names)]


def _flat(cfg) -> dict:
    """A config's fields as the labels name them (data fields by their own names); empty for None."""
    if cfg is None:
        return {}
    d = cfg.canonical() if hasattr(cfg, "canonical") else cfg.to_dict()
    data = d.pop("data", {})
    d.update({("data_seed" if k == "seed" else k): v for k, v in data.items() if k not in ("root", "content")})
    return d


def _json_safe(value):
    """What the JSON view can carry: integers beyond 64 bits (a seed a script stored) as text."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**63:
        return str(value)
    return value


def _names(name) -> list[str]:
    """The run names asked for: one name, or a list of them (empty ones dropped); anything else is refused."""
    names = [name] if isinstance(name, str) else name if isinstance(name, (list, tuple)) else None
    if name is not None and (names is None or not all(isinstance(n, str) for n in names)):
        raise ConfigError("name", name, "a run name from the list, or a list of them")
    return [n for n in names or [] if n]


def _status(row) -> str:
    return f"stopped at round {int(row.rounds_done)}" if row.status == "stopped" and pd.notna(row.rounds_done) \
        else str(row.status)


def _local(stamp: pd.Timestamp) -> datetime:
    """A store's time (UTC) in this machine's time zone, as the lecturer's clock shows it."""
    return datetime.fromtimestamp(stamp.timestamp())


def _listing(overview: pd.DataFrame) -> pd.DataFrame:
    """The store's runs as the page lists them (newest first)."""
    rows = []
    for r in overview.itertuples(index=False):
        cfg = r.config
        rows.append({
            "date": _local(r.modified).strftime("%Y-%m-%d %H:%M"),
            "algorithm": algo_label(cfg.algo) if cfg else "?",
            "data": setting_label(cfg) if cfg else "?",
            "clients": cfg.data.num_clients if cfg else None,
            "settings": run_settings(cfg) if cfg else "",
            "seed": _json_safe(cfg.seed) if cfg else None,  # one bad folder must not break the list
            "rounds": cfg.rounds if cfg else None,
            "status": _status(r),
            "best acc %": None if pd.isna(r.best_acc) else round(float(r.best_acc), 2),
            "final acc %": None if pd.isna(r.final_acc) else round(float(r.final_acc), 2),
            "name": r.name,
        })
    return pd.DataFrame(rows, columns=list(LISTED))


def _matches(overview, listing, algorithm, dataset, partition, status, text) -> pd.Series:
    """Which listed runs pass the filters (an empty filter passes everything)."""
    cfgs = overview["config"]
    keep = pd.Series(True, index=listing.index)
    for wanted, of in ((algorithm, lambda c: c.algo), (dataset, lambda c: c.data.dataset),
                       (partition, lambda c: c.data.partition)):
        if wanted:
            keep &= cfgs.map(lambda c, of=of, wanted=wanted: c is not None and of(c) == wanted)
    if status:
        keep &= overview["status"] == status
    if text and text.strip() and len(listing):
        # every cell as text, empty ones (a diverged run has no accuracy) as nothing rather than NaN
        haystack = listing.apply(lambda col: col.map(lambda v: "" if pd.isna(v) else str(v))).agg(" ".join, axis=1)
        haystack = haystack.str.lower()
        keep &= haystack.str.contains(text.strip().lower(), regex=False)
    return keep


def _compared(names, loaded) -> pd.DataFrame:
    rows = []
    for i, (name, run) in enumerate(zip(names, loaded), 1):
        s, cfg = run.summary(), run.config
        rows.append({"#": i, "algorithm": algo_label(cfg.algo), "data": setting_label(cfg),
                     "clients": cfg.data.num_clients, "settings": run_settings(cfg), "seed": _json_safe(cfg.seed),
                     "rounds": f"{s['rounds']} of {cfg.rounds}" if run.status == "partial" else cfg.rounds,
                     "status": f"stopped at round {s['rounds']}" if run.status == "partial" else run.status,
                     "best acc %": round(s["best_acc"], 2), "best round": s["best_round"],
                     "final acc %": round(s["final_acc"], 2), "run": name})
    return pd.DataFrame(rows, columns=list(COMPARED))


def toggle(selected, evt: gr.SelectData):
    """A click on a listed run adds it to the runs compared (or takes it out again)."""
    name = evt.row_value[-1] if evt.row_value else None
    selected = list(selected or [])
    if name:
        selected = [n for n in selected if n != name] if name in selected else selected + [name]
    return gr.Dropdown(value=selected, multiselect=True)


def build(app, demo) -> tuple[tuple[list, list], tuple]:
    """The tab; returns (the inputs, the outputs) of :func:`runs`, to refresh it after every job, and the
    "Prepare the lecture" button with its status line (wired by the page: it computes like a tab's Run)."""
    with gr.Row(equal_height=True):
        # the note, then what "Prepare the lecture" did (how long it took, what it computed)
        prepared = gr.Markdown("The app's own run store, read-only: finished, diverged and stopped runs (Run again "
                               "resumes a stopped one); click runs in the list to compare them. *Prepare the lecture*: "
                               "every tab's defaults and scenarios computed into it, then every default click is "
                               "instant.", elem_id="runs-prepared", elem_classes=["note"], scale=5)
        prepare = gr.Button("Prepare the lecture", elem_id="runs-prepare", scale=0, min_width=180)
    with gr.Row():
        algorithm = Dropdown(ALGORITHM_FILTER, value="", label="algorithm", elem_id="runs-algo", min_width=140,
                             field="algorithm")
        dataset = Dropdown(DATASET_FILTER, value="", label="dataset", elem_id="runs-dataset", min_width=140,
                           field="dataset")
        partition = Dropdown(PARTITION_FILTER, value="", label="partition", elem_id="runs-partition", min_width=140,
                             field="partition")
        status = Dropdown(STATUS_FILTER, value="", label="status", elem_id="runs-status", min_width=140,
                          field="status")
        text = gr.Textbox("", label="text", placeholder="any text in the list, e.g. lr 0.05", elem_id="runs-text",
                          min_width=160)
        refresh = gr.Button("Refresh", elem_id="runs-refresh", scale=0, min_width=110)
    listing = table(label="runs (click one to compare it)", elem_id="runs-table", max_height=280, columns=LISTED,
                    column_widths=list(LISTED.values()))
    selection = gr.Dropdown([], value=[], multiselect=True, label="runs to compare", elem_id="run-name",
                            allow_custom_value=True)
    with gr.Row():
        run_plot = plot(label="test accuracy", elem_id="run-plot", scale=3)
        details = gr.JSON(label="summary and settings of the last one picked", elem_id="run-details", scale=2)
    compared = table(label="runs compared", elem_id="runs-compared", columns=COMPARED,
                     column_widths=list(COMPARED.values()))
    said = gr.Markdown(elem_id="runs-over-seeds", elem_classes=["note"])
    inputs = [selection, algorithm, dataset, partition, status, text]
    outputs = [listing, selection, run_plot, details, compared, said]
    gr.on([refresh.click, selection.input, algorithm.change, dataset.change, partition.change, status.change,
           text.submit, demo.load], app.runs, inputs, outputs, api_name="runs", **LIGHT)
    listing.select(toggle, selection, selection, queue=False, **PRIVATE).then(
        app.runs, inputs, outputs, **LIGHT, **PRIVATE)
    return (inputs, outputs), (prepare, prepared)
