"""``fedala-lab``: the command line. It parses and dispatches; the work is the library's.

    fedala-lab run --preset teach --algos fedavg,fedprox,fedala
    fedala-lab run --preset teach --algos fedavg,fedala --json
    fedala-lab data --dataset mnist_mini --partition dirichlet --beta 0.1 --clients 20 --out figures/data.png
    fedala-lab sweep --preset teach --algos fedavg,fedala --grid p=1,2 --seeds 0-2
    fedala-lab figures --only fig4,table2
    fedala-lab app --port 7861
    fedala-lab lecture prepare && fedala-lab lecture export slides/

Bad values print one line on stderr and exit with code 2 (never a traceback).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

from . import numerics, webapp
from .algorithms import registry
from .algorithms.plugins import env_modules, load_plugins
from .analysis.stats import AUTO
from .analysis.tables import data_title, sweep_table, table_markdown
from .config import (
    BACKENDS,
    DATASETS,
    PARTITIONS,
    DataConfig,
    RunConfig,
    parse_value,
    parse_values,
    setting_names,
    unknown_setting,
    with_settings_file,
)
from .environ import check_environment
from .errors import ConfigError, FedalaError, SweepFailed, TrainingDiverged
from .experiments.execute import compute, rounds_bar, still_to_do
from .experiments.plans import PLAN_NAMES, SWEEPS, SweepSpec, axis_name, sweep_preset
from .experiments.presets import check_partition, preset
from .experiments.runs import CACHE_MODES, cache_mode, get_or_run
from .experiments.sweeps import run_sweep
from .experiments.trackers import CLIENT_ROUNDS, check_trackers, parse_tracker
from .params import Bool, Float, Int
from .record.run import computed_on, json_safe, served_note
from .record.store import RunStore
from .reproduce import FIGURES, default_out, run_figures, save_sweep


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit code 2
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def _bool(text: str) -> bool:
    """Strict booleans: "False" is false (the reference's argparse type=bool made it true)."""
    t = text.strip().lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean (true/false)")


def _method_flags() -> dict:
    """Flags for the hyper-parameters of the methods this command is about — FedProx, ALA (every "+ala"
    method) and FedLAMA — from their declarations in the registry: name -> (type, help), the type (how a
    flag's text becomes the value) by what the declaration allows."""
    params = (*registry.resolve("fedprox").base.params, *registry.modifier("ala").params,
              *registry.resolve("fedlama").base.params)
    types = {Int: int, Float: float, Bool: _bool}
    return {p.name.replace("_", "-"): (types.get(type(p.allowed), parse_value), p.doc) for p in params}


# flags shared by `run` and `sweep`: name -> (type, help); dest is the config field
_RUN_FLAGS = {
    "rounds": (int, "communication rounds T"),
    "clients": (int, "number of clients N (data.num_clients)"),
    "dataset": (str, f"{', '.join(DATASETS)} or pfllib:<dir>"),
    "partition": (str, ", ".join(PARTITIONS)),
    "beta": (float, "Dirichlet β (small = skewed)"),
    "classes-per-client": (int, "pathological: labels per client"),
    "resize": (int, "resize images to k×k"),
    "root": (str, "torchvision data folder"),
    "download": (_bool, "let torchvision download missing files (true/false)"),
    "model": (str, "auto, fedavgcnn, smallcnn, mlp, resnet18"),
    "join-ratio": (float, "ρ: fraction of clients per round"),
    "local-epochs": (int, "local epochs E"),
    "batch-size": (int, "local batch size"),
    "lr": (float, "local learning rate"),
    **_method_flags(),
    "local-steps": (int, "local SGD steps per round instead of epochs"),
    "seed": (int, "run seed"),
    "data-seed": (int, "partition seed"),
    "eval-every": (int, "evaluate every k rounds"),
    "backend": (str, ", ".join(BACKENDS)),
    "device": (str, "auto, cpu, cuda, mps"),
}
_RENAME = {"clients": "num_clients"}


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", help="named config: teach, mnist-dir0.1, mnist-pat")
    p.add_argument("--config", type=Path, help="a JSON or YAML config file (flags override it)")
    p.add_argument("--algos", help="comma-separated algorithms to run on the same data: "
                   + ", ".join(registry.names()))
    for flag, (typ, help_) in _RUN_FLAGS.items():
        p.add_argument(f"--{flag}", type=typ, help=help_, default=None)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any other config field, e.g. --set shuffle=true (repeatable)")


def _configs_from_args(args) -> list[RunConfig]:
    base, changes = _base_and_changes(args)
    cfg = base.replace(**changes) if changes else base
    algos = [a.strip() for a in args.algos.split(",")] if args.algos else [cfg.algo]
    return [cfg.replace(algo=a).check() for a in algos]


def _base_and_changes(args, base: RunConfig | None = None) -> tuple[RunConfig, dict]:
    """``base`` (else --preset, else the defaults) with the --config file merged in, and the changes the run
    flags and --set name (returned apart, so ``sweep`` can check them against its grid before applying them)."""
    if base is None:
        base = preset(args.preset) if args.preset else RunConfig()
    if args.config:
        base = with_settings_file(base, args.config)
    return base, _flag_changes(args)


def _flag_changes(args) -> dict:
    """Config changes named by the run flags and ``--set KEY=VALUE`` (unknown keys are refused)."""
    changes = {}
    for flag in _RUN_FLAGS:
        v = getattr(args, flag.replace("-", "_"))
        if v is not None:
            changes[_RENAME.get(flag, flag.replace("-", "_"))] = v
    for item in args.set:
        if "=" not in item:
            raise FedalaError(f"--set {item!r}: expected KEY=VALUE, e.g. --set shuffle=true")
        k, v = item.split("=", 1)
        key, value = k.strip().replace("-", "_"), parse_value(v.strip())
        if key not in setting_names():
            raise unknown_setting(key, value)
        changes[key] = value
    return changes


# ------------------------------------------------------------------------------------------------- run, data


def cmd_run(args) -> int:
    """The algorithms asked for, on the same data: the runs the store lacks computed side by side
    (experiments/execute.py, ``--processes``), then each read from the store (bit for bit one after the other)."""
    cfgs = _configs_from_args(args)
    store = RunStore(args.store)
    trackers = _trackers(args)  # a bad --tracker is refused before any run
    cache = cache_mode(args.cache, args.force)
    check_partition(cfgs[0])  # the paper's MNIST partition, when missing: where it comes from
    statuses = {}
    if cache != "off":
        todo = still_to_do(cfgs, store, force=cache == "refresh")
        with rounds_bar(sum(c.rounds for c in todo), desc=", ".join(c.algo for c in todo),
                        progress=bool(todo) and not args.no_progress and not args.json) as on_round:
            statuses = compute(cfgs, store, processes=args.processes, on_round=on_round, trackers=trackers,
                               force=cache == "refresh")
    results, failed = [], []
    for cfg in cfgs:
        st = statuses.get(cfg.key(), {})
        try:
            if isinstance(st.get("error"), FedalaError):
                raise st["error"]  # refused where it was computed: said once, not computed again
            # computed above (or stored already): read from the store; with --cache off, computed here
            run = get_or_run(cfg, store, progress=cache == "off" and not args.no_progress and not args.json,
                             cache=cache if cache == "off" else "use", trackers=trackers)
        except TrainingDiverged as err:
            # the other algorithms still run; the command ends non-zero with the message, every time
            failed.append(f"{cfg.algo}: {err}")
            row = {"algo": cfg.algo, "status": "diverged", "message": str(err)}
        else:
            served = st.get("status") == "stored"
            s = run.summary()
            row = {"algo": cfg.algo, **{k: s[k] for k in ("best_acc", "final_acc", "rounds", "seconds",
                                                          "bytes_up", "bytes_down", "status")},
                   "run_dir": str(run.path), "served": served, "computed_on": computed_on(run),
                   **{k: s[k] for k in ("capped_clients", "untrained_clients") if s.get(k)}}
            if served and not args.json:
                sys.stderr.write(f"fedala-lab: {served_note(run)}\n")
            results.append(row)
        if args.json:
            print(json.dumps(json_safe(row), allow_nan=False), flush=True)
    if not args.json and results:
        _print_table(results)
    for msg in failed:
        sys.stderr.write(f"fedala-lab: error: {msg}\n")
    return 2 if failed else 0


def _print_table(rows: list[dict]) -> None:
    head = f"{'algorithm':<14} {'best acc %':>10} {'final acc %':>11} {'rounds':>6} {'seconds':>8}  run folder"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['algo']:<14} {r['best_acc']:>10.2f} {r['final_acc']:>11.2f} {r['rounds']:>6} "
              f"{r['seconds']:>8.1f}  {r['run_dir']}")
        if r.get("capped_clients"):
            print(f"{'':<14} note: ALA start phase capped for clients {r['capped_clients']}")
        if r.get("untrained_clients"):
            print(f"{'':<14} note: clients {r['untrained_clients']} hold less than one batch of train data "
                  "and never trained locally (drop_last)")


