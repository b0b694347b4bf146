"""Seconds per round: fedala_lab's engine against the same runs as a Flower app, in Flower's simulation engine and
on a Flower deployment (the overhead of going distributed), side by side on one machine.

    python benchmarks/flower_round_time.py            # teach-digits, 2 clients, fedavg and fedala, 5 rounds, 3 repeats
    python benchmarks/flower_round_time.py --preset teach --clients 20 --ways engine,split,flower --backends loop,auto

For each algorithm and backend (the config's ``backend``: "loop" is the one on which Flower's runs equal the
engine's bit for bit; "auto" is the default, vectorised for small MLPs) up to four ways to run one config:

- ``engine``: ``Simulation.run`` (all clients in one process, vectorised where the backend says so);
- ``split``: the split round in one process without Flower (fedala_lab.flower.run_split): each client's
  half of the round called on its own, its rows saved and loaded as bytes — the cost of cutting the round;
- ``flower``: Flower's simulation engine (``simulate_flower``: Ray, one simulated SuperNode per client,
  ``client_resources={"num_cpus": 1}``, so one client process per core), messages and Context.state
  included. All configs of a repeat share one simulation; its start (Ray, the client processes building
  their data and model) is reported apart, as the wall time not spent in rounds;
- ``deploy``: Flower's deployment engine on 127.0.0.1 (fedala_lab.flower.local: a SuperLink and a SuperNode per
  client, as tests/test_flower_deploy.py runs them), one ``flwr run`` per config; a SuperNode starts a Python
  process for every message (torch imported, the data and model built), which a round pays for. Its start
  (the ServerApp's process, the SuperNodes' handshake) is the ``flwr run`` wall time not spent in rounds.

Seconds per round: the run's own ``rounds.seconds`` (the server's wall clock from the orders to the new global
model: communication included), median of rounds 2…R (round 1 also pays first calls), then the median over
repeats; repeats alternate the order of the ways. The load average (``os.getloadavg``, as ``uptime`` shows) is
read before and after each. Every run's final global model is compared with the engine's (max |Δ|; 0 = bit for
bit). Appends its tables to benchmarks/results.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # offline, before flwr loads
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from fedala_lab.engine.simulate import Simulation
from fedala_lab.experiments.presets import preset
from fedala_lab.flower import simulate_flower, split_simulation
from fedala_lab.flower.local import LocalFederation
from fedala_lab.record.store import RunStore

HERE = Path(__file__).resolve().parent
WAYS = ("engine", "split", "flower", "deploy")
MAX_NODES = 8  # a SuperNode per client on one machine, each starting a Python process per message


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
            "global": server.global_params, "load": (before, load())}


def flower(cfgs) -> list[dict]:
    """All configs in one simulated federation: per config its rounds; the start (wall not in rounds) on the
    first."""
    before, t0 = load(), time.perf_counter()
    servers = simulate_flower(cfgs, progress=False,
                              backend_config={"client_resources": {"num_cpus": 1},
                                              "init_args": {"num_cpus": os.cpu_count()}})
    wall, loads = time.perf_counter() - t0, (before, load())
    out = [{"wall": float(s.run.rounds["seconds"].sum()), "rounds": list(s.run.rounds["seconds"]),
            "acc": s.run.final_acc, "global": s.side.global_params, "load": loads} for s in servers]
    out[0]["start"] = wall - sum(o["wall"] for o in out)
    return out


def deploy(fed: LocalFederation, cfgs, args, folder: Path) -> list[dict]:
    """Each config as one ``flwr run`` on the local deployment, stored in ``folder``."""
    out = []
    for cfg in cfgs:
        store = RunStore(folder)
        rc = (f"preset='{args.preset}' algo='{cfg.algo}' rounds={cfg.rounds} store='{store.root}' resume=false "
              f"set='num_clients={cfg.data.num_clients} backend={cfg.backend}'")
        before, t0 = load(), time.perf_counter()
        code, text, _ = fed.run(rc, timeout=60 + 120 * cfg.rounds)
        wall = time.perf_counter() - t0
        run = store.find(cfg)
        if run is None:
            raise SystemExit(f"flwr run stored no run of {cfg.algo} (exit {code}):\n{text[-3000:]}")
        out.append({"wall": wall, "rounds": list(run.rounds["seconds"]), "acc": run.final_acc,
                    "global": store.load_state(run.path, cfg.rounds)["global"], "load": (before, load()),
                    "start": wall - float(run.rounds["seconds"].sum())})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="teach-digits")
    ap.add_argument("--clients", type=int, default=2, help="the configs' num_clients (a SuperNode each on deploy)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--algos", default="fedavg,fedala")
    ap.add_argument("--backends", default="loop", help="the configs' backend (auto: vectorised for small MLPs)")
    ap.add_argument("--ways", default=",".join(WAYS), help=f"a subset of {', '.join(WAYS)}")
    ap.add_argument("--out", default=str(HERE / "results.md"), help="append the tables here ('-': print only)")
    args = ap.parse_args(argv)
    algos, backends, ways = args.algos.split(","), args.backends.split(","), args.ways.split(",")
    if not set(ways) <= set(WAYS) or "engine" not in ways:
        ap.error(f"--ways: engine and any of {', '.join(WAYS[1:])}")
    if "deploy" in ways and args.clients > MAX_NODES:
        ap.error(f"--clients {args.clients} with deploy: at most {MAX_NODES} SuperNodes on one machine")
    cfgs = {(a, b): preset(args.preset, algo=a, rounds=args.rounds, backend=b, device="cpu", checkpoint_every=0,
                           num_clients=args.clients) for a in algos for b in backends}
    start_load = load()
    results: dict[tuple[str, str, str], list[dict]] = {}
    starts: dict[str, list[float]] = {"flower": [], "deploy": []}
    engine(next(iter(cfgs.values())).replace(rounds=1))  # warm-up: first torch calls, the data built once
    with tempfile.TemporaryDirectory(prefix="flower-round-time-") as tmp, \
            (LocalFederation(Path(tmp) / "federation", clients=args.clients) if "deploy" in ways
             else contextlib.nullcontext()) as fed:
        for rep in range(args.repeats):
            order = ways if rep % 2 == 0 else ways[::-1]
            for way in order:
                if way in ("flower", "deploy"):
                    outs = (flower(list(cfgs.values())) if way == "flower"
                            else deploy(fed, list(cfgs.values()), args, Path(tmp) / f"runs-{rep}"))
                    starts[way] += [o["start"] for o in outs if "start" in o]
                    for key, o in zip(cfgs, outs):
                        results.setdefault((*key, way), []).append(o)
                else:
                    for key, cfg in cfgs.items():
                        results.setdefault((*key, way), []).append((engine if way == "engine" else split)(cfg))
                print(f"rep {rep + 1}/{args.repeats} {way} done (load {load():.2f})", file=sys.stderr, flush=True)
    end_load = load()

    import flwr
    import ray

    n = args.clients
    lines = [(f"## Flower against the engine: seconds per round — {dt.date.today().isoformat()}, cpu "
             f"({platform.machine()}, {os.cpu_count()} CPUs) (`flower_round_time.py`)"), "",
             (f"`{args.preset}`, {n} clients, {args.rounds} rounds, ways {', '.join(ways)}; median of rounds "
              f"2…{args.rounds}, then of {args.repeats} repeats (order of the ways alternated). torch "
              f"{torch.__version__}, flwr {flwr.__version__}, ray {ray.__version__}, Python "
              f"{platform.python_version()}. Load average (1 min): {start_load:.2f} at the start, {end_load:.2f} "
              "at the end — a machine shared with other jobs: read the ratios, not the seconds."), "",
             ("| algorithm | backend | way | s/round (rounds 2+) | round 1 | run (s) | ÷ engine | load before → after "
              "| final acc % | max abs diff of G vs engine |"),
             "|---|---|---|---:|---:|---:|---:|---|---:|---:|"]

    def diff(a, b) -> str:
        return f"{max((a[k].cpu() - b[k].cpu()).abs().max().item() for k in b):.1e}"

    for a in algos:
        for b in backends:
            base = results[(a, b, "engine")]
            base_s = statistics.median(later(r["rounds"]) for r in base)
            for way in ways:
                rs = results[(a, b, way)]
                s = statistics.median(later(r["rounds"]) for r in rs)
                r1 = statistics.median(r["rounds"][0] for r in rs)
                wall = statistics.median(r["wall"] for r in rs)
                loads = ", ".join(f"{x:.1f} → {y:.1f}" for x, y in (r["load"] for r in rs))
                lines.append(f"| {a} | {b} | {way} | {s:.3f} | {r1:.2f} | {wall:.1f} | {s / base_s:.1f} | {loads} "
                             f"| {100 * rs[0]['acc']:.2f} | {diff(rs[0]['global'], base[0]['global'])} |")
    lines.append("")
    starts_of = {"flower": (f"a Flower simulation (Ray, {os.cpu_count()} client processes building their data and "
                            "model, the handshake; once per repeat for all configs)"),
                 "deploy": ("a `flwr run` on the deployment (the ServerApp's process, the SuperNodes' handshake; once "
                            "per config)")}
    for way, what in starts_of.items():
        if starts[way]:
            s = starts[way]
            lines += [(f"Start of {what}, wall time outside the rounds: median {statistics.median(s):.1f} s (of "
                       f"{len(s)}: {min(s):.1f}–{max(s):.1f} s)."), ""]
    text = "\n".join(lines)
    print(text)
    if args.out != "-":
        with open(args.out, "a") as f:
            f.write("\n" + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
