"""The same round of local training with and without a busy neighbour process, for two thread choices.

    python benchmarks/busy_neighbour.py                 # 4 clients of the shared MNIST partition, 3 repeats
    python benchmarks/busy_neighbour.py --clients 2 --repeats 5

Why: torch's default is one thread per core. On a 2-core machine where another process keeps one core
busy, every small training step waits for the thread that shares its core with that process; a whole
MNIST round went from ≈ 40 s to 740 s that way. fedala_lab therefore uses one thread per process on a
CPU by default (``threads=None``, see ``Simulation.threads``). This script measures both choices side by
side, on a quiet machine and next to a busy loop (``while True: pass`` in a second process), interleaved
so that drifting load hits every variant alike, and appends the medians to benchmarks/results.md with
the load average before each block.

Data: the first ``--clients`` clients of the FedALA repository's MNIST Dir(0.1) partition (FedAvgCNN,
batch 10, one local epoch in stored order: a few hundred SGD steps per client), FedAvg, one round, no
evaluation of the train split. Only the round's ``train_seconds`` are compared.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from fedala_lab.data.federated import FederatedData
from fedala_lab.engine.simulate import Simulation
from fedala_lab.errors import DataError
from fedala_lab.experiments.presets import check_partition, preset

HERE = Path(__file__).resolve().parent
BUSY = "while True:\n    pass\n"


def subset(data: FederatedData, n: int) -> FederatedData:
    """The first ``n`` clients of ``data``."""
    train = [tuple(t.numpy() for t in data.client_train(i)) for i in range(n)]
    test = [tuple(t.numpy() for t in data.client_test(i)) for i in range(n)]
    return FederatedData.from_arrays(train, test, data.num_classes, name=f"{data.name}[:{n}]")


def train_seconds(cfg, data) -> float:
    sim = Simulation(cfg, data)
    row = None

    def keep(_sim, r):
        nonlocal row
        row = r

    sim.run(progress=False, callback=keep)
    return float(row["train_seconds"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-write", action="store_true", help="print only, do not append to results.md")
    args = ap.parse_args(argv)
    cfg = preset("mnist-dir0.1")
    try:
        check_partition(cfg)
    except DataError as err:
        sys.exit(str(err))

    full = FederatedData.from_config(cfg.data)
    data = subset(full, args.clients)
    base = preset("mnist-dir0.1", algo="fedavg", rounds=1, num_clients=args.clients, record_train_loss=False,
                  checkpoint_every=0, device="cpu", backend="loop")
    steps = int(sum(int(n) // base.batch_size for n in data.train_sizes))
    variants = {f"torch default ({torch.get_num_threads()} threads)": torch.get_num_threads(),
                "fedala_lab default (threads=None: 1 per process)": None}
    train_seconds(base.replace(threads=1), data)  # warm-up: first calls pay one-off costs

    results: dict[tuple[str, str], list[float]] = {}
    loads: dict[str, list[float]] = {}
    for neighbour in ("quiet", "busy neighbour"):
        proc = subprocess.Popen([sys.executable, "-c", BUSY]) if neighbour != "quiet" else None
        try:
            if proc:
                time.sleep(2.0)  # let the scheduler see it
            loads[neighbour] = [os.getloadavg()[0]]
            for rep in range(args.repeats):
                for label, threads in variants.items():
                    s = train_seconds(base.replace(threads=threads), data)
                    results.setdefault((neighbour, label), []).append(s)
                    print(f"{neighbour:>15} | {label:<48} rep {rep + 1}: {s:7.2f} s "
                          f"({1000 * s / steps:.2f} ms/step)", flush=True)
            loads[neighbour].append(os.getloadavg()[0])
        finally:
            if proc:
                proc.kill()
                proc.wait()

    lines = [
        (f"### Busy neighbour: {dt.date.today()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, torch {torch.__version__}"),
        "",
        (f"One FedAvg round of local training on the first {args.clients} clients of the shared MNIST "
        f"Dir(0.1) partition ({steps} SGD steps, FedAvgCNN, batch 10, loop backend), {args.repeats} repeats "
        "interleaved; `python benchmarks/busy_neighbour.py`. Busy neighbour: a second process running "
        "`while True: pass`."),
        "",
        "| machine | threads | median train s | ms/step | × quiet, same threads |",
        "|---|---|---:|---:|---:|",
    ]
    for neighbour in ("quiet", "busy neighbour"):
        for label in variants:
            med = statistics.median(results[(neighbour, label)])
            quiet = statistics.median(results[("quiet", label)])
            lines.append(f"| {neighbour} (load {loads[neighbour][0]:.1f}→{loads[neighbour][1]:.1f}) | {label} | "
                         f"{med:.2f} | {1000 * med / steps:.2f} | {med / quiet:.2f} |")
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    if not args.no_write:
        with open(HERE / "results.md", "a") as fh:
            fh.write("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
