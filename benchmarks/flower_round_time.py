"""Seconds per round: fedala_lab's engine against the same runs as a Flower app (the overhead of going
distributed), on one machine.

    python benchmarks/flower_round_time.py                       # teach, fedavg and fedala, 10 rounds, 2 repeats
    python benchmarks/flower_round_time.py --rounds 20 --repeats 3 --backends loop,auto

For each algorithm and backend (the config's ``backend``: "loop" is the one on which Flower's runs equal
the engine's bit for bit; "auto" is the default, vectorised for teach's MLP) three ways to run one config:

- ``engine``: ``Simulation.run`` (all clients in one process, vectorised where the backend says so);
- ``split``: the split round in one process without Flower (fedala_lab.flower.run_split): each client's
  half of the round called on its own, its rows saved and loaded as bytes — the cost of cutting the round;
- ``flower``: Flower's simulation engine (``simulate_flower``: Ray, one simulated SuperNode per client,
  ``client_resources={"num_cpus": 1}``, so one client process per core), messages and Context.state
  included. All configs of a repeat share one simulation; its start (Ray, the client processes building
  their data and model) is reported apart, as the wall time not spent in rounds.

Seconds per round: the median of rounds 2…R (round 1 also pays first calls and, on Flower, the client
processes' first messages), then the median over repeats; repeats alternate the order of the three. The
load average (``os.getloadavg``, as ``uptime`` shows) is read before and after each. Every run's final
global model is compared with the engine's (max |Δ|; 0 = bit for bit). Appends its tables to
benchmarks/results.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # offline, before flwr loads
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from fedala_lab.engine.simulate import Simulation
from fedala_lab.experiments.presets import preset
from fedala_lab.flower import simulate_flower, split_simulation

HERE = Path(__file__).resolve().parent
WAYS = ("engine", "split", "flower")


def load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def later(seconds) -> float:
    """Median seconds of rounds 2…R."""
    seconds = list(seconds)
    return statistics.median(seconds[1:] or seconds)


def engine(cfg) -> dict:
    before, t0 = load(), time.perf_counter()
    sim = Simulation(cfg)
    run = sim.run(progress=False)
    return {"wall": time.perf_counter() - t0, "rounds": list(run.rounds["seconds"]), "acc": run.final_acc,
            "global": sim.global_params, "load": (before, load())}


def split(cfg) -> dict:
    before, t0 = load(), time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = split_simulation(cfg)
    run = server.to_run()
    return {"wall": time.perf_counter() - t0, "rounds": list(run.rounds["seconds"]), "acc": run.final_acc,
            "global": server.sim.global_params, "load": (before, load())}


def flower(cfgs) -> tuple[list[dict], float, tuple[float, float]]:
    """All configs in one simulated federation: per config its rounds; and the start (wall not in rounds)."""
    before, t0 = load(), time.perf_counter()
    servers = simulate_flower(cfgs, progress=False,
                              backend_config={"client_resources": {"num_cpus": 1},
                                              "init_args": {"num_cpus": os.cpu_count()}})
    wall = time.perf_counter() - t0
    out = [{"wall": float(s.run.rounds["seconds"].sum()), "rounds": list(s.run.rounds["seconds"]),
            "acc": s.run.final_acc, "global": s.side.sim.global_params} for s in servers]
    return out, wall - sum(o["wall"] for o in out), (before, load())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="teach")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--algos", default="fedavg,fedala")
    ap.add_argument("--backends", default="loop,auto", help="the configs' backend (auto: vectorised for teach)")
    ap.add_argument("--out", default=str(HERE / "results.md"), help="append the tables here ('-': print only)")
    args = ap.parse_args(argv)
    algos, backends = args.algos.split(","), args.backends.split(",")
    cfgs = {(a, b): preset(args.preset, algo=a, rounds=args.rounds, backend=b, device="cpu", checkpoint_every=0)
            for a in algos for b in backends}
    start_load = load()
    results: dict[tuple[str, str, str], list[dict]] = {}
    starts, flower_loads = [], []
    engine(next(iter(cfgs.values())).replace(rounds=1))  # warm-up: first torch calls, the data built once
    for rep in range(args.repeats):
        order = WAYS if rep % 2 == 0 else WAYS[::-1]
        for way in order:
            if way == "flower":
                outs, start, loads = flower(list(cfgs.values()))
                starts.append(start)
                flower_loads.append(loads)
                for key, o in zip(cfgs, outs):
                    results.setdefault((*key, way), []).append({**o, "load": loads})
            else:
                for key, cfg in cfgs.items():
                    results.setdefault((*key, way), []).append((engine if way == "engine" else split)(cfg))
            print(f"rep {rep + 1}/{args.repeats} {way} done (load {load():.2f})", file=sys.stderr, flush=True)

    import flwr
    import ray

    lines = [(f"## Flower against the engine: seconds per round — {dt.date.today().isoformat()}, cpu "
             f"({platform.machine()}, {os.cpu_count()} CPUs) (`flower_round_time.py`)"), "",
             (f"`{args.preset}`: {args.rounds} rounds, {cfgs[(algos[0], backends[0])].data.num_clients} clients; "
              f"median of rounds 2…{args.rounds}, then of {args.repeats} repeats (order alternated). torch "
              f"{torch.__version__}, flwr {flwr.__version__}, ray {ray.__version__}, Python "
              f"{platform.python_version()}. Load average (1 min) at start {start_load:.2f}."), "",
             ("| algorithm | backend | way | s/round (rounds 2+) | round 1 | run (s) | ÷ engine | load before → after "
             "| final acc % | max abs diff of G vs engine | vs engine on loop |"),
             "|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|"]

    def diff(a, b) -> str:
        if b is None:
            return "–"
        return f"{max((a[k].cpu() - b[k].cpu()).abs().max().item() for k in b):.1e}"

    for a in algos:
        for b in backends:
            base = results[(a, b, "engine")]
            base_s = statistics.median(later(r["rounds"]) for r in base)
            for way in WAYS:
                rs = results[(a, b, way)]
                s = statistics.median(later(r["rounds"]) for r in rs)
                r1 = statistics.median(r["rounds"][0] for r in rs)
                wall = statistics.median(r["wall"] for r in rs)
                loads = ", ".join(f"{x:.1f} → {y:.1f}" for x, y in (r["load"] for r in rs))
                loop = results.get((a, "loop", "engine"))
                lines.append(f"| {a} | {b} | {way} | {s:.3f} | {r1:.2f} | {wall:.1f} | {s / base_s:.1f} | {loads} "
                             f"| {100 * rs[0]['acc']:.2f} | {diff(rs[0]['global'], base[0]['global'])} "
                             f"| {diff(rs[0]['global'], loop[0]['global'] if loop else None)} |")
    lines += ["", ("A Flower client (and the split round's) trains one client at a time, on the loop backend whatever "
                   "the config's `auto` picks for the engine (vectorised for teach: all clients in one vmap call), so "
                   "its runs equal the engine's loop runs bit for bit; the engine's vectorised run differs from its "
                   "own loop run by float rounding, grown over the rounds."), "",
              (f"Start of a Flower simulation (Ray, {os.cpu_count()} client processes building their data "
                   f"and model, the handshake; wall time outside the rounds): "
                   + ", ".join(f"{s:.1f} s" for s in starts)
                   + " (load " + ", ".join(f"{x:.1f} → {y:.1f}" for x, y in flower_loads) + ")."), ""]
    text = "\n".join(lines)
    print(text)
    if args.out != "-":
        with open(args.out, "a") as f:
            f.write("\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
