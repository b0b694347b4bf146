"""The figure driver, ``fedala-lab figures``: plan → runs → analysis → Displays → files, and their index.

    fedala-lab figures                                   # quick preset: the teach data, minutes on a laptop CPU
    fedala-lab figures --preset mnist                    # the paper's MNIST data, ≤ 1 hour of a CPU → figures/mnist/
    fedala-lab figures --preset paper                    # GPU scale, the paper's MNIST data → figures/paper/
    fedala-lab figures --only fig4,table2 --no-progress

Every run comes from the run store (:func:`~fedala_lab.experiments.runs.get_or_run`, through one
:class:`~fedala_lab.experiments.runs.RunCache`): a second call redraws from cached runs in seconds. The
runs are the plan's (:func:`~fedala_lab.experiments.plans.build_plan`); the output folder gets PNG (and
PDF) files, Markdown/LaTeX/CSV versions of the tables, an ``index.json`` and a ``README.md`` that says for
every file which paper figure or table it reproduces, the command and configs that made it, how long it
took and what it shows (numbers read off the runs, never typed in).

Progress: one bar over the rounds the call simulates (estimated up front from the store and the runs the
figures will branch from, docs/design.md#run-store), and one per run being simulated. Interrupted, a second
call continues: finished runs and figures are kept, the run in progress resumes from its checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from ..errors import ConfigError, DataError
from ..experiments.plans import Plan, build_plan
from ..experiments.prefix import rounds_to_compute
from ..experiments.presets import check_partition, preset
from ..experiments.runs import RunCache
from ..figures.index import describe_configs, render_readme
from .paper import FIGURES, Context, FigureSpec, planned_configs

MIN_DPI, MAX_DPI = 10, 600  # 600 dpi: print quality; a 12-inch figure is then 7,200 pixels wide (≈ 140 MB to draw)


def run_figures(preset_name: str = "quick", *, only: Iterable[str] | None = None, out: str | Path | None = None,
                store=None, progress: bool = True, formats=("png", "pdf"), dpi: int = 100,
                rounds: int | None = None, seeds: int | None = None, fig4: tuple | None = None,
                device: str | None = None, trackers: Iterable = ()) -> dict:
    """Make the figures of ``preset_name`` (all, or ``only`` these keys) into ``out``; update its index.
    ``trackers`` (experiments/trackers.py) log every run the figures use, computed or from the store.

    Returns the index entries written ({key: entry}). ``out/index.json`` keeps every figure's entry, so
    ``--only`` refreshes some without losing the others; ``out/README.md`` is rebuilt from it.
    """
    if not isinstance(dpi, int) or isinstance(dpi, bool) or not MIN_DPI <= dpi <= MAX_DPI:
        raise ConfigError("dpi", dpi, f"a whole number from {MIN_DPI} to {MAX_DPI} (PNG dots per inch)")
    plan = build_plan(preset_name, rounds=rounds, seeds=seeds, fig4=fig4, device=device)
    made = list(plan.figures or FIGURES)
    keys = made if only is None else list(dict.fromkeys(only))
    bad = [k for k in keys if k not in made]
    if bad or not keys:
        raise ConfigError("only", ",".join(bad) if bad else ",".join(only),
                          f"figure names among {', '.join(made)} (preset {preset_name})")
    planned = planned_configs(plan, keys)
    for cfg in (plan.practical, plan.pathological, *planned):  # before anything runs or is written
        check_partition(cfg)
    cache = RunCache(store, trackers=trackers)  # a bad store is refused before the out folder is made
    out = Path(out if out is not None else default_out(preset_name))
    index = _read_index(out)
    out.mkdir(parents=True, exist_ok=True)
    from tqdm.auto import tqdm

    total = rounds_to_compute(planned, cache.store)
    overall = tqdm(total=total, desc="rounds to simulate", unit="round", disable=not progress, dynamic_ncols=True)

    def one_round(n):
        overall.total = max(overall.total, overall.n + n)
        overall.update(n)

    cache.on_round = one_round
    ctx = Context(plan, cache, out, progress=progress, formats=tuple(formats), dpi=dpi)
    command = _command(preset_name, keys, out, rounds, seeds, fig4)

    def echo(line):  # through tqdm, so the line does not tear the progress bars
        tqdm.write(line, file=sys.stdout)
        sys.stdout.flush()

    since = index.get("environment", {}).get("date", "")  # the version the figures replace, for entries undated
    index.update(preset=plan.name, notes=plan.notes, plan=describe_plan(plan))
    entries = {}
    from ..compute.device import cpu_threads  # here: torch is loaded

    try:
        with cpu_threads(1 if plan.name == "quick" else None):
            for key in keys:
                overall.set_description(f"{key}: rounds to simulate")
                old = index["figures"].get(key, {})
                before = previous_tables(out, old)
                entry = _make_one(FIGURES[key], ctx, command=command,
                                  only_command=_command(preset_name, [key], out, rounds, seeds, fig4))
                entry["changes"] = table_changes(before, out, FIGURES[key].compared, old.get("made") or since) \
                    or old.get("changes", [])  # a redraw keeps what the last change said
                entries[key] = index["figures"][key] = entry
                # the index is rewritten after every figure, so an interrupted call keeps what it made. The
                # machine it names is the one whose times it reports: a redraw from stored runs keeps it
                if entry["runs_computed"] or "environment" not in index:
                    index["environment"] = _environment()
                (out / "index.json").write_text(json.dumps(index, indent=2, ensure_ascii=False, default=str))
                (out / "README.md").write_text(render_readme(index, order=made))
                echo(f"{key:<14} {entry['seconds']:7.1f} s  ({entry['runs_computed']} runs computed, "
                     f"{entry['runs_total'] - entry['runs_computed']} from the store)  " + ", ".join(entry["files"]))
    finally:
        overall.close()
    return entries


def _make_one(spec: FigureSpec, ctx: Context, *, command: str, only_command: str) -> dict:
    """Make one figure; its index entry (files, command, configs, runs, seconds, findings)."""
    ctx.store.start_counting()
    tic = time.perf_counter()
    files, findings = spec.make(ctx)
    seconds = time.perf_counter() - tic
    runs = list({id(r): r for r in ctx.store.used}.values())  # a run handed out twice counts once
    plan = ctx.plan
    branched = [f"{r.path.name if r.path else r.config.slug()} from round {r.meta['branched_from']['round']} of "
                f"{r.meta['branched_from']['run']}" for r in runs if r.meta.get("branched_from")]
    return {
        "key": spec.key, "paper": spec.paper, "title": spec.title, "preset": plan.name,
        "files": sorted({str(Path(f).relative_to(ctx.out)) for f in files}),
        "command": command, "only_command": only_command,
        "configs": (describe_configs([r.config for r in runs], preset(plan.base_name), plan.base_name) if runs
                    else "—"),
        "runs": [r.path.name if r.path else r.config.slug() for r in runs],
        "runs_computed": ctx.store.computed, "runs_total": len(runs), "runs_branched": branched,
        "seconds": round(seconds, 1), "made": time.strftime("%Y-%m-%d"), "findings": findings,
    }


def describe_plan(plan: Plan) -> list[str]:
    """A few lines saying what a preset runs (for the README)."""
    from ..analysis.tables import setting_label

    def cfg_line(name, cfg):
        return (f"{name}: {setting_label(cfg)}, {cfg.data.num_clients} clients, model {cfg.model}, "
                f"{cfg.rounds} rounds, lr {cfg.lr:g}, batch {cfg.batch_size}, ALA η={cfg.eta:g} s={cfg.s:g} p={cfg.p}")

    makes = set(plan.figures or FIGURES)  # only what this plan draws: mnist-pfl has no ablation nor Fig. 4
    lines = [cfg_line(f"{which} setting", plan.setting(which)) for which in ("practical", "pathological")
             if which in plan.settings]
    f = plan.fig4
    horizon = f" over {plan.ablation_rounds} rounds" if plan.ablation_rounds else ""
    seeds = f"seeds: {list(plan.seeds)}"
    if makes & {"table1", "table6"}:
        seeds += (f" for tables, {list(plan.ablation_seeds)} for ablations; s ∈ {list(plan.s_values)}, "
                  f"p ∈ {list(plan.p_values)}{horizon}")
    lines.append(seeds)
    if "fig4" in makes:
        if "search" in f and f["K"] == "auto":
            x, y = f["plateau"]["points"], f["plateau"]["rounds"]
            lines.append(f"Fig. 4: {f['setting']} setting, K read off the tables' FedAvg run: the first round in "
                         f"{f['search'][0]}–{f['search'][1]} after which its best accuracy rises by less than {x:g} "
                         f"points over {y} rounds (else the last); rounds K − {f['before']} to K + {f['after']}, client "
                         f"{f['client']}, grid {f['grid']}×{f['grid']}, {f['num_samples']} samples; FedALA branched "
                         f"from the FedAvg run's state at K")
        else:
            first, last = f["window"] if "window" in f else (f["K"] - f["before"], f["K"] + f["after"])
            lines.append(f"Fig. 4: {f['setting']} setting, K = {f['K']}, rounds {first}–{last}, client "
                         f"{f['client']}, grid {f['grid']}×{f['grid']}, {f['num_samples']} samples")
    if "fig5" in makes:
        lines.append(f"Fig. 5: {plan.fig5_rounds} rounds")
    return lines


def default_out(preset_name: str) -> str:
    """figures/ for quick (committed), figures/<preset>/ for the others (they must not overwrite them)."""
    return "figures" if preset_name == "quick" else f"figures/{preset_name}"


def _command(preset_name, keys, out, rounds, seeds, fig4) -> str:
    parts = ["fedala-lab figures", f"--preset {preset_name}"]
    if keys and keys != list(FIGURES):
        parts.append("--only " + ",".join(keys))
    if str(out).rstrip("/") != default_out(preset_name):
        parts.append(f"--out {out}")
    if rounds is not None:
        parts.append(f"--rounds {rounds}")
    if seeds is not None:
        parts.append(f"--seeds {seeds}")
    if fig4 is not None:
        parts.append("--fig4 " + ",".join(str(v) for v in fig4))
    return " ".join(parts)


def _read_index(out: Path) -> dict:
    """The index of the figures already in ``out`` (empty for a new folder). Anything else under that name is
    refused, not overwritten: it may be someone else's file, or a damaged index to look at first."""
    p = out / "index.json"
    if not p.exists():
        return {"figures": {}}
    try:
        d = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:  # UnicodeDecodeError (binary) and JSONDecodeError are ValueErrors
        d, why = None, f"{type(err).__name__}: {' '.join(str(err).split())[:120]}"
    else:
        why = "it holds no 'figures' mapping"
    if not isinstance(d, dict) or not isinstance(d.get("figures"), dict):
        raise DataError(f"{p} is not an index of figures ({why}): remove it, or choose another --out folder")
    return d


