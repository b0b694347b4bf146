"""``fedala-lab``: the command line.

    fedala-lab run --preset teach --algos fedavg,fedprox,fedala
    fedala-lab run --preset teach --algos fedavg,fedala --json
    fedala-lab data --dataset digits --partition dirichlet --beta 0.1 --clients 20 --out figures/data.png

Bad values print one line on stderr and exit with code 2 (never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .config import (
    ALGORITHMS,
    BACKENDS,
    DATASETS,
    PARTITIONS,
    SETTING_NAMES,
    DataConfig,
    RunConfig,
    merge_settings,
    parse_value,
    read_config_file,
    unknown_setting,
)
from .errors import ConfigError, FedalaError, TrainingDiverged


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


# flags shared by `run` (and later `sweep`): name -> (type, help); dest is the config field
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
    "mu": (float, "FedProx μ"),
    "eta": (float, "ALA weight learning rate η"),
    "s": (float, "ALA: percent of local train data for weight learning"),
    "p": (int, "ALA: number of top blocks with learned weights"),
    "threshold": (float, "ALA start-phase convergence threshold"),
    "max-start-epochs": (int, "cap on ALA start-phase passes"),
    "tau0": (int, "FedLAMA base interval τ0 (local steps)"),
    "phi": (int, "FedLAMA interval factor φ"),
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
    p.add_argument("--algos", help=f"comma-separated algorithms to run on the same data: {', '.join(ALGORITHMS)}")
    for flag, (typ, help_) in _RUN_FLAGS.items():
        p.add_argument(f"--{flag}", type=typ, help=help_, default=None)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any other config field, e.g. --set shuffle=true (repeatable)")


def _config_from_args(args) -> list[RunConfig]:
    base, changes = config_and_changes(args)
    cfg = base.replace(**changes) if changes else base
    algos = [a.strip() for a in args.algos.split(",")] if args.algos else [cfg.algo]
    return [cfg.replace(algo=a) for a in algos]


def config_and_changes(args, base: RunConfig | None = None) -> tuple[RunConfig, dict]:
    """``base`` (else --preset, else the defaults) with the --config file merged in, and the changes the run
    flags and --set name (returned apart, so ``sweep`` can check them against its grid before applying them)."""
    if base is None:
        from .presets import preset

        base = preset(args.preset) if args.preset else RunConfig()
    if args.config:
        settings = read_config_file(args.config)
        try:  # from_dict routes the file's top-level data fields (and data_seed) into "data"
            base = RunConfig.from_dict(merge_settings(base.to_dict(), settings))
        except ConfigError as err:
            raise ConfigError(err.field, err.value, err.allowed, f"in config file {args.config}") from None
    return base, flag_changes(args)


def flag_changes(args) -> dict:
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
        if key not in SETTING_NAMES:
            raise unknown_setting(key, value)
        changes[key] = value
    return changes


def cmd_run(args) -> int:
    from .record.run import json_safe
    from .record.store import RunStore

    cfgs = _config_from_args(args)
    store = RunStore(args.store)
    results, failed = [], []
    from .data.federated import FederatedData
    from .engine.simulate import resolve_device

    data = FederatedData.from_config(cfgs[0].data, resolve_device(cfgs[0].device))
    for cfg in cfgs:
        try:
            run = store.get_or_run(cfg, data=data, progress=not args.no_progress and not args.json,
                                   force=args.force)
        except TrainingDiverged as err:
            # the other algorithms still run; the command ends non-zero with the message, every time
            failed.append(f"{cfg.algo}: {err}")
            row = {"algo": cfg.algo, "status": "diverged", "message": str(err)}
            if args.json:
                print(json.dumps(json_safe(row), allow_nan=False), flush=True)
            continue
        s = run.summary()
        row = {"algo": cfg.algo, "best_acc": s["best_acc"], "final_acc": s["final_acc"], "rounds": s["rounds"],
               "seconds": s["seconds"], "bytes_up": s["bytes_up"], "bytes_down": s["bytes_down"],
               "status": s["status"], "run_dir": str(run.path)}
        for key in ("capped_clients", "untrained_clients"):
            if s.get(key):
                row[key] = s[key]
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
                                             title=_data_title(cfg))
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


def _data_title(cfg: DataConfig) -> str:
    if cfg.is_pfllib:
        return f"{Path(cfg.dataset[7:]).name}: samples per client and label"
    part = {"iid": "IID", "pathological": f"pathological ({cfg.classes_per_client} labels/client)",
            "dirichlet": f"Dir(β={cfg.beta:g})"}[cfg.partition]
    return f"{cfg.dataset}, {part}, {cfg.num_clients} clients"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fedala-lab", description="Personalised federated learning: FedAvg, FedProx, FedALA.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="simulate one or more algorithms and print best/final accuracy")
    _add_run_flags(r)
    r.add_argument("--store", default=None, help="run store folder (default: $FEDALA_LAB_RUNS or ./runs)")
    r.add_argument("--json", action="store_true", help="one JSON object per algorithm on stdout")
    r.add_argument("--no-progress", action="store_true", help="no progress bars")
    r.add_argument("--force", action="store_true", help="recompute even if the store has the run")
    r.set_defaults(func=cmd_run)

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

    # Subcommands defined next to the code they drive: each module has add_subcommand(sub), which adds
    # its parser and sets func. Listed here so `fedala-lab --help` shows them all.
    import importlib

    for module in _SUBCOMMAND_MODULES:
        importlib.import_module(module).add_subcommand(sub)
    return parser


_SUBCOMMAND_MODULES: list[str] = ["fedala_lab.webapp", "fedala_lab.figures.paper", "fedala_lab.sweep"]


def main(argv: list[str] | None = None) -> int:
    import warnings

    # the library's warnings (clients that never train, capped start phases…) as one line each
    warnings.formatwarning = lambda message, category, *args, **kwargs: f"fedala-lab: warning: {message}\n"
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
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
