"""Seconds per round, loop vs vectorised backend, side by side in one process.

    python benchmarks/round_time.py                       # teach (50 rounds) and mnist-dir0.1 (3 rounds)
    python benchmarks/round_time.py --preset teach --repeats 5
    python benchmarks/round_time.py --preset mnist-dir0.1 --rounds 3 --device cuda

Every configuration is run ``--repeats`` times, interleaved (A B A B …) so that machine noise hits both
backends alike; we report medians and the loop/vectorised ratio. Results are appended to
benchmarks/results.md with the device, versions and date. Nothing is cached: each run is simulated.
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

from fedala_lab.data.federated import FederatedData
from fedala_lab.engine.simulate import Simulation, resolve_device
from fedala_lab.experiments.presets import preset

HERE = Path(__file__).resolve().parent


def one(cfg, data) -> dict:
    sim = Simulation(cfg, data)
    t0 = time.perf_counter()
    run = sim.run(progress=False)
    wall = time.perf_counter() - t0
    r = run.rounds
    return {"wall": wall, "per_round": list(r["seconds"]), "acc": run.final_acc,
            "init": list(r["init_seconds"]), "train": list(r["train_seconds"]), "eval": list(r["eval_seconds"])}


def bench(name: str, rounds: int, repeats: int, algos: list[str], device: str,
          threads: int | None = None) -> list[str]:
    # threads in the config too: with None the run picks one thread for small models on a CPU
    cfg0 = preset(name, rounds=rounds, device=device, checkpoint_every=0, threads=threads)
    dev = resolve_device(device)
    t = time.perf_counter()
    data = FederatedData.from_config(cfg0.data, dev)
    load = time.perf_counter() - t
    results: dict[tuple[str, str], list[dict]] = {}
    # warm-up: first calls of torch.func transforms pay one-off costs
    Simulation(cfg0.replace(rounds=1, algo="fedavg"), data).run(progress=False)
    for rep in range(repeats):
        for algo in algos:
            for backend in ("vectorised", "loop"):
                cfg = cfg0.replace(algo=algo, backend=backend)
                res = one(cfg, data)
                results.setdefault((algo, backend), []).append(res)
                print(f"[{name}] rep {rep + 1}/{repeats} {algo:>8} {backend:>10}: {res['wall']:.2f} s "
                      f"(final acc {100 * res['acc']:.2f} %)", file=sys.stderr, flush=True)
    lines = [(f"### `{name}`: {rounds} rounds, {cfg0.data.num_clients} clients, model {cfg0.model}, "
             f"batch {cfg0.batch_size}; median of {repeats} interleaved repeats"), "",
             f"Data loaded and placed on {dev} in {load:.2f} s (once, outside the timings).", "",
             ("| algorithm | backend | run (s) | median s/round | round 1 | round 2 | later rounds (median) "
             "| init / eval / train s per later round | loop ÷ vectorised |"),
             "|---|---|---|---|---|---|---|---|---|"]
    for algo in algos:
        vec_wall = statistics.median(r["wall"] for r in results[(algo, "vectorised")])
        for backend in ("vectorised", "loop"):
            rs = results[(algo, backend)]
            wall = statistics.median(r["wall"] for r in rs)
            per = statistics.median(statistics.median(r["per_round"]) for r in rs)
            r1 = statistics.median(r["per_round"][0] for r in rs)
            r2 = statistics.median(r["per_round"][1] for r in rs) if rounds > 1 else float("nan")
            later = statistics.median(statistics.median(r["per_round"][2:]) for r in rs) if rounds > 2 else float("nan")
            phases = " / ".join(
                f"{statistics.median(statistics.median(r[k][2:] or r[k]) for r in rs):.3f}"
                for k in ("init", "eval", "train"))
            ratio = f"{wall / vec_wall:.2f}" if backend == "loop" else "1.00"
            lines.append(f"| {algo} | {backend} | {wall:.2f} | {per:.3f} | {r1:.3f} | {r2:.3f} | {later:.3f} | "
                         f"{phases} | {ratio} |")
    total = sum(statistics.median(r["wall"] for r in results[(a, "vectorised")]) for a in algos)
    lines += ["", (f"Vectorised, {' + '.join(algos)} together: **{total:.2f} s** "
                  f"({rounds} rounds each, simulation only)."), ""]
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
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--algos", default="fedavg,fedala")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--out", default=str(HERE / "results.md"))
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    names = ["teach", "mnist-dir0.1"] if args.preset == "all" else [args.preset]
    gpu = resolve_device(args.device).type == "cuda"
    lines = header(args.device)
    for name in names:
        rounds = args.rounds or (50 if name == "teach" else (20 if gpu else 3))
        repeats = args.repeats if name == "teach" or gpu else 1
        lines += bench(name, rounds, repeats, args.algos.split(","), args.device, args.threads or None)
    text = "\n".join(lines) + "\n"
    print(text)
    with open(args.out, "a") as fh:
        fh.write(text + "\n")
    print(f"appended to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