def cmd_data(args) -> int:
    from .data.federated import FederatedData
    from .figures.data import DataDistributionDisplay

    changes = {k: v for k, v in {
        "dataset": args.dataset, "partition": args.partition, "beta": args.beta, "num_clients": args.clients,
        "classes_per_client": args.classes_per_client, "seed": args.seed, "resize": args.resize,
        "root": args.root, "download": args.download, "train_ratio": args.train_ratio,
        "least_samples": args.least_samples,
    }.items() if v is not None}
    out = Path(args.out)
    if out.suffix and out.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise ConfigError("out", args.out, "an image path ending in .png, .pdf or .svg (or no suffix: both "
                          ".png and .pdf are written)")
    if args.csv and Path(args.csv).suffix.lower() != ".csv":
        raise ConfigError("csv", args.csv, "a path ending in .csv")
    cfg = DataConfig(**changes)
    data = FederatedData.from_config(cfg)
    disp = DataDistributionDisplay.from_data(data, kind=args.kind, split=args.split,
                                             title=f"{data_title(cfg)}: samples per client and label")
    formats = None if out.suffix else ("png", "pdf")
    written = disp.savefig(out if out.suffix else out.with_suffix(".png"), formats=formats)
    summary = data.summary()
    print(f"{data.name}: {data.num_clients} clients, {int(summary['train'].sum())} train / "
          f"{int(summary['test'].sum())} test samples, labels per client "
          f"{int(summary['labels'].min())}–{int(summary['labels'].max())}")
    for p in written:
        print(f"wrote {p}")
    if args.csv:
        disp.counts_.to_csv(args.csv, index=False)
        print(f"wrote {args.csv}")
    return 0