# Columns that name a table's row (whichever it has), to match rows between two versions of it
ROW_KEYS = ("setting", "row", "with_ala", "s", "p")


def previous_tables(out: Path, entry: dict | None) -> dict:
    """The CSV tables of a figure's version in ``out`` (its index ``entry``), read before they are replaced."""
    import pandas as pd

    tables = {}
    for name in (entry or {}).get("files", []):
        if name.endswith(".csv"):
            with contextlib.suppress(OSError, ValueError):  # gone or damaged: nothing to compare with
                tables[name] = pd.read_csv(out / name)
    return tables


def table_changes(before: dict, out: Path, columns: tuple[str, ...], since: str) -> list[str]:
    """What moved in a figure's tables since the version ``before`` (of date ``since``): for each row whose
    ``columns`` changed, old → new and the difference; rows added or gone; [] when nothing changed."""
    import pandas as pd

    lines = []
    for name, old in before.items():
        if not columns or not (out / name).is_file():
            continue
        new = pd.read_csv(out / name)
        keys = [k for k in ROW_KEYS if k in new.columns and k in old.columns
                and (k != "setting" or new[k].nunique() > 1)]
        cols = [c for c in columns if c in new.columns and c in old.columns]
        if not keys or not cols:
            continue
        was, now = ({_row_name(r, keys): r for _, r in t.iterrows()} for t in (old, new))
        moved, same = [], []
        for row, r in now.items():
            if row not in was:
                continue
            d = [(c, was[row][c], r[c]) for c in cols if abs(r[c] - was[row][c]) >= 0.005]
            if d:
                moved.append(f"{row}: " + "; ".join(f"{c} {a:.2f} → {b:.2f} ({b - a:+.2f})" for c, a, b in d))
            else:
                same.append(row)
        added, gone = [r for r in now if r not in was], [r for r in was if r not in now]
        if moved or added or gone:
            lines.append(f"changed since the version of {since or 'before'} (`{name}`, {', '.join(cols)}; "
                         "points):")
            lines += [f"  - {m}" for m in moved]
            lines += [f"  - {what}: {', '.join(rows)}" for what, rows in
                      (("new", added), ("gone", gone), ("unchanged (within 0.005)", same)) if rows]
    return lines


def _row_name(r, keys: list[str]) -> str:
    return ", ".join(f"{k}={r[k]}" if k in ("s", "p") else str(r[k]) for k in keys)


def _environment() -> dict:
    import torch

    from ..compute.device import environment

    cuda = torch.cuda.is_available()
    env = environment(torch.device("cuda:0" if cuda else "cpu"))
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"python": env["python"], "torch": env["torch"], "platform": env["platform"], "cpus": os.cpu_count(),
            "cuda": env["device_name"] if cuda else None, "load_1min_at_end": None if load is None else round(load, 2),
            "date": time.strftime("%Y-%m-%d")}
