"""Peak memory of the vectorised backend: 100 clients × the 4-layer CNN, 20 clients × ResNet-18.

    python benchmarks/memory.py                                   # both scenarios, several chunk sizes
    python benchmarks/memory.py --scenario cnn100 --chunks all,25,5
    python benchmarks/memory.py --device cuda --append benchmarks/results.md

What is measured: one short simulation per (scenario, chunk) on synthetic data of the scenario's shape
(random images, so no dataset is needed), each in a fresh process so that peaks do not leak from one
measurement into the next:

- on CUDA: ``torch.cuda.max_memory_allocated()`` (tensors only, not the caching allocator's reserve) and
  the memory allocated once the simulation is set up (data + every client's model): their difference is
  the working memory of training, ALA and evaluation;
- on CPU: the peak resident set size of the process (``ru_maxrss``), which also counts the Python
  interpreter and torch's libraries, and the RSS once the simulation is set up. Said so in the output.

``chunk`` caps the clients per ``vmap`` call (``VectorisedBackend(chunk_clients)``); "all" starts with
every client at once and lets the backend halve the chunk on CUDA out-of-memory — the final chunk and the
number of halvings are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

SCENARIOS = {
    # the paper's 4-layer CNN on MNIST-shaped data; FedALA so that ALA's working memory (features of the
    # lower layers, weight learning) is counted; 2 rounds: the second one runs ALA's start phase
    "cnn100": {"model": "fedavgcnn", "clients": 100, "shape": (1, 28, 28), "classes": 10, "algo": "fedala",
               "train": 60, "test": 20, "rounds": 2, "steps": 5},
    # ResNet-18 on Tiny-ImageNet-shaped data (3×64×64, 200 classes), as in the paper's Table 1; FedAvg
    # (ALA with p = 1 adds only the fc head's weights)
    "resnet20": {"model": "resnet18", "clients": 20, "shape": (3, 64, 64), "classes": 200, "algo": "fedavg",
                 "train": 30, "test": 10, "rounds": 1, "steps": 2},
}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(scenario: str, chunk: int | None, device: str, threads: int) -> dict:
    """One measurement in this process (call it in a fresh one)."""
    import numpy as np
    import torch

    from fedala_lab.config import DataConfig, RunConfig
    from fedala_lab.data.federated import FederatedData
    from fedala_lab.engine.simulate import Simulation

    torch.set_num_threads(threads)
    sc = SCENARIOS[scenario]
    g = np.random.default_rng(0)

    def client(n):
        x = g.uniform(-1, 1, (n, *sc["shape"])).astype(np.float32)
        return x, g.integers(0, sc["classes"], n).astype(np.int64)

    n = sc["clients"]
    data = FederatedData.from_arrays([client(sc["train"]) for _ in range(n)], [client(sc["test"]) for _ in range(n)],
                                     sc["classes"], name=f"synthetic-{scenario}")
    cfg = RunConfig(data=DataConfig(num_clients=n), model=sc["model"], algo=sc["algo"], rounds=sc["rounds"],
                    local_steps=sc["steps"], batch_size=10, record_train_loss=False, track_clients="none",
                    max_start_epochs=3, checkpoint_every=0, device=device,
                    backend="vectorised")  # what is measured; "auto" picks loop for large models on a CPU
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    sim = Simulation(cfg, data, chunk_clients=chunk)
    if cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        base = _rss_bytes()
    t0 = time.perf_counter()
    run = sim.run(progress=False)
    if cuda:
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    return {
        "scenario": scenario, "model": sc["model"], "clients": n, "algo": sc["algo"],
        "chunk": "all" if chunk is None else chunk, "final_chunk": sim.backend.chunk_clients or n,
        "oom_retries": getattr(sim.backend, "oom_retries", 0), "device": str(sim.device),
        "device_name": run.meta["env"]["device_name"], "measure": "cuda max_memory_allocated" if cuda
        else "process peak RSS", "setup_mb": base / 2**20, "peak_mb": peak / 2**20,
        "working_mb": (peak - base) / 2**20, "seconds": time.perf_counter() - t0, "threads": threads,
        "params_per_client": sum(v[0].numel() for v in sim.local_params.values()),
    }


def _child(scenario: str, chunk: str, device: str, threads: int) -> dict:
    """Run one measurement in a fresh Python process and return its JSON line."""
    cmd = [sys.executable, __file__, "--one", scenario, chunk, "--device", device, "--threads", str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"scenario": scenario, "chunk": chunk, "error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def to_markdown(rows: list[dict]) -> str:
    head = ("| scenario | model | clients | algo | chunk (start → final) | setup MB | peak MB | working MB | "
            "s | measure |")
    lines = [head, "|---|---|---:|---|---|---:|---:|---:|---:|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['scenario']} | | | | {r['chunk']} | | | | | error: {r['error']} |")
            continue
        ch = f"{r['chunk']} → {r['final_chunk']}" + (f" ({r['oom_retries']} OOM)" if r["oom_retries"] else "")
        lines.append(f"| {r['scenario']} | {r['model']} | {r['clients']} | {r['algo']} | {ch} | "
                     f"{r['setup_mb']:.0f} | {r['peak_mb']:.0f} | {r['working_mb']:.0f} | {r['seconds']:.1f} | "
                     f"{r['measure']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="all", help="cnn100, resnet20 or all")
    ap.add_argument("--chunks", default=None, help="comma-separated chunk sizes or 'all' (default: all and "
                                                   "about a quarter and a tenth of the clients)")
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (CPU)")
    ap.add_argument("--append", type=Path, default=None, help="append the table to this Markdown file")
    ap.add_argument("--one", nargs=2, metavar=("SCENARIO", "CHUNK"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    from fedala_lab.compute.device import resolve_device

    args.device = str(resolve_device(args.device))
    if args.one:
        sc, ch = args.one
        print(json.dumps(measure(sc, None if ch == "all" else int(ch), args.device, args.threads)))
        return 0
    names = list(SCENARIOS) if args.scenario == "all" else args.scenario.split(",")
    rows = []
    for name in names:
        n = SCENARIOS[name]["clients"]
        chunks = args.chunks.split(",") if args.chunks else ["all", str(max(1, n // 4)), str(max(1, n // 10))]
        for ch in chunks:
            r = _child(name, ch.strip(), args.device, args.threads)
            rows.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
    table = to_markdown(rows)
    print(table)
    if args.append:
        import datetime

        import torch

        load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
        what = ("peak `torch.cuda.max_memory_allocated()`" if args.device.startswith("cuda") else
                "peak resident set size of a fresh process per row (no GPU: CPU RSS, which includes Python "
                "and torch's libraries)")
        note = (f"\n## Peak memory of the vectorised backend, {args.device} "
                f"({datetime.date.today().isoformat()}, benchmarks/memory.py)\n\n"
                f"One short simulation per row on synthetic data of the scenario's shape; {what}. setup = "
                f"after data and every client's model are placed, working = peak − setup. chunk = clients "
                f"per vmap call.\n\n{table}\n\n{platform.processor() or platform.machine()}, "
                f"{os.cpu_count()} cores, torch {torch.__version__}, torch threads {args.threads}; load "
                f"average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} when it finished. Command: "
                f"`python benchmarks/memory.py --device {args.device}`.\n")
        with open(args.append, "a") as f:
            f.write(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