# ------------------------------------------------------------------------------------------------- sweep


def _sweep_spec(args) -> SweepSpec:
    """The sweep the command line asks for: a spec file or named sweep, then flags on top."""
    if args.spec and args.sweep:
        raise FedalaError("give either --spec FILE or --sweep NAME, not both")
    base = preset(args.preset) if args.preset else None
    if args.spec:
        spec = SweepSpec.from_file(args.spec, base=base)
    elif args.sweep:
        spec = sweep_preset(args.sweep)
        if base is not None:
            spec = dataclasses.replace(spec, base=base)
    else:
        spec = SweepSpec(base=base or RunConfig(), name=args.name or "sweep")
    if args.name:
        spec = dataclasses.replace(spec, name=args.name)

    cfg, changes = _base_and_changes(args, spec.base)  # applied after the clash check below

    axes = {}

    def add_axis(name, values, flag):
        if name in axes:  # the second would replace the first, a grid other than the one asked for
            raise FedalaError(f"{flag} gives the axis {name} a second time: give all its values at once "
                              f"(--grid {name}=V1,V2,…)")
        axes[name] = values

    if args.algos is not None:
        add_axis("algo", parse_values(args.algos, "algos"), "--algos")
    for item in args.grid:
        if "=" not in item:
            raise FedalaError(f"--grid {item!r}: expected AXIS=V1,V2,… (e.g. --grid p=1,2,3)")
        a, v = item.split("=", 1)
        add_axis(axis_name(a), parse_values(v, a.strip()), f"--grid {item!r}")
    if args.seeds is not None:  # last, so that seeds vary fastest: a half-finished sweep has whole settings
        add_axis(axis_name("seed"), parse_values(args.seeds, "seeds"), "--seeds")
    grid_axes = set(spec.axes) | set(axes)
    clash = sorted(k for k in changes if k in grid_axes)
    if clash:
        raise FedalaError(f"--{clash[0].replace('_', '-')} sets a field that is also a grid axis; "
                          f"change its values with --grid {clash[0]}=… instead")
    if changes:
        cfg = cfg.replace(**changes)
    spec = dataclasses.replace(spec, base=cfg)
    if axes:
        spec = spec.with_axes(**axes)
    if args.by:
        spec = dataclasses.replace(spec, by=tuple(b.strip() for b in args.by.split(",") if b.strip()))
    spec.expand()  # every grid point validated before anything runs
    return spec


