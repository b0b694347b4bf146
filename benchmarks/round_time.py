"""Seconds per round, backend against backend, side by side in one process.

    python benchmarks/round_time.py                       # teach (50 rounds) and mnist-dir0.1 (3 rounds)
    python benchmarks/round_time.py --preset teach --repeats 5
    python benchmarks/round_time.py --preset mnist-dir0.1 --backends loop,workers,workers-cl --repeats 2
    python benchmarks/round_time.py --preset mnist-dir0.1 --rounds 3 --device cuda

Backends: ``vectorised``, ``loop``, ``workers`` (cfg.backend set so: every step of the run on it;
"workers" = local training in worker processes, one per core, compute/workers.py, everything else as
"loop"), and what ``backend="auto"`` does for the MNIST CNN on a CPU: ``auto-loop`` (before this
backend existed: local training on the loop backend, ALA's small head-only steps vectorised),
``auto-workers-serial`` (local training in worker processes, evaluation and ALA's feature pass in one
thread: before compute/parallel.py), ``auto-workers`` (now: those forward passes over a thread per core,
linear layers' updates fused into the backward pass), ``auto-workers-unfused`` (before that: the plain
SGD update, bit for bit the loop's) and ``auto-workers-cl`` (with channels_last); ``vectorised-graphs``: the vectorised backend's steps
from static buffers, CUDA graphs on a GPU (``Simulation(graphs=True)``, experimental).
Defaults: teach compares vectorised and loop; mnist-dir0.1 on a CPU compares auto-loop (local training
in this process), auto-workers-serial (in worker processes) and auto-workers (forward passes over threads
too), with ``record_train_loss=False`` (the Fig. 5 passes are
evaluation, not what is compared). The first backend listed is the baseline of the ratio columns.

Every configuration is run ``--repeats`` times, interleaved (A B A B …, the order reversed every other
repeat) so that machine noise hits every backend alike; we report medians, the per-phase split of each
round (init = ALA for FedALA, eval, train, aggregate: ``run.rounds``), the load average seen before each
run, and how far each backend's final global model is from the baseline's (max |Δ|; 0 = bit for bit).
Results are appended to benchmarks/results.md with the device, versions and date. Nothing is cached:
each run is simulated; a workers run starts (and stops) its own processes, inside its first round.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from fedala_lab.compute.backends import LoopBackend
from fedala_lab.compute.device import resolve_device
from fedala_lab.compute.parallel import ENV_FORWARD_THREADS
from fedala_lab.data.federated import FederatedData
from fedala_lab.engine.simulate import Simulation
from fedala_lab.experiments.presets import preset

HERE = Path(__file__).resolve().parent
# name -> (cfg.backend, Simulation keyword arguments); "loop-training" is not one: see one()
BACKENDS = {"vectorised": ("vectorised", {}), "loop": ("loop", {}), "workers": ("workers", {}),
            "auto-loop": ("auto", {"loop-training": True}),
            "auto-workers-serial": ("auto", {"serial-forward": True}), "auto-workers": ("auto", {}),
            "auto-workers-cl": ("auto", {"channels_last": True}),
            "auto-workers-unfused": ("auto", {"fused_linear": False}),
            "vectorised-graphs": ("vectorised", {"graphs": True})}
PHASES = ("init", "eval", "train", "aggregate")


def one(cfg, data, sim_kw: dict) -> dict:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    sim_kw = dict(sim_kw)
    loop_training = sim_kw.pop("loop-training", False)
    # before compute/parallel.py: evaluation and ALA's features in one thread of this process
    serial = sim_kw.pop("serial-forward", False)
    sim = Simulation(cfg, data, **sim_kw)
    if loop_training:  # backend="auto" as it was before the workers backend: local training on the loop
        sim.setup.backend = LoopBackend()
    marks = []  # after each round: this process's CPU seconds, training calls of the workers backend so far

    def mark(sim, row):
        marks.append((time.process_time(), len(getattr(sim.backend, "calls", []))))

    t0, c0 = time.perf_counter(), time.process_time()
    if serial:
        os.environ[ENV_FORWARD_THREADS] = "1"
    try:
        run = sim.run(progress=False, callback=mark)
    finally:
        os.environ.pop(ENV_FORWARD_THREADS, None)
    wall = time.perf_counter() - t0
    r = run.rounds
    calls = getattr(sim.backend, "calls", [])
    main_cpu, busiest, steps = [], [], []
    prev_c, prev_n = c0, 0
    for c, n in marks:
        main_cpu.append(c - prev_c)
        busiest.append(sum(k["cpu"][0] if k["cpu"] else 0.0 for k in calls[prev_n:n]))
        steps.append(sum(k["steps"] for k in calls[prev_n:n]))
        prev_c, prev_n = c, n
    out = {"wall": wall, "per_round": list(r["seconds"]), "acc": run.final_acc, "load": load,
           "workers": run.meta["env"].get("workers"),
           "global": {k: v.clone() for k, v in sim.global_params.items()},
           # CPU seconds per round: this process, the busiest worker, and their sum = the round on an idle
           # machine with a core per process (loop: this process only); workers' CPU per step
           "main_cpu": main_cpu, "busiest_cpu": busiest,
           "idle": [m + b for m, b in zip(main_cpu, busiest)],
           "worker_ms_per_step": (1000 * sum(sum(k["cpu"]) for k in calls) / max(sum(steps), 1)) if calls else None}
    for k in PHASES:
        out[k] = list(r[f"{k}_seconds"])
    return out


def med(xs) -> float:
    return statistics.median(xs)


def _phase_split(rs: list[dict], sl: slice) -> str:
    """init/eval/train/aggregate seconds of the rounds ``sl`` (median over them, then over repeats)."""
    return "/".join(f"{med(med(r[k][sl] or [float('nan')]) for r in rs):.1f}" for k in PHASES)


def _pairs(results: dict, algos: list[str], backends: list[str]):
    """(algorithm, backend, its runs, the baseline's runs) in table order; the first backend is the baseline."""
    for algo in algos:
        for backend in backends:
            yield algo, backend, results[(algo, backend)], results[(algo, backends[0])]


def bench(name: str, rounds: int, repeats: int, algos: list[str], device: str, backends: list[str],
          threads: int | None = None, record_train_loss: bool | None = None) -> list[str]:
    # threads in the config too: with None the run picks one thread per process on a CPU
    over = {} if record_train_loss is None else {"record_train_loss": record_train_loss}
    cfg0 = preset(name, rounds=rounds, device=device, checkpoint_every=0, threads=threads, **over)
    dev = resolve_device(device)
    t = time.perf_counter()
    data = FederatedData.from_config(cfg0.data, dev)
    load = time.perf_counter() - t
    results: dict[tuple[str, str], list[dict]] = {}
    # warm-up: first calls of torch.func transforms pay one-off costs; a workers run starts the fork server
    for b in dict.fromkeys(BACKENDS[b][0] for b in backends):
        one(cfg0.replace(rounds=1, algo="fedavg", backend=b), data, {})
    for rep in range(repeats):
        order = backends if rep % 2 == 0 else backends[::-1]
        for algo in algos:
            for backend in order:
                kind, kw = BACKENDS[backend]
                res = one(cfg0.replace(algo=algo, backend=kind), data, kw)
                results.setdefault((algo, backend), []).append(res)
                print(f"[{name}] rep {rep + 1}/{repeats} {algo:>8} {backend:>10}: {res['wall']:.2f} s, rounds "
                      + " / ".join(f"{x:.1f}" for x in res["per_round"])
                      + f", train {' / '.join(f'{x:.1f}' for x in res['train'])} "
                      f"(final acc {res['acc']:.2f} %, load {res['load']:.2f})", file=sys.stderr, flush=True)
    base = backends[0]
    lines = [(f"### `{name}`: {rounds} rounds, {cfg0.data.num_clients} clients, model {cfg0.model}, "
              f"batch {cfg0.batch_size}, record_train_loss={cfg0.record_train_loss}; median of {repeats} "
              "interleaved repeats"), "",
             f"Data loaded and placed on {dev} in {load:.2f} s (once, outside the timings).", "",
             ("| algorithm | backend | workers | run (s) | round 1 | round 2 | round 3+ (median) "
              "| init / eval / train / aggregate s: round 1 · round 2 · round 3+ | train s/round "
              f"| run ÷ {base} | train ÷ {base} | load before runs | max abs diff of G vs {base} |"),
             "|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|---|---:|"]
    for algo, backend, rs, rb in _pairs(results, algos, backends):
        wall = med(r["wall"] for r in rs)
        rnd = [med(r["per_round"][i] for r in rs) if rounds > i else float("nan") for i in (0, 1)]
        later = med(med(r["per_round"][2:]) for r in rs) if rounds > 2 else float("nan")
        phases = " · ".join(_phase_split(rs, sl) for sl in (slice(0, 1), slice(1, 2), slice(2, None)))
        train = med(med(r["train"]) for r in rs)
        ratio = wall / med(r["wall"] for r in rb)
        train_ratio = med(med(r["train"]) / med(b["train"]) for r, b in zip(rs, rb))
        loads = [r["load"] for r in rs]
        diff = max((rs[0]["global"][k] - rb[0]["global"][k]).abs().max().item() for k in rb[0]["global"])
        lines.append(f"| {algo} | {backend} | {rs[0]['workers'] or '–'} | {wall:.1f} | {rnd[0]:.1f} | "
                     f"{rnd[1]:.1f} | {later:.1f} | {phases} | {train:.1f} | {ratio:.2f} | {train_ratio:.2f} | "
                     f"{min(loads):.1f}–{max(loads):.1f} | {diff:.1e} |")
    lines += ["", (f"Ratios: medians over repeats; train ÷ {base} pairs each repeat's runs (same load). "
                   "A workers run's round 1 includes starting its processes."), "",
              ("CPU seconds per round, the same runs: wall time on a shared machine says how much CPU the run's "
               "session was given (the kernel shares CPU between sessions, autogroup), not what it needs. "
               "idle = this process's CPU + the busiest worker's CPU, the round on an otherwise idle machine "
               "with a core per process (loop: this process alone)."), "",
              (f"| algorithm | backend | idle round 1 | idle round 2 | idle round 3+ | of which busiest worker "
               f"(round 3+) | this process (round 3+) | worker CPU ms/step | idle ÷ {base} (round 3+) |"),
              "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for algo, backend, rs, rb in _pairs(results, algos, backends):
        idle = [med(r["idle"][i] for r in rs) if rounds > i else float("nan") for i in (0, 1)]
        later = med(med(r["idle"][2:] or r["idle"]) for r in rs)
        busy = med(med(r["busiest_cpu"][2:] or r["busiest_cpu"]) for r in rs)
        main = med(med(r["main_cpu"][2:] or r["main_cpu"]) for r in rs)
        per_step = rs[0]["worker_ms_per_step"]
        ratio = med(med(r["idle"][2:] or r["idle"]) / med(b["idle"][2:] or b["idle"]) for r, b in zip(rs, rb))
        lines.append(f"| {algo} | {backend} | {idle[0]:.1f} | {idle[1]:.1f} | {later:.1f} | {busy:.1f} | "
                     f"{main:.1f} | {'–' if per_step is None else f'{per_step:.2f}'} | {ratio:.2f} |")
    lines.append("")
    return lines


def header(device: str) -> list[str]:
    dev = resolve_device(device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else (platform.processor() or platform.machine())
    load = f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "n/a"
    return [f"## Round time — {dt.date.today().isoformat()}, {dev} ({name}, {os.cpu_count()} CPUs)", "",
            (f"torch {torch.__version__}, Python {platform.python_version()}, torch threads "
            f"{torch.get_num_threads()}, load average at start {load}."), ""]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=["teach", "mnist-dir0.1", "all"], default="all")
    ap.add_argument("--rounds", type=int, default=None, help="default: 50 (teach), 3 (mnist-dir0.1 on CPU)")
    ap.add_argument("--repeats", type=int, default=None, help="default: 3 (teach, GPU), 2 (mnist-dir0.1 on CPU)")
    ap.add_argument("--algos", default="fedavg,fedala")
    ap.add_argument("--backends", default=None, help=("comma-separated, the first is the baseline (of "
                    + ", ".join(BACKENDS) + "); default: vectorised,loop (teach, GPU), auto-loop,"
                    "auto-workers-serial,auto-workers (mnist-dir0.1 on CPU)"))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: one per process)")
    ap.add_argument("--out", default=str(HERE / "results.md"))
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    names = ["teach", "mnist-dir0.1"] if args.preset == "all" else [args.preset]
    gpu = resolve_device(args.device).type == "cuda"
    lines = header(args.device)
    for name in names:
        mnist_cpu = name == "mnist-dir0.1" and not gpu
        rounds = args.rounds or (50 if name == "teach" else (20 if gpu else 3))
        repeats = args.repeats or (2 if mnist_cpu else 3)
        backends = (args.backends.split(",") if args.backends else
                    ["auto-loop", "auto-workers-serial", "auto-workers"] if mnist_cpu else ["vectorised", "loop"])
        unknown = [b for b in backends if b not in BACKENDS]
        if unknown:
            ap.error(f"unknown backend(s) {unknown}: use " + ", ".join(BACKENDS))
        lines += bench(name, rounds, repeats, args.algos.split(","), args.device, backends, args.threads or None,
                       record_train_loss=False if mnist_cpu else None)
    if hasattr(os, "getloadavg"):
        lines += [f"Load average at the end: {' / '.join(f'{x:.2f}' for x in os.getloadavg())} (1 / 5 / 15 min).",
                  ""]
    text = "\n".join(lines) + "\n"
    print(text)
    with open(args.out, "a") as fh:
        fh.write(text + "\n")
    print(f"appended to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