def cmd_sweep(args) -> int:
    if args.list:
        for name, (_, text) in SWEEPS.items():
            print(f"{name:<22} {text}")
        return 0
    spec = _sweep_spec(args)
    store = RunStore(args.store)
    pairs = spec.expand()
    n_unique = len({c.key() for _, c in pairs})
    if args.dry_run:
        print(f"sweep {spec.name}: {len(pairs)} grid points, {n_unique} distinct runs; axes "
              + ", ".join(f"{a}={list(v)}" for a, v in spec.grid))
        seen = set()
        for point, cfg in pairs:
            k = cfg.key()
            state = "stored" if store.has(cfg) else (
                "same run as above" if k in seen else "to run")
            seen.add(k)
            print(f"  {json.dumps(point)}  {store.name_for(cfg)}  [{state}]")
        return 0
    workers = args.workers
    if workers != "auto":
        try:
            workers = int(workers)
        except ValueError:
            raise ConfigError("workers", workers, "a whole number >= 1 or auto") from None
    try:
        result = run_sweep(spec, store=store, workers=workers, ray=args.ray, ray_address=args.ray_address,
                           shared_store=True if args.shared_store else None, threads=args.threads,
                           gpus_per_run=args.gpus_per_run, force=cache_mode(args.cache, args.force) == "refresh",
                           progress=not args.no_progress and not args.json, trackers=_trackers(args))
    except SweepFailed as err:  # the table of what finished, marked incomplete; every failure on stderr
        if err.result is None:
            raise
        result = err.result
    by = list(spec.table_by())
    against = args.against if args.against is not None else AUTO
    table = sweep_table(result, by, against=against)
    if args.json:
        for rec in table.to_dict(orient="records"):
            print(json.dumps(json_safe(rec), allow_nan=False))
    else:
        print(f"sweep {spec.name}: {len(pairs)} grid points, {n_unique} distinct runs "
              f"({result.computed} computed, {n_unique - result.computed - len(result.failed)} from the store), "
              f"{result.seconds:.1f} s")
        if result.failed:
            print(f"INCOMPLETE: {len(result.failed)} run(s) failed (below, on stderr); the table lacks them")
        print(table_markdown(table, by))
    if args.out:
        for p in save_sweep(result, args.out, by, against=against):
            if not args.json:
                print(f"wrote {p}")
    # every diverged or failed run is one line on stderr and makes the exit code 2 (stdout: the table only)
    names = {c.key(): store.name_for(c) for _, c in pairs}
    for k, msg in result.diverged.items():
        sys.stderr.write(f"fedala-lab: error: run {names[k]} diverged: {msg}\n")
    for k, msg in result.failed.items():
        sys.stderr.write(f"fedala-lab: error: run {names[k]} failed: {msg}\n")
    return 2 if result.failed or result.diverged else 0


# ----------------------------------------------------------------------------------------------- figures


def cmd_figures(args) -> int:
    if args.list:
        for k, s in FIGURES.items():
            print(f"{k:<14} {s.paper:<34} {s.title}")
        return 0
    only = [k.strip() for k in args.only.split(",") if k.strip()] if args.only is not None else None
    formats = tuple(f.strip().lower().lstrip(".") for f in args.formats.split(",") if f.strip())
    bad = [f for f in formats if f not in ("png", "pdf", "svg")]
    if bad or not formats:
        raise ConfigError("formats", args.formats, "a comma-separated subset of png, pdf, svg")
    fig4 = None
    if args.fig4:
        try:
            fig4 = tuple(int(v) for v in args.fig4.split(","))
        except ValueError:
            raise ConfigError("fig4", args.fig4, "K,FIRST,LAST (three integers)") from None
        if len(fig4) != 3:
            raise ConfigError("fig4", args.fig4, "K,FIRST,LAST (three integers)")
    tic = time.perf_counter()
    out = args.out or default_out(args.preset)
    entries = run_figures(args.preset, only=only, out=out, store=args.store, progress=not args.no_progress,
                          formats=formats, dpi=args.dpi, rounds=args.rounds, seeds=args.seeds, fig4=fig4,
                          device=args.device, trackers=_trackers(args))
    print(f"{len(entries)} figure(s) in {time.perf_counter() - tic:.1f} s → {Path(out) / 'README.md'}")
    return 0


# ------------------------------------------------------------------------------------------------ parsers


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fedala-lab", description="Personalised federated learning: FedAvg, FedProx, FedALA.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in (_add_run, _add_data, _add_app, _add_lecture, _add_figures, _add_sweep, _add_methods):
        add(sub)
    return parser


def _add_run(sub) -> None:
    r = sub.add_parser("run", help="simulate one or more algorithms and print best/final accuracy")
    _add_run_flags(r)
    r.add_argument("--store", default=None, help="run store folder (default: $FEDALA_LAB_RUNS or ./runs)")
    r.add_argument("--json", action="store_true",
                   help="one JSON object per algorithm on stdout (accuracies in %%)")
    r.add_argument("--no-progress", action="store_true", help="no progress bars")
    r.add_argument("--processes", default="auto", metavar="N",
                   help="runs computed side by side: auto (default: one per CPU core, at most 4; "
                        "$FEDALA_LAB_PROCESSES) or a number (1: one after the other in this process)")
    r.add_argument("--force", action="store_true", help="recompute even if the store has the run (--cache refresh)")
    r.add_argument("--cache", choices=CACHE_MODES, default="use",
                   help="use (default): serve a stored run of the identical config, data and code; refresh: "
                        "recompute and replace it; off: compute without reading or writing the store")
    _add_plugin_flag(r)
    _add_tracker_flags(r)
    r.set_defaults(func=cmd_run)


def _add_plugin_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (from the current folder or PYTHONPATH): it registers your "
                        "algorithms (repeatable; installed plugins and $FEDALA_LAB_PLUGINS load by themselves)")


def _add_methods(sub) -> None:
    m = sub.add_parser("methods", help="list every algorithm: its name, paper, category, hyper-parameters, +ALA")
    m.add_argument("--json", action="store_true", help="one JSON object per algorithm")
    _add_plugin_flag(m)
    m.set_defaults(func=cmd_methods)


def cmd_methods(args) -> int:
    for row in registry.catalogue():
        if args.json:
            print(json.dumps(row))
            continue
        names = ", ".join([row["name"], *row["aliases"], *row["variants"]])
        params = ", ".join(f"{k}={v!r}" for k, v in row["params"].items()) or "—"
        print(f"{row['label']:<11} {row['category']:<26} {names}\n{'':<11} hyper-parameters: {params}"
              + (f"\n{'':<11} {row['source']}" if row["source"] else ""))
    if not args.json:
        for name, what in (("ala", "ALA as the local initialisation"), ("finetune", "evaluate a fine-tuned copy")):
            mod = registry.modifier(name)
            print(f"modifier {mod.suffix}: {what} ({', '.join(p.name for p in mod.params)})")
    return 0


def _add_data(sub) -> None:
    d = sub.add_parser("data", help="partition a dataset and draw who holds which labels (Fig. 6–9)")
    d.add_argument("--dataset", default=None)
    d.add_argument("--partition", default=None)
    d.add_argument("--beta", type=float, default=None)
    d.add_argument("--clients", type=int, default=None)
    d.add_argument("--classes-per-client", type=int, default=None)
    d.add_argument("--train-ratio", type=float, default=None)
    d.add_argument("--least-samples", type=int, default=None)
    d.add_argument("--seed", type=int, default=None, help="partition seed")
    d.add_argument("--resize", type=int, default=None)
    d.add_argument("--root", default=None)
    d.add_argument("--download", type=_bool, default=None)
    d.add_argument("--kind", choices=["bubble", "heatmap"], default="bubble")
    d.add_argument("--split", choices=["all", "train", "test"], default="all")
    d.add_argument("--out", default="figures/data_distribution.png", help="image path (.png/.pdf/.svg)")
    d.add_argument("--csv", default=None, help="also write the drawn counts as CSV")
    d.set_defaults(func=cmd_data)


def _add_app(sub) -> None:
    a = sub.add_parser("app", help="start the lecture app (Gradio) on http://127.0.0.1:7860")
    webapp.add_arguments(a)  # shared with app.py
    _add_plugin_flag(a)
    a.set_defaults(func=webapp.cmd_app)


def _add_lecture(sub) -> None:
    a = sub.add_parser("lecture", help="prepare the lecture (every app tab's defaults into the app's run store) "
                                       "or export its figures and handouts")
    webapp.add_lecture_arguments(a)
    _add_plugin_flag(a)
    a.set_defaults(func=webapp.cmd_lecture)


def _add_figures(sub) -> None:
    p = sub.add_parser("figures", help="regenerate the paper's figures and tables from (cached) runs")
    p.add_argument("--preset", choices=list(PLAN_NAMES), default="quick",
                   help="quick: the teach data, minutes on a CPU; mnist: the MNIST partitions at a horizon a CPU "
                        "affords (≤ 1 hour, figures/mnist/); mnist-pfl: Tables 2–4 with every pFL baseline on MNIST "
                        "Dir(0.1), shortened (figures/mnist-pfl/); paper: GPU scale")
    p.add_argument("--only", default=None, help=f"comma-separated subset of: {', '.join(FIGURES)}")
    p.add_argument("--out", default=None, help="output folder (default: figures/ for quick, figures/<preset>/ "
                   "for the others, so they do not overwrite the committed quick figures)")
    p.add_argument("--store", default=None, help="run store folder (default: $FEDALA_LAB_RUNS or ./runs)")
    p.add_argument("--formats", default="png,pdf", help="image formats (default: png,pdf)")
    p.add_argument("--dpi", type=int, default=100, help="PNG resolution (default: 100)")
    p.add_argument("--rounds", type=int, default=None, help="override the rounds of every run except Fig. 4's")
    p.add_argument("--seeds", type=int, default=None, help="override the number of seeds")
    p.add_argument("--fig4", default=None, metavar="K,FIRST,LAST", help="override Fig. 4's protocol")
    p.add_argument("--device", default=None, help="override every run's device (auto, cpu, cuda)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--list", action="store_true", help="list the figures and exit")
    _add_plugin_flag(p)
    _add_tracker_flags(p)
    p.set_defaults(func=cmd_figures)


def _add_sweep(sub) -> None:
    p = sub.add_parser("sweep", help="run a grid (algorithms × seeds × p × s × β × clients …) and print "
                                     "tables over seeds with 95 %% intervals and paired tests",
                       description="Run every point of a grid of configs (skipping those already in the run "
                                   "store) and aggregate best/final accuracy over seeds: means with 95 % intervals, "
                                   "and each row against a reference (--against), paired by seed.")
    p.add_argument("--spec", type=Path, help="sweep file (YAML/JSON): name, preset, config, grid, by")
    p.add_argument("--sweep", help="a named reproduction sweep: " + ", ".join(SWEEPS))
    p.add_argument("--list", action="store_true", help="list the named sweeps and exit")
    p.add_argument("--name", help="name of the sweep (progress bar, table heading)")
    _add_run_flags(p)  # --preset, --config, --algos (an axis), every run flag (the base), --set
    p.add_argument("--seeds", help="seed axis: 0,1,2 or 0-4")
    p.add_argument("--grid", action="append", default=[], metavar="AXIS=V1,V2",
                   help="another axis, e.g. --grid p=1,2,3 --grid beta=0.1,0.5 (repeatable)")
    p.add_argument("--by", help="table rows, comma-separated (default: every axis but the seeds)")
    p.add_argument("--workers", default="auto", help="auto (default) = one process per CPU core, sequential "
                                                     "on a GPU; 1 = sequential in this process; n = n processes")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1: robust on a "
                                                          "shared CPU, see docs/design.md#performance)")
    p.add_argument("--ray", action="store_true", help="run on a Ray started here (pip install ray)")
    p.add_argument("--ray-address", default=None, help="run on this Ray cluster (auto, ray://host:10001)")
    p.add_argument("--shared-store", action="store_true",
                   help="with --ray-address: the store is on a filesystem every node sees (workers write it)")
    p.add_argument("--gpus-per-run", type=float, default=0.0, help="Ray: GPUs reserved per run (e.g. 0.5)")
    p.add_argument("--store", default=None, help="run store folder (default: $FEDALA_LAB_RUNS or ./runs)")
    p.add_argument("--against", default=None, metavar="NAME",
                   help="the reference the rows are compared with, paired by seed (an algorithm, or a value of the "
                        "first table column): default the reference method (FedAvg) when the rows are algorithms; "
                        "docs/comparing.md")
    p.add_argument("--out", default=None, help="folder for runs.csv, table.csv/.md/.tex (95 %% intervals, paired "
                                               "tests), stats.csv and clients.csv")
    p.add_argument("--dry-run", action="store_true", help="list the grid points and what is stored; run nothing")
    p.add_argument("--json", action="store_true", help="the table as one JSON object per row")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--force", action="store_true", help="recompute runs even if the store has them (--cache refresh)")
    p.add_argument("--cache", choices=CACHE_MODES[:2], default="use",
                   help="use (default): skip runs stored with the identical config, data and code; refresh: "
                        "recompute them")
    _add_plugin_flag(p)
    _add_tracker_flags(p)
    p.set_defaults(func=cmd_sweep)


def _add_tracker_flags(p) -> None:
    p.add_argument("--tracker", action="append", default=[], metavar="KIND=DIR",
                   help="log every run to tensorboard=DIR or mlflow=DIR (SQLite DIR/mlflow.db), repeatable; "
                        "pip install 'fedala_lab[tensorboard]' or '[mlflow]' (docs/trackers.md)")
    p.add_argument("--tracker-clients", default=None, metavar="ROUNDS",
                   help=f"with --tracker, the rounds with per-client metrics: {CLIENT_ROUNDS} (default: last)")


def _trackers(args) -> list:
    """The trackers --tracker names (each destination once), with --tracker-clients, which needs one."""
    if not args.tracker:
        if args.tracker_clients is not None:
            raise ConfigError("tracker_clients", args.tracker_clients, "given with --tracker KIND=DIR, whose "
                              "per-client rounds it picks (no --tracker is given)")
        return []
    clients = "last" if args.tracker_clients is None else args.tracker_clients
    return check_trackers([parse_tracker(t, clients=clients) for t in args.tracker])


def main(argv: list[str] | None = None) -> int:
    import warnings

    # the library's warnings (clients that never train, capped start phases…) as one line each
    warnings.formatwarning = lambda message, category, *args, **kwargs: f"fedala-lab: warning: {message}\n"
    try:
        env_modules()  # $FEDALA_LAB_PLUGINS: module names, or one line saying what it may hold (--help too)
    except ConfigError as err:
        sys.stderr.write(f"fedala-lab: error: {err}\n")
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_environment()  # a bad $FEDALA_LAB_… is refused before any work, whatever the command
        numerics.apply()  # $FEDALA_LAB_NUMERICS: a mode this machine can hold, or one line saying why not
        if getattr(args, "plugin", None):  # before any algorithm name is checked
            load_plugins([m for item in args.plugin for m in item.split(",")], paths=[os.getcwd()])
        return args.func(args)
    except FedalaError as err:
        sys.stderr.write(f"fedala-lab: error: {err}\n")
        return 2
    except OSError as err:  # a path that cannot be written or read: the user's to fix, never a traceback
        where = f"{err.filename}: " if err.filename else ""
        sys.stderr.write(f"fedala-lab: error: {where}{err.strerror or err}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("fedala-lab: interrupted (checkpoints, if any, are kept; run again to resume)\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
